"""Where a run's numbers came from: code version, config, packages and how busy the machine was.

Nothing personal: no host or user names, no paths. The machine's load average is recorded because
the 2-core development machine is shared, and a run's wall time means little without it.
"""
from __future__ import annotations

import importlib.metadata
import os
import platform
import subprocess

from arenarl_jax.experiments.study import ROOT

PACKAGES = ("jax", "flax", "optax", "numpy")


def git_state() -> dict[str, object]:
  """``commit`` (HEAD of the checkout the package runs from, "unknown" outside git) and
  ``dirty`` (tracked files differ from it)."""
  try:
    commit = subprocess.run(["git", "-C", str(ROOT), "rev-parse", "HEAD"], capture_output=True,
                            text=True, check=True).stdout.strip()
    status = subprocess.run(["git", "-C", str(ROOT), "status", "--porcelain",
                             "--untracked-files=no"], capture_output=True, text=True,
                            check=True).stdout
  except (OSError, subprocess.CalledProcessError):
    return {"commit": "unknown", "dirty": None}
  return {"commit": commit, "dirty": bool(status.strip())}


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
