"""A pinned start: the policy a run begins from, built once, committed, loaded instead of SFT.

``start.name`` names it: a folder ``arenarl_jax/starts/<name>/`` (package data, so an installed
wheel carries it) or, with ``start.dir``, any folder. It holds the weights (``model.safetensors``
and ``config.json``, the HF layout ``models/loading.py`` reads) or, with ``start.delta_rank`` > 0,
only their low-rank delta against the weights SFT began from (``delta.safetensors``,
``sft/delta.py``), the tokenizer and ``START.json``:

  commit, dirty       the code that built it (git; ``dirty`` when the tree had changes)
  settings, settings_hash
                      every config value the build reads (:func:`build_settings` of the
                      config's flat keys, ``config_tree.flat``) and a hash
  dataset             the built dataset's name and the SHA-256 of its files
  sft                 the SFT curve: steps, first and last loss, the loss at every tenth
  validation          greedy evaluation on ``eval.split``: overall and per subtask (valid,
                      limit stops, met, content met, solved, first-call place) and per task
                      (met, total, content met, valid, finish reason)
  cpu, wall_s         the machine kind that built it (reproduction is exact on that kind) and
                      the build's wall time
  delta               (a delta start) rank, dtype, bytes, and the base: its source and the
                      SHA-256 of its weights, checked when the start loads

``--config.start.build=True`` (``configs/quickstart.py:build_start``) builds it: SFT as the
config says, the validation evaluation, then the folder. A run with ``start.name`` and no build
loads it and skips SFT. A start is stale when a value the build reads differs from the config
that would build it now (:func:`stale_keys`): the suite checks the committed one.
"""
from __future__ import annotations

import hashlib
import json
import os
import shutil
import subprocess
from typing import Any, Mapping

from arenarl_jax import config_tree
from arenarl_jax.models.config import to_hf_config
from arenarl_jax.models.safetensors_io import export_hf_dir
from arenarl_jax.sft import delta
from arenarl_jax.sft.settings import StartSettings

STARTS_DIR = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "starts")
START_FILE = "START.json"
DELTA_FILE = "delta.safetensors"
# What the build reads: a key is read when it equals one of these or lies under one.
BUILD_READS = ("seed", "model.init", "model.source", "model.keep_layers", "model.compute_dtype",
               "start.delta_rank", "start.delta_dtype", "env", "data", "sft", "eval.split",
               "eval.tasks_per_subtask", "eval.seed", "sampling.max_new_tokens",
               "sampling.max_turns", "sampling.cache_len", "sampling.top_p", "sampling.top_k",
               "rollout.max_total_tokens", "rollout.max_observation_tokens", "rollout.system")
# ... except these: where data is kept, how fast it is read, how often SFT logs and saves, and
# settings of the checker (not the records, the weights nor the verifier).
NOT_READ = ("data.dir", "data.read_threads", "data.prefetch", "sft.log_every",
            "sft.checkpoint_every",
            "env.travel.wrong_fact_cost", "env.research.cache_dir", "env.mcp")


def start_dir(start: StartSettings) -> str:
  """The folder of the start ``start.name`` names (``start.dir`` when given)."""
  if not start.name:
    raise ValueError("start.name is empty: no pinned start named")
  return start.dir or os.path.join(STARTS_DIR, start.name)


def _read(key: str) -> bool:
  under = lambda k, p: k == p or k.startswith(p + ".")
  return any(under(key, p) for p in BUILD_READS) and not any(under(key, p) for p in NOT_READ)


def build_settings(flat: Mapping[str, Any]) -> dict[str, Any]:
  """Every value the build reads, by dotted key, of a config's flat keys (``config_tree.flat``)."""
  return {k: v for k, v in flat.items() if _read(k)}


def settings_hash(settings: Mapping[str, Any]) -> str:
  return hashlib.sha256(json.dumps(dict(settings), sort_keys=True).encode()).hexdigest()[:16]


def stale_keys(recorded: Mapping[str, Any], current: Mapping[str, Any],
               defaults: Mapping[str, Any] | None = None) -> list[str]:
  """The keys whose values make a start built with ``recorded`` differ from one built now: a
  changed or removed key, or a key the record lacks at a value other than its default (a key
  added later at the value that keeps the old behaviour changes nothing)."""
  if defaults is None:
    defaults = build_settings(config_tree.flat(config_tree.make_base_config()))
  return config_tree.stale_keys(recorded, current, defaults)


def read_record(directory: str) -> dict[str, Any]:
  path = os.path.join(directory, START_FILE)
  if not os.path.isfile(path):
    raise FileNotFoundError(f"{path}: no pinned start here (build it with start.build=True)")
  with open(path, encoding="utf-8") as f:
    return json.load(f)


