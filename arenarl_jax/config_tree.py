"""The one config tree every configs/*.py file starts from, the ``:arg`` parser and the presets.

Every key the library reads is declared here with its default, so a config file only sets values and a
typo in ``--config.a.b=v`` (or in a config file) fails loudly once the tree is locked. Every section
the library reads through a settings dataclass (``model``, ``data``, ``sampling``, ``rollout``,
``sft``, ``eval``, ``rl``, ``loss``, ...; ``<pkg>/settings.py``) is generated from the class
(``settings.defaults``), so the keys, defaults and their comments live in one place; the
environment and judge sub-sections come from their registries (``envs/settings.py``,
``judges/settings.py``). ``pipeline.py`` turns the sections back into the settings objects the
library takes. Everything imported here is standard library (plus ml_collections): loading a
config imports neither jax nor any backend.
"""
from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import ml_collections

from arenarl_jax import settings
from arenarl_jax.data import settings as data_settings
from arenarl_jax.envs import settings as env_settings
from arenarl_jax.eval import settings as eval_settings
from arenarl_jax.judges import settings as judge_settings
from arenarl_jax.models import settings as model_settings
from arenarl_jax.rl import settings as rl_settings
from arenarl_jax.rollout import settings as rollout_settings
from arenarl_jax.settings import defaults
from arenarl_jax.sft import settings as sft_settings

# Method presets: orthogonal keys set together (ARCHITECTURE.md "Contracts between stages").
PRESETS: dict[str, dict[str, Any]] = {
    "arenarl": {
        "advantage.source": "arena", "loss.ratio": "token", "loss.kl": "k3", "loss.kl_coef": 0.02,
        "loss.clip_low": 0.2, "loss.clip_high": 0.28, "loss.aggregation": "seq_mean_token_mean"},
    "grpo": {
        "advantage.source": "pointwise", "loss.ratio": "token", "loss.kl": "k3",
        "loss.kl_coef": 0.02, "loss.clip_low": 0.2, "loss.clip_high": 0.28,
        "loss.aggregation": "seq_mean_token_mean"},
    "gspo": {
        "advantage.source": "pointwise", "loss.ratio": "sequence", "loss.kl": "k3",
        "loss.kl_coef": 0.02, "loss.clip_low": 3e-4, "loss.clip_high": 4e-4,
        "loss.aggregation": "seq_mean_token_mean"},
}


def make_base_config() -> ml_collections.ConfigDict:
  """All keys with defaults (unlocked: the config file edits, then locks)."""
  c = ml_collections.ConfigDict()
  c.seed = 0
  c.method = "arenarl"  # one of PRESETS; apply_preset() sets the orthogonal keys below

  c.model = defaults(model_settings.ModelSettings)  # models/settings.py; sft/policy.py
  c.env = dict(
      name="travel",  # travel | research (arenarl_jax/envs/base.py registry)
      seed=0,  # world, tasks and expert trajectories are deterministic from it
      # tool_max_chars, reference_error_rate: every environment takes them (envs/settings.py)
      **defaults(env_settings.CommonSettings),
      tools="inprocess",  # inprocess | mcp (arenarl_jax/envs/tool_sources.py)
      schemas="full",  # full | compact | none: tool schemas the policy is shown (envs/compact_schemas.py)
      mcp=defaults(env_settings.McpClientSettings),  # env.tools=mcp: server command, limits, name_map
  )
  # env.<name>: the keys only that environment takes (env.travel.train_per_subtask, ...).
  for name, spec in env_settings.ENVIRONMENTS.items():
    if spec.settings is not None:
      c.env[name] = defaults(spec.settings)
  c.data = defaults(data_settings.DataSettings)  # data/settings.py: TFDS datasets read with grain
  c.sampling = defaults(rollout_settings.PolicySamplingSettings)  # rollout/settings.py
  c.rollout = defaults(rollout_settings.RolloutSettings)  # rollout/settings.py (agent_loop.py)
  c.tournament = defaults(rl_settings.TournamentSettings)  # rl/settings.py
  c.judge = dict(
      backend="rubric",  # http | flax | rubric | verifier (see arenarl_jax/judges/registry.py)
      # "" = the environment's rubric (env.name's: travel, deep_research); a built-in name must
      # be that one; a path to a rubric JSON file overrides it (judges/settings.py resolve_rubric)
      rubric="",
      compact=False,  # verdict = dimension scores only (small judges); full = overall + winner too
      seed=0,
  )
  # judge.<section> mirrors a backend's frozen settings class field for field (render, http,
  # flax, noise; judges/settings.py SECTIONS), so a config can set everything a backend takes and
  # nothing it does not. The HTTP API key: judge.http.api_key_env names the variable.
  for name, settings_cls in judge_settings.SECTIONS.items():
    c.judge[name] = defaults(settings_cls)
  c.sft = defaults(sft_settings.SftSettings)  # sft/settings.py: the supervised cold start
  c.start = defaults(sft_settings.StartSettings)  # sft/settings.py: a pinned start (sft/start.py)
  c.eval = defaults(eval_settings.EvalSettings)  # eval/settings.py: when, how many, intervals
  c.advantage = defaults(rl_settings.AdvantageSettings)  # rl/settings.py: arena | pointwise
  c.loss = defaults(rl_settings.LossSettings)  # rl/settings.py (rl/losses.py)
  c.rl = defaults(rl_settings.RlSettings)  # rl/settings.py (rl/loop.py)
  c.optim = defaults(rl_settings.OptimSettings)  # rl/settings.py: the RL stage's AdamW
  c.mesh = dict(data=-1, fsdp=1, tensor=1)  # -1: all remaining devices
  c.distributed = dict(
      initialize=False,  # jax.distributed.initialize() before anything touches devices (pods)
      coordinator_address="",  # "" = auto-detected by JAX (TPU pods, SLURM); else "host:port"
      num_processes=0, process_id=-1,  # 0 / -1 = auto-detected
      cpu_collectives="",  # "gloo" for several CPU processes (tests); "" = the platform's own
  )
  c.checkpoint = defaults(settings.CheckpointSettings)  # settings.py (checkpoint.py)
  c.metrics = defaults(settings.MetricsSettings)  # settings.py (metrics.py)
  return c


