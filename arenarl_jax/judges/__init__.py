"""Judges: rubric prompts, strict verdict parsing and backends behind one ``make_judge(config)``.

``config`` is the ``judge`` ConfigDict (or a plain dict)::

  backend: "http" | "rubric" | "flax" | "verifier" (a key of BACKENDS; "verifier" is a
                                      ceiling diagnostic, verifier_judge.py)
  rubric:  "" (the environment's: make_judge(..., env_rubric=env.rubric)) | "travel" |
           "deep_research" | path to a rubric JSON file (settings.resolve_rubric)
  compact: bool                       (compact verdict schema: dimension scores only)
  seed:    int
  render:  RenderLimits fields        (judge.render.max_tool_result_chars, ...)
  http:    HttpJudgeConfig fields     (judge.http.base_url, .model, .api_key_env, ...)
  flax:    FlaxJudgeConfig fields     (judge.flax.model, .mode, ...)
  noise:   NoiseModel fields          (judge.noise.pointwise_std, ...; backend "rubric")

The sections are ``settings.SECTIONS`` (``config_tree`` generates them from it). Backends are
imported lazily: importing this package loads no HTTP, array or model code.
"""
from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any, Callable, Mapping

from arenarl_jax.judges import settings as judge_settings
from arenarl_jax.settings import section_dict, settings_from_config

if TYPE_CHECKING:  # the protocol only annotates here; types.py imports numpy
  from arenarl_jax.types import Judge

# name -> "module:factory"; factory(config: dict, **kwargs) -> Judge.
BACKENDS: dict[str, str | Callable[..., Judge]] = {
    "http": "arenarl_jax.judges:make_http_judge",
    "rubric": "arenarl_jax.judges:make_rubric_judge",
    "flax": "arenarl_jax.judges.flax_judge:make_flax_judge",
    # a ceiling diagnostic that reads the evaluation's verifier (verifier_judge.py), never a method
    "verifier": "arenarl_jax.judges.verifier_judge:make_verifier_judge",
}


def register_backend(name: str, factory: str | Callable[..., Judge],
                     settings: type | None = None) -> None:
  """Adds a backend: ``factory`` is a callable or a lazy "module:function" path; ``settings``
  (a frozen dataclass) declares its ``judge.<name>`` section for configs made afterwards."""
  if name in BACKENDS:
    raise ValueError(f"judge backend {name!r} is already registered")
  if settings is not None:
    judge_settings.register_section(name, settings)
  BACKENDS[name] = factory


def make_judge(config: Any, *, env_rubric: str | None = None, **kwargs) -> Judge:
  """The judge ``config.backend`` names; ``kwargs`` pass objects a config cannot hold (checker).

  ``env_rubric``: the environment's rubric (``env.rubric``), used when ``judge.rubric`` is "" and
  checked against it otherwise (``settings.resolve_rubric``).
  """
  cfg = section_dict(config, "judge")
  cfg["rubric"] = judge_settings.resolve_rubric(cfg.get("rubric"), env_rubric)
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
      settings_from_config(http.HttpJudgeConfig, cfg.get("http"), "judge.http"),
      rubric=rubric_name(cfg), compact=bool(cfg.get("compact", False)),
      limits=settings_from_config(render.RenderLimits, cfg.get("render"), "judge.render"))


def make_rubric_judge(cfg: Mapping[str, Any], checker: Callable[..., Any] | None = None) -> Judge:
  """``backend="rubric"``: a programmatic judge; ``checker`` comes from the environment."""
  from arenarl_jax.judges import rubric_judge  # pylint: disable=g-import-not-at-top
  if checker is None:
    raise ValueError("judge.backend='rubric' needs make_judge(config, checker=...): a callable "
                     "trajectory -> {'path': {dim: 0-10}, 'answer': {dim: 0-10}}")
  noise = settings_from_config(rubric_judge.NoiseModel, cfg.get("noise"), "judge.noise")
  return rubric_judge.RubricJudge(checker, rubric=rubric_name(cfg), noise=noise,
                                  seed=int(cfg.get("seed", 0)))


def rubric_name(cfg: Mapping[str, Any]) -> str:
  """The rubric of a resolved judge section; "" with no environment to take it from is an error."""
  rubric = cfg.get("rubric") or ""
  if not rubric:
    raise ValueError("judge.rubric is '' (the environment's rubric) but no environment was given: "
                     "call make_judge(config, env_rubric=env.rubric) or set judge.rubric")
  return rubric