def check(start: StartSettings, flat: Mapping[str, Any]) -> list[str]:
  """:func:`stale_keys` of the start ``start`` names against the values the build's config
  (its flat keys, ``config_tree.flat``) holds now, each as ``key: recorded -> now``."""
  record = read_record(start_dir(start))
  now = build_settings(flat)
  return [f"{k}: {record['settings'].get(k, '<absent>')!r} -> {now.get(k, '<absent>')!r}"
          for k in stale_keys(record["settings"], now)]


def git_state(root: str) -> tuple[str, bool]:
  """(commit, dirty) of the repository holding ``root``; ("unknown", True) without git."""
  try:
    commit = subprocess.run(["git", "rev-parse", "HEAD"], cwd=root, check=True,
                            capture_output=True, text=True).stdout.strip()
    status = subprocess.run(["git", "status", "--porcelain"], cwd=root, check=True,
                            capture_output=True, text=True).stdout
    return commit, bool(status.strip())
  except (OSError, subprocess.CalledProcessError):
    return "unknown", True


def dataset_name(path: str) -> str:
  """The built dataset's name: the folder that names its settings (above a version folder)."""
  path = os.path.normpath(path)
  base = os.path.basename(path)
  return os.path.basename(os.path.dirname(path)) if base[:1].isdigit() else base


def dataset_digest(path: str) -> str:
  h = hashlib.sha256()
  for root, _, files in sorted(os.walk(path)):
    for name in sorted(files):
      h.update(name.encode())
      with open(os.path.join(root, name), "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
          h.update(block)
  return h.hexdigest()


def curve_summary(sft_dir: str) -> dict[str, Any]:
  path = os.path.join(sft_dir, "metrics.jsonl")
  rows = [json.loads(ln) for ln in open(path, encoding="utf-8")] if os.path.isfile(path) else []
  rows = [r for r in rows if "loss" in r]
  if not rows:
    return {}
  tenth = max(len(rows) // 10, 1)
  return {"steps": rows[-1]["step"], "first_loss": rows[0]["loss"], "last_loss": rows[-1]["loss"],
          "loss_by_step": {str(r["step"]): round(r["loss"], 4) for r in rows[tenth - 1::tenth]}}


def validation(report: Any) -> dict[str, Any]:
  """The validation block of START.json from an evaluation report (``eval/compare.py``)."""
  def rates(s, g):
    out = {"tasks": s.tasks, "valid": g["valid_rate"], "limit_stops": _limit(g),
           "met": s.met.value, "solved": s.solved.value}
    if s.content_met is not None:
      out["content_met"] = s.content_met.value
    if s.first_call_place is not None:
      out["first_call_place"] = s.first_call_place.value
    return out

  by = {w: rates(s, report.generation[w]) for w, s in report.success.items()}
  tasks = {}
  for t, v, ok in zip(report.trajectories, report.verdicts, report.valid):
    tasks[t.metadata["task_id"]] = {"met": v.met, "total": v.total, "content_met": v.content_met,
                                    "valid": bool(ok), "finish": t.finish_reason}
  return {"overall": by.pop("overall"), "subtasks": by, "tasks": tasks}


def _limit(generation: Mapping[str, Any]) -> float:
  n = generation["trajectories"]
  return sum(generation["finish"].get(k, 0) for k in ("length", "max_turns")) / n if n else 0.0


def write(directory: str, *, model: Any, cfg: Any, tokenizer: Any,
          record: Mapping[str, Any], delta_tensors: Mapping[str, Any] | None = None) -> str:
  """The start folder (weights, or their delta when ``delta_tensors`` is given; tokenizer;
  START.json), written to a temporary sibling and renamed into place, so a failed build leaves
  the old start whole."""
  tmp = directory.rstrip("/") + ".tmp"
  shutil.rmtree(tmp, ignore_errors=True)
  if delta_tensors is None:
    export_hf_dir(model, cfg, tmp)
  else:
    os.makedirs(tmp)
    delta.save(os.path.join(tmp, DELTA_FILE), delta_tensors,
               {"base": record["delta"]["base"], "base_sha256": record["delta"]["base_sha256"]})
    with open(os.path.join(tmp, "config.json"), "w", encoding="utf-8") as f:
      json.dump(to_hf_config(cfg), f, indent=2)
  tokenizer.save(tmp)
  with open(os.path.join(tmp, START_FILE), "w", encoding="utf-8") as f:
    json.dump(dict(record), f, indent=1, sort_keys=True)
    f.write("\n")
  shutil.rmtree(directory, ignore_errors=True)
  os.replace(tmp, directory)
  return directory
