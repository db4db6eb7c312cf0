"""A study: a list of runs, each a config file, scalar overrides and a seed, read from a folder.

An experiment folder (``experiments/<study>/``) holds a ``study.py`` that defines
``runs(preset) -> list[Run]`` (presets ``full`` and ``smoke`` at least) and ``CLAIMS``, the
paper's statements the study checks (``claims.py``). A run is the pipeline's command line in
data: ``python -m arenarl_jax.main --config=<config> --config.seed=<seed>
--config.<key>=<value> ...``. Its resolved config (the file's ``get_config`` with the overrides
set, as ``main`` would see it) names it: ``config_hash``; the part of that config the SFT stage
reads names the SFT checkpoint runs can share: ``sft_hash``. Loading configs imports no jax
(``config_tree.py``).
"""
from __future__ import annotations

import dataclasses
import hashlib
import importlib.util
import json
import pathlib
import re
from typing import Any, Callable, Mapping, Sequence

import ml_collections

from arenarl_jax import config_tree

# The repository root: config paths in a study are relative to it.
ROOT = pathlib.Path(__file__).resolve().parents[2]
# Config sections only the RL stage, its evaluation or its logging read; the rest (model, env,
# data, sft, sampling, rollout, mesh, ...) may shape the SFT stage, so they name its checkpoint.
# Listing what SFT ignores (not what it reads) errs towards separate SFT stages, never towards
# sharing one that a run's config would have trained differently.
RL_ONLY = ("seed", "method", "advantage", "loss", "tournament", "judge", "rl", "optim", "eval",
           "checkpoint", "metrics",
           # Single keys of sections SFT reads: how many trajectories RL samples per prompt.
           "sampling.group_size")
_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]*$")


@dataclasses.dataclass(frozen=True)
class Run:
  """One pipeline run of a study.

  ``arm`` groups runs that differ only in ``seed`` (intervals pool an arm's seeds); ``name`` names
  its result file. With ``share_sft`` the run starts from the study's SFT checkpoint for its
  config (trained once, in ``work/sft_<sft_hash>``) instead of training its own.
  """

  name: str
  arm: str
  config: str  # configs/<file>.py[:arg], relative to the repository root
  seed: int
  overrides: Mapping[str, Any] = dataclasses.field(default_factory=dict)  # "rl.steps": 2
  share_sft: bool = True

  def __post_init__(self):
    if not _NAME.match(self.name):
      raise ValueError(f"run name {self.name!r}: use letters, digits, '_', '-', '.'")
    if "seed" in self.overrides:
      raise ValueError(f"run {self.name}: set the seed with Run(seed=...), not an override")


def config_path(spec: str) -> str:
  """``spec`` (``path[:arg]``) with its path made absolute (relative to the repository root)."""
  path, colon, arg = spec.partition(":")
  path = pathlib.Path(path)
  if not path.is_absolute():
    path = ROOT / path
  return f"{path}{colon}{arg}"


def _set(config: ml_collections.ConfigDict, dotted: str, value: Any) -> None:
  *parents, leaf = dotted.split(".")
  node = config
  for p in parents:
    if p not in node:
      raise KeyError(f"override {dotted!r}: the config has no section {p!r}")
    node = node[p]
  if leaf not in node:
    raise KeyError(f"override {dotted!r}: the config has no key {leaf!r}")
  node[leaf] = value  # the locked config checks the type


def resolve(config: str, overrides: Mapping[str, Any], seed: int | None = None):
  """The config ``main`` runs for ``--config=<config>`` with these overrides (and seed)."""
  c = config_tree.load_config_file(config_path(config))
  for key, value in overrides.items():
    _set(c, key, value)
  if seed is not None:
    c.seed = int(seed)
  return c


def without(tree: dict[str, Any], drop: tuple[str, ...]) -> dict[str, Any]:
  """``tree`` without the ``drop`` entries: sections (``"rl"``) or dotted keys
  (``"sampling.group_size"``)."""
  out = {k: v for k, v in tree.items() if k not in drop}
  for dotted in (d for d in drop if "." in d):
    section, _, rest = dotted.partition(".")
    if isinstance(out.get(section), dict):
      out[section] = without(out[section], (rest,))
  return out


def digest(config: ml_collections.ConfigDict, drop: tuple[str, ...] = ()) -> str:
  """12 hex digits of sha256 over the config as sorted JSON, without the ``drop`` entries."""
  return tree_digest(without(json.loads(config.to_json_best_effort(sort_keys=True)), drop))


