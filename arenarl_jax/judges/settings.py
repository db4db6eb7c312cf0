"""The judge backends' settings, one frozen dataclass per ``judge.<section>``, and their registry.

    SECTIONS = {"render": RenderLimits, "http": HttpJudgeSettings, "flax": FlaxJudgeSettings,
                "noise": NoiseModel}

``config_tree`` generates ``judge.<name>`` from each registered class's fields and defaults, and
the backend builds its settings back with ``settings.settings_from_config``; a backend added
with ``register_section`` before the config is made gets its section the same way. Standard
library only (no jax, httpx or numpy), so loading a config imports no backend. The backends
(``http.py``, ``flax/judge.py``, ``render.py``, ``rubric_judge.py``) re-export their classes.

``judge.rubric`` ("" by default) is the environment's rubric unless set: ``resolve_rubric`` is the
one place that decides, so the judge and the environment cannot score on different rubrics.
"""
from __future__ import annotations

import dataclasses

from arenarl_jax.judges import rubric as rubric_lib
from arenarl_jax.models import settings as model_settings

RESPONSE_FORMATS = ("none", "json_object", "json_object_schema", "json_schema", "gbnf")
FLAX_MODES = ("logit", "generative")


class JudgeConfigError(RuntimeError):
  """The judge is misconfigured (missing key variable, wrong URL or model, bad option)."""


@dataclasses.dataclass(frozen=True)
class RenderLimits:
  """Character budgets (about 4 characters per token) for each field and for a whole path."""

  max_query_chars: int = 4000
  max_reasoning_chars: int = 1500
  max_message_chars: int = 1500
  max_tool_call_chars: int = 600
  max_tool_result_chars: int = 1500
  max_answer_chars: int = 6000
  max_path_chars: int = 16000

  def __post_init__(self):
    for f in dataclasses.fields(self):
      v = getattr(self, f.name)
      if isinstance(v, bool) or not isinstance(v, int) or v < 16:
        raise ValueError(f"RenderLimits.{f.name} must be an int >= 16, got {v!r}")


@dataclasses.dataclass(frozen=True)
class HttpJudgeSettings:
  """Settings of the HTTP judge (``judge.http`` in configs)."""

  base_url: str = "http://127.0.0.1:8000/v1"
  model: str = "judge"
  api_key_env: str = ""  # NAME of the environment variable holding the key; "" = no key
  response_format: str = "json_schema"  # one of RESPONSE_FORMATS (weaker ones on rejection)
  temperature: float = 0.0
  retry_temperature: float = 0.7  # used when re-asking after an unparseable reply
  max_tokens: int = 1024
  max_concurrency: int = 16
  timeout_s: float = 120.0  # per request, total
  max_retries: int = 5  # re-sends after transport faults, per request
  parse_retries: int = 2  # re-asks after an unparseable reply, per request
  backoff_s: float = 1.0  # first backoff; doubles per retry, times a jitter in [0.5, 1]
  backoff_max_s: float = 30.0
  cache_dir: str = ""  # "" = no cache
  max_failure_rate: float = 1.0  # raise JudgeFailureError above this failed fraction of a batch
  seed: int = 0  # jitter RNG

  def __post_init__(self):
    if self.response_format not in RESPONSE_FORMATS:
      raise JudgeConfigError(f"judge.http.response_format must be one of {RESPONSE_FORMATS}, "
                             f"got {self.response_format!r}")
    for name in ("max_tokens", "max_concurrency"):
      if getattr(self, name) < 1:
        raise JudgeConfigError(f"judge.http.{name} must be >= 1, got {getattr(self, name)}")
    for name in ("max_retries", "parse_retries"):
      if getattr(self, name) < 0:
        raise JudgeConfigError(f"judge.http.{name} must be >= 0, got {getattr(self, name)}")
    if not self.timeout_s > 0:
      raise JudgeConfigError(f"judge.http.timeout_s must be > 0, got {self.timeout_s}")
    if not 0 <= self.max_failure_rate <= 1:
      raise JudgeConfigError("judge.http.max_failure_rate must be in [0, 1]")


