"""On-disk cache of judge replies keyed by a hash of (model, messages, settings)."""
from __future__ import annotations

import hashlib
import json
import os
import tempfile
from typing import Any, Mapping, Sequence


def cache_key(model: str, messages: Sequence[Mapping[str, str]],
              settings: Mapping[str, Any]) -> str:
  """Stable SHA-256 hex digest; the API key and the server URL are deliberately not part of it."""
  blob = json.dumps({"model": model, "messages": list(messages), "settings": dict(settings)},
                    sort_keys=True, ensure_ascii=True, separators=(",", ":"))
  return hashlib.sha256(blob.encode("ascii")).hexdigest()


class DiskCache:
  """One small JSON file per reply, written atomically (safe with concurrent writers)."""

  def __init__(self, directory: str):
    self.directory = os.path.abspath(directory)
    os.makedirs(self.directory, exist_ok=True)

  def _path(self, key: str) -> str:
    return os.path.join(self.directory, key[:2], key + ".json")

  def get(self, key: str) -> str | None:
    """The cached reply text, or None (missing or unreadable entries are misses)."""
    try:
      with open(self._path(key), encoding="utf-8") as f:
        entry = json.load(f)
    except (OSError, ValueError):
      return None
    reply = entry.get("reply") if isinstance(entry, dict) else None
    return reply if isinstance(reply, str) else None

  def put(self, key: str, reply: str) -> None:
    path = self._path(key)
    os.makedirs(os.path.dirname(path), exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=os.path.dirname(path), suffix=".tmp")
    try:
      with os.fdopen(fd, "w", encoding="utf-8") as f:
        json.dump({"reply": reply}, f)
      os.replace(tmp, path)
    except BaseException:
      if os.path.exists(tmp):
        os.unlink(tmp)
      raise

  def __len__(self) -> int:
    return sum(name.endswith(".json") for _, _, names in os.walk(self.directory) for name in names)
