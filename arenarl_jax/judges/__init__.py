"""Judges: rubric prompts, strict verdict parsing and backends behind one ``make_judge(config)``.

``config`` is the ``judge`` ConfigDict (or a plain dict)::

  backend: "http" | "rubric" | ...   (a key of BACKENDS)
  rubric:  "travel" | "deep_research" | path to a rubric JSON file
  compact: bool                       (compact verdict schema: dimension scores only)
  seed:    int
  render:  RenderLimits fields        (judge.render.max_tool_result_chars, ...)
  http:    HttpJudgeConfig fields     (judge.http.base_url, .model, .api_key_env, ...)
  noise:   NoiseModel fields          (judge.noise.pointwise_std, ...; backend "rubric")

Backends are imported lazily (importing this package loads no HTTP or model code).
"""
from __future__ import annotations

import dataclasses
import importlib
from typing import Any, Callable, Mapping

from arenarl_jax.types import Judge

# name -> "module:factory"; factory(config: dict, **kwargs) -> Judge.
BACKENDS: dict[str, str | Callable[..., Judge]] = {
    "http": "arenarl_jax.judges:make_http_judge",
    "rubric": "arenarl_jax.judges:make_rubric_judge",
    "flax": "arenarl_jax.judges.flax_judge:make_flax_judge",
}


def register_backend(name: str, factory: str | Callable[..., Judge]) -> None:
  """Adds a backend: ``factory`` is a callable or a lazy "module:function" path."""
  if name in BACKENDS:
    raise ValueError(f"judge backend {name!r} is already registered")
  BACKENDS[name] = factory


def make_judge(config: Any, **kwargs) -> Judge:
  """The judge ``config.backend`` names; ``kwargs`` pass objects a config cannot hold (checker)."""
  cfg = as_dict(config, "judge")
  backend = cfg.get("backend")
  if backend not in BACKENDS:
    raise ValueError(f"judge.backend must be one of {sorted(BACKENDS)}, got {backend!r}")
  factory = BACKENDS[backend]
  if isinstance(factory, str):
    module, name = factory.split(":")
    factory = getattr(importlib.import_module(module), name)
  return factory(cfg, **kwargs)


def make_http_judge(cfg: Mapping[str, Any]) -> Judge:
  """``backend="http"``: an OpenAI-compatible endpoint."""
  from arenarl_jax.judges import http, render  # pylint: disable=g-import-not-at-top
  return http.HttpJudge(
      from_config(http.HttpJudgeConfig, cfg.get("http"), "judge.http"),
      rubric=cfg.get("rubric", "travel"), compact=bool(cfg.get("compact", False)),
      limits=from_config(render.RenderLimits, cfg.get("render"), "judge.render"))


def make_rubric_judge(cfg: Mapping[str, Any], checker: Callable[..., Any] | None = None) -> Judge:
  """``backend="rubric"``: a programmatic judge; ``checker`` comes from the environment."""
  from arenarl_jax.judges import rubric_judge  # pylint: disable=g-import-not-at-top
  if checker is None:
    raise ValueError("judge.backend='rubric' needs make_judge(config, checker=...): a callable "
                     "trajectory -> {'path': {dim: 0-10}, 'answer': {dim: 0-10}}")
  return rubric_judge.RubricJudge(
      checker, rubric=cfg.get("rubric", "travel"),
      noise=from_config(rubric_judge.NoiseModel, cfg.get("noise"), "judge.noise"),
      seed=int(cfg.get("seed", 0)))


def as_dict(config: Any, where: str) -> dict[str, Any]:
  """A plain dict from a ConfigDict, a mapping or None."""
  if config is None:
    return {}
  if hasattr(config, "to_dict"):
    return config.to_dict()
  if isinstance(config, Mapping):
    return dict(config)
  raise TypeError(f"{where}: expected a ConfigDict or a mapping, got {type(config).__name__}")


def from_config(cls: type, config: Any, where: str):
  """``cls(**config)`` for a frozen-dataclass settings type; unknown keys name ``where.key``."""
  values = as_dict(config, where)
  names = {f.name for f in dataclasses.fields(cls)}
  unknown = sorted(set(values) - names)
  if unknown:
    raise ValueError(f"{where}: unknown key(s) {unknown}; allowed: {sorted(names)}")
  return cls(**values)
