"""On-disk cache of judge replies keyed by a hash of (endpoint, model, template, messages,
sampling settings)."""
from __future__ import annotations

import dataclasses
import hashlib
import json
import os
import tempfile
from typing import Any, Mapping, Sequence


def _digest(obj: Any) -> str:
  blob = json.dumps(obj, sort_keys=True, ensure_ascii=True, separators=(",", ":"), default=repr)
  return hashlib.sha256(blob.encode("ascii")).hexdigest()


def template_hash(system_prompt: str, rubric: Any, limits: Any, mode: str, compact: bool) -> str:
  """Hash of what shapes a prompt besides its trajectories: the rendered system prompt (the
  template with the rubric in it), the rubric itself (dimensions, weights), the render limits,
  the mode and the verdict format."""
  as_data = lambda x: dataclasses.asdict(x) if dataclasses.is_dataclass(x) else x
  return _digest({"system": system_prompt, "rubric": as_data(rubric), "limits": as_data(limits),
                  "mode": mode, "compact": bool(compact)})


def cache_key(endpoint: str, model: str, messages: Sequence[Mapping[str, str]],
              settings: Mapping[str, Any], template: str = "") -> str:
  """Stable SHA-256 hex digest of the endpoint (base URL, trailing "/" ignored), the model, the
  template hash, the messages and the sampling settings (temperature, max_tokens,
  response_format, ...). Two servers that serve the same model name never share an entry. The
  API key is deliberately not part of it."""
  return _digest({"endpoint": endpoint.rstrip("/"), "model": model, "template": template,
                  "messages": list(messages), "settings": dict(settings)})


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