def load_config_file(spec: str) -> ml_collections.ConfigDict:
  """The config of ``path[:arg]`` (as ``--config=`` takes it): the file's ``get_config(arg)``."""
  import importlib.util  # pylint: disable=g-import-not-at-top
  import os  # pylint: disable=g-import-not-at-top
  path, _, arg = spec.partition(":")
  if not os.path.isfile(path):
    raise FileNotFoundError(f"config file {path!r} does not exist")
  module_spec = importlib.util.spec_from_file_location(
      "config_" + os.path.basename(path)[:-3], path)
  module = importlib.util.module_from_spec(module_spec)
  module_spec.loader.exec_module(module)
  if not hasattr(module, "get_config"):
    raise ValueError(f"config file {path!r} defines no get_config(arg)")
  return module.get_config(arg or None)


def parse_arg(arg: str | None, defaults: dict[str, Any]) -> ml_collections.ConfigDict:
  """Parses a big_vision-style ``key=value,flag`` string against typed defaults.

  ``"variant=smollm2,runlocal"`` -> {variant: "smollm2", runlocal: True}. Unknown keys are an error
  naming the key and the accepted ones; values are cast to the default's type.
  """
  out = ml_collections.ConfigDict(dict(defaults))
  for part in filter(None, (arg or "").split(",")):
    key, eq, value = part.partition("=")
    key = key.strip()
    if key not in defaults:
      raise ValueError(f"config arg: unknown option {key!r}; accepted: {sorted(defaults)}")
    default = defaults[key]
    if not eq:
      if not isinstance(default, bool):
        raise ValueError(f"config arg: option {key!r} needs a value ({key}=...)")
      out[key] = True
    elif isinstance(default, bool):
      if value.lower() not in ("true", "false", "1", "0"):
        raise ValueError(f"config arg: option {key!r} expects true/false, got {value!r}")
      out[key] = value.lower() in ("true", "1")
    else:
      try:
        out[key] = type(default)(value)
      except ValueError as e:
        raise ValueError(f"config arg: option {key!r} expects {type(default).__name__}") from e
  return out


def apply_preset(config: ml_collections.ConfigDict, method: str) -> None:
  """Sets the orthogonal keys of a method preset (arenarl, grpo, gspo) in place."""
  if method not in PRESETS:
    raise ValueError(f"unknown method preset {method!r}; known: {sorted(PRESETS)}")
  config.method = method
  for dotted, value in PRESETS[method].items():
    section, key = dotted.split(".")
    config[section][key] = value


# The training judge's stated noise model of the CPU configs (quickstart, research, SmolLM2):
# every dimension score gets N(0, 1) per request, each pairwise request an extra N(0, 1) split
# between the two sides and a +0.5 position bias for Agent A; pointwise scores saturate above 8;
# scores are rounded to integers. An imperfect judge whose flaws the method must live with.
NOISY_RUBRIC_JUDGE = {"pointwise_std": 1.0, "pairwise_std": 1.0, "position_bias": 0.5,
                      "saturation": 0.8, "saturation_knee": 8.0}


def use_noisy_rubric_judge(config: ml_collections.ConfigDict) -> None:
  """Judges training with the environment's rubric judge under ``NOISY_RUBRIC_JUDGE`` (in place).

  ``judge.rubric`` stays "" (the environment's), so the judge follows ``env.name``.
  """
  config.judge.backend = "rubric"
  config.judge.rubric = ""
  for key, value in NOISY_RUBRIC_JUDGE.items():
    config.judge.noise[key] = value


def flat(tree: Any, prefix: str = "") -> dict[str, Any]:
  """A config (``ConfigDict`` or nested mappings) as ``{"a.b.c": value}``, keys sorted, tuples
  as lists (as JSON reads them back)."""
  if isinstance(tree, (ml_collections.ConfigDict, Mapping)):
    out = {}
    for k in sorted(tree.keys()):
      out.update(flat(tree[k], f"{prefix}{k}."))
    return out
  return {prefix[:-1]: list(tree) if isinstance(tree, tuple) else tree}


def stale_keys(recorded: Mapping[str, Any], current: Mapping[str, Any],
               defaults: Mapping[str, Any]) -> list[str]:
  """The keys of two flat settings maps (``{"a.b": value}``) whose values make a result made
  with ``recorded`` differ from one made with ``current``: a changed or removed key, or a key the
  record lacks at a value other than its default in ``defaults`` (a key added later at the
  value that keeps the old behaviour changes nothing). Sorted."""
  out = []
  for key in sorted(set(recorded) | set(current)):
    if key not in current:
      out.append(key)
    elif key not in recorded:
      if key not in defaults or current[key] != defaults[key]:
        out.append(key)
    elif recorded[key] != current[key]:
      out.append(key)
  return out
