"""Where a run's numbers came from: code version, config, packages and how busy the machine was.

Nothing personal: no host or user names, no paths. The machine's load average is recorded because
the 2-core development machine is shared, and a run's wall time means little without it.
"""
from __future__ import annotations

import importlib.metadata
import os
import pathlib
import platform
import subprocess

from arenarl_jax.experiments.study import ROOT

PACKAGES = ("jax", "flax", "optax", "numpy")


def git_state(outputs: pathlib.Path | None = None) -> dict[str, object]:
  """``commit`` (HEAD of the checkout the package runs from, "unknown" outside git) and
  ``dirty`` (tracked files differ from it).

  ``outputs``: a study's folder, whose files the harness itself rewrites (result files, tables,
  plots, its README block). Changes there do not make the checkout dirty, except to the
  ``study.py`` that defines the runs; otherwise every re-run of a study after its first would
  be marked dirty by the previous run's own outputs.
  """
  try:
    def git(*args: str) -> str:
      return subprocess.run(["git", "-C", str(ROOT), *args], capture_output=True, text=True,
                            check=True).stdout

    commit, top = git("rev-parse", "HEAD").strip(), git("rev-parse", "--show-toplevel").strip()
    status = git("status", "--porcelain", "--untracked-files=no")  # paths from the top level
  except (OSError, subprocess.CalledProcessError):
    return {"commit": "unknown", "dirty": None}
  own = None
  if outputs is not None:
    rel = os.path.relpath(pathlib.Path(outputs).resolve(), pathlib.Path(top).resolve())
    own = None if rel.startswith("..") else rel.replace(os.sep, "/") + "/"
  changed = [line[3:].split(" -> ")[-1].strip('"') for line in status.splitlines() if line.strip()]
  if own is not None:
    changed = [f for f in changed if not f.startswith(own) or f == own + "study.py"]
  return {"commit": commit, "dirty": bool(changed)}


def versions() -> dict[str, str]:
  """The installed versions of ``PACKAGES`` (read from metadata: nothing is imported) and
  Python's."""
  out = {"python": platform.python_version()}
  for name in PACKAGES:
    try:
      out[name] = importlib.metadata.version(name)
    except importlib.metadata.PackageNotFoundError:
      out[name] = "missing"
  return out


def load() -> float:
  """The 1-minute load average (NaN where the platform has none)."""
  try:
    return round(os.getloadavg()[0], 2)
  except OSError:
    return float("nan")
