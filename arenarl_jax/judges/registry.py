"""The judge backends by name, and ``make_judge(config)``, which builds the one a config names.

``config`` is the ``judge`` ConfigDict (or a plain dict)::

  backend: a key of BACKENDS: "http" | "rubric" | "flax" | "verifier" (a ceiling diagnostic)
  rubric:  "" (the environment's: make_judge(..., env_rubric=env.rubric)) | "travel" |
           "deep_research" | path to a rubric JSON file (settings.resolve_rubric)
  compact: bool, seed: int            (compact: the verdict schema with dimension scores only)
  render:  RenderLimits fields        (judge.render.max_tool_result_chars, ...)
  http:    HttpJudgeSettings fields     (judge.http.base_url, .model, .api_key_env, ...)
  flax:    FlaxJudgeSettings fields     (judge.flax.model, .mode, ...)
  noise:   NoiseModel fields          (judge.noise.pointwise_std, ...; backends rubric, verifier)

Factories are "module:function" paths imported on first use: this module loads no HTTP, array
or model code, and a backend's module imports this one, never the other way round."""
from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any, Callable, Mapping

from arenarl_jax.judges import settings as judge_settings
from arenarl_jax.settings import section_dict

if TYPE_CHECKING:  # the protocol only annotates here; types.py imports numpy
  from arenarl_jax.types import Judge

# name -> "module:factory" or the factory; factory(config: dict, **kwargs) -> Judge.
BACKENDS: dict[str, str | Callable[..., Judge]] = {
    "http": "arenarl_jax.judges.http:make_http_judge",
    "rubric": "arenarl_jax.judges.rubric_judge:make_rubric_judge",
    "flax": "arenarl_jax.judges.flax.judge:make_flax_judge",
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


def rubric_name(cfg: Mapping[str, Any]) -> str:
  """The rubric of a resolved judge section; "" with no environment to take it from is an error."""
  rubric = cfg.get("rubric") or ""
  if not rubric:
    raise ValueError("judge.rubric is '' (the environment's rubric) but no environment was given: "
                     "call make_judge(config, env_rubric=env.rubric) or set judge.rubric")
  return rubric