def tree_digest(tree: dict[str, Any]) -> str:
  """12 hex digits of sha256 over a JSON tree with sorted keys."""
  return hashlib.sha256(json.dumps(tree, sort_keys=True).encode()).hexdigest()[:12]


def config_hash(run: Run) -> str:
  """The hash of the run's resolved config (seed included)."""
  return digest(resolve(run.config, run.overrides, run.seed))


def rl_only(key: str) -> bool:
  """Whether the dotted override ``key`` lies in ``RL_ONLY`` (its section, or the key itself)."""
  parts = key.split(".")
  return any(".".join(parts[:i]) in RL_ONLY for i in range(1, len(parts) + 1))


def sft_overrides(run: Run) -> dict[str, Any]:
  """The run's overrides the SFT stage reads (those outside ``RL_ONLY``)."""
  return {k: v for k, v in run.overrides.items() if not rl_only(k)}


def sft_hash(run: Run) -> str:
  """The hash of what the run's SFT stage reads: runs with equal ``sft_hash`` can share it."""
  return digest(resolve(run.config, run.overrides), drop=RL_ONLY)


def flag(key: str, value: Any) -> str:
  """``--config.<key>=<value>`` as absl's config flags parse it back to ``value``."""
  text = json.dumps(value) if isinstance(value, (list, tuple)) else str(value)
  return f"--config.{key}={text}"


@dataclasses.dataclass(frozen=True)
class Study:
  """A study folder's definition: its runs for one preset and the claims they test."""

  directory: pathlib.Path
  preset: str
  runs: tuple[Run, ...]
  claims: tuple[Any, ...]  # verdict.Claim
  bootstrap_samples: int = 2000
  bootstrap_seed: int = 0
  # ``report(results) -> list[str]``: the study's own markdown lines (tables a generic arm table
  # cannot hold: judge cost, the paper's numbers beside ours), placed after the claims.
  report: Callable[[Sequence[dict]], list[str]] | None = None
  # The full preset's arms: claims are written against the whole study, and a smaller preset
  # runs only some of its arms (``defined_arms``).
  full_arms: tuple[str, ...] = ()

  def arms(self) -> list[str]:
    """Arm names in the order their first run appears."""
    return list(dict.fromkeys(r.arm for r in self.runs))

  def defined_arms(self) -> list[str]:
    """Every arm the study defines: this preset's, then the full preset's. A claim may name
    any of them (one this preset does not run is "not run yet"); any other name is a typo."""
    return list(dict.fromkeys([*self.arms(), *self.full_arms]))


def study_module(directory: str | pathlib.Path, defines: str):
  """(the folder, path and module of ``<directory>/study.py``); ``defines`` names what a study
  folder of its kind must define, for the error when the file is missing. A bare study name
  (``topologies``) that is not a folder here names the repository's ``experiments/<name>``."""
  given = pathlib.Path(directory)
  repository = pathlib.Path(__file__).resolve().parents[2] / "experiments"
  if not given.is_dir() and len(given.parts) == 1 and (repository / given).is_dir():
    given = repository / given
  directory = given.resolve()
  path = directory / "study.py"
  if not path.is_file():
    known = sorted(p.parent.name for p in repository.glob("*/study.py"))
    raise FileNotFoundError(f"{path}: a study folder defines study.py with {defines} "
                            f"(the repository's studies: {', '.join(known)})")
  spec = importlib.util.spec_from_file_location(f"study_{directory.name}", path)
  module = importlib.util.module_from_spec(spec)
  spec.loader.exec_module(module)
  return directory, path, module


def load(directory: str | pathlib.Path, preset: str = "full") -> Study:
  """Reads ``<directory>/study.py``: ``runs(preset)`` (also ``runs("full")``, for the arms
  claims may name), ``CLAIMS`` and optional ``BOOTSTRAP_SAMPLES`` / ``BOOTSTRAP_SEED`` /
  ``report``; checks names are unique and every config loads."""
  directory, path, module = study_module(directory, "runs(preset)")
  runs = tuple(module.runs(preset))
  names = [r.name for r in runs]
  if len(set(names)) != len(names):
    raise ValueError(f"{path}: preset {preset!r} repeats run names: {names}")
  for r in runs:
    resolve(r.config, r.overrides, r.seed)  # a typo in an override fails before anything runs
  full = runs if preset == "full" else tuple(module.runs("full"))
  return Study(directory, preset, runs, tuple(getattr(module, "CLAIMS", ())),
               int(getattr(module, "BOOTSTRAP_SAMPLES", 2000)),
               int(getattr(module, "BOOTSTRAP_SEED", 0)), getattr(module, "report", None),
               tuple(dict.fromkeys(r.arm for r in full)))