@dataclasses.dataclass(frozen=True)
class FlaxJudgeSettings:
  """Settings of the local judge (``judge.flax`` in configs)."""

  model: str = "smollm2"  # make_flax_judge loads it: "smollm2", a .gguf file or an HF directory
  attention: str = "auto"  # the loaded model's attention (model.attention's choices)
  mode: str = "logit"  # one of FLAX_MODES
  # Prompts per compiled call (memory: rows x cache slots x layers): more rows share each pass over
  # the weights; 8 is the CPU default (see benchmarks/README.md, Judge).
  max_rows: int = 8
  max_user_tokens: int = 2048  # token budget of a prompt's match-specific part
  min_bucket: int = 64  # smallest padded length of that part (buckets double from it ...)
  bucket_step: int = 128  # ... up to 2*bucket_step, then grow by it (0: powers of two only)
  # Logit mode: that part runs in blocks this long (with the reference attention, shorter blocks
  # compute less masked attention; 128 is the CPU default, see benchmarks/README.md, Judge).
  block_tokens: int = 128
  # Logit mode: rows of one call that begin with at least this many equal tokens (in a
  # tournament, the matches that show the same trajectory first) run that part once
  # (judges/flax/sharing.py) when that runs fewer padded tokens; 0 = never.
  min_shared_tokens: int = 64
  # generative without constraints: verdict bound (full travel verdict ~180 SmolLM2 tokens); the
  # constrained verdict has a fixed length (~120-134 tokens for travel).
  max_new_tokens: int = 384
  temperature: float = 0.0  # generative: 0 = greedy
  # generative: decode under the compact verdict's grammar (flax/grammar.py), so every reply
  # parses; False decodes freely (the verdict shape then follows judge.compact).
  constrained: bool = True
  seed: int = 0  # generative sampling with temperature > 0

  def __post_init__(self):
    if self.mode not in FLAX_MODES:
      raise ValueError(f"judge.flax.mode must be one of {FLAX_MODES}, got {self.mode!r}")
    model_settings.check_choice(self.attention, model_settings.ATTENTION_CHOICES,
                                "judge.flax.attention")
    for name, least in (("max_rows", 1), ("max_user_tokens", 1), ("min_bucket", 1),
                        ("bucket_step", 0), ("block_tokens", 1), ("max_new_tokens", 1),
                        ("min_shared_tokens", 0)):
      value = getattr(self, name)
      if isinstance(value, bool) or not isinstance(value, int) or value < least:
        raise ValueError(f"judge.flax.{name} must be an int >= {least}, got {value!r}")
    if self.min_bucket > self.max_user_tokens:
      raise ValueError(f"judge.flax.min_bucket={self.min_bucket} exceeds max_user_tokens="
                       f"{self.max_user_tokens}")
    if not isinstance(self.constrained, bool):
      raise ValueError(f"judge.flax.constrained must be true or false, got {self.constrained!r}")
    if self.temperature < 0:
      raise ValueError(f"judge.flax.temperature must be >= 0, got {self.temperature}")


@dataclasses.dataclass(frozen=True)
class NoiseModel:
  """How the programmatic judge deviates from the checker's truth (all zero = a perfect judge)."""

  pointwise_std: float = 0.0
  pairwise_std: float = 0.0
  position_bias: float = 0.0
  saturation_knee: float = 8.0
  saturation: float = 0.0  # 0 = none, 1 = every score above the knee looks like the knee
  saturate_pairwise: bool = False
  integer_scores: bool = True

  def __post_init__(self):
    for name in ("pointwise_std", "pairwise_std"):
      if not getattr(self, name) >= 0:
        raise ValueError(f"NoiseModel.{name} must be >= 0, got {getattr(self, name)}")
    if not 0 <= self.saturation <= 1:
      raise ValueError(f"NoiseModel.saturation must be in [0, 1], got {self.saturation}")
    if not 0 <= self.saturation_knee <= 10:
      raise ValueError(f"NoiseModel.saturation_knee must be in [0, 10], got "
                       f"{self.saturation_knee}")


# judge.<name> -> its settings class: render (every text judge's prompt budgets), http and flax
# (those backends), noise (the rubric backend's noise model).
SECTIONS: dict[str, type] = {"render": RenderLimits, "http": HttpJudgeSettings,
                             "flax": FlaxJudgeSettings, "noise": NoiseModel}


def register_section(name: str, settings_cls: type) -> None:
  """Declares ``judge.<name>`` as ``settings_cls``'s fields (a new backend's own settings)."""
  if name in SECTIONS and SECTIONS[name] is not settings_cls:
    raise ValueError(f"judge section {name!r} is already registered")
  SECTIONS[name] = settings_cls


def resolve_rubric(judge_rubric: str | None, env_rubric: str | None) -> str:
  """The rubric a judge scores on: ``judge.rubric``, or the environment's when that is "".

  A built-in rubric name that is not the environment's is an error (a travel world judged on the
  deep-research rubric scores nothing it was built for); a rubric JSON path is an explicit choice
  and is kept. Returns "" only when neither is given (the caller then names what is missing).
  """
  judge_rubric = judge_rubric or ""
  if not judge_rubric:
    return env_rubric or ""
  if env_rubric and judge_rubric != env_rubric and judge_rubric in rubric_lib.BUILTIN:
    raise ValueError(f"judge.rubric={judge_rubric!r} is not the environment's rubric "
                     f"{env_rubric!r}: leave judge.rubric empty to use the environment's, or "
                     f"give a rubric JSON path")
  return judge_rubric
