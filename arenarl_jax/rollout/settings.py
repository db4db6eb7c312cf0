"""The rollout's config sections as frozen settings: ``rollout.*`` and ``sampling.*``.

``config_tree`` declares both sections from these classes (``settings.defaults``) and
``pipeline.py`` builds them once; the rollout, the RL experience and the evaluation read nothing
else. ``sampling.*`` is declared here, not in ``sampling/settings.py``, because that module
needs jax and a config must load without it; the sampler's own per-turn ``SamplingSettings``
are made from it with the tokenizer's EOS id (``sampling/policy_sampler.py``). Standard
library only.
"""
from __future__ import annotations

import dataclasses
from typing import Any

from arenarl_jax.settings import outside, settings_from_config

FINAL_NOTE = ("You have used all your tool calls. Answer the user now with what you know, "
              "without calling any tool.")


@dataclasses.dataclass(frozen=True)
class RolloutSettings:
  """The ``rollout.*`` config section (``rollout/agent_loop.py``); the per-turn token limit is
  ``sampling.max_new_tokens`` and the tool turns ``sampling.max_turns``."""

  max_turns: int = outside(2, "sampling.max_turns")  # tool turns before the forced final answer
  # a trajectory's whole sequence (prompt included); 0 = sampling.cache_len
  max_total_tokens: int = 0
  max_observation_tokens: int = 512  # each tool result is cut to this many tokens
  tool_timeout_s: float = 30.0  # per tool call; a call still running then is a timeout observation
  max_concurrent_calls: int = 64  # tool calls in flight on one tool source
  system: str = ""  # system prompt; "" = the chat format's default
  final_note: str = outside(FINAL_NOTE, "")  # the user turn that asks rows still calling to answer
  # Share of one batch's rows that may end as "error" (the host's bookkeeping for the row
  # raised) before the step stops with the first traceback; the count is rollout/errors.
  # 0.25, like tournament.failure_threshold: a systematic bug fails most rows and still
  # stops the first step, while a rare row-specific failure does not end a long run.
  max_error_share: float = 0.25

  def __post_init__(self):
    for name in ("max_turns", "max_total_tokens", "max_observation_tokens"):
      if getattr(self, name) < 0:
        raise ValueError(f"rollout.{name} must be >= 0, got {getattr(self, name)}")
    if self.max_observation_tokens < 8:
      raise ValueError(f"rollout.max_observation_tokens must be >= 8, got "
                       f"{self.max_observation_tokens}")
    if self.tool_timeout_s <= 0 or self.max_concurrent_calls < 1:
      raise ValueError("rollout.tool_timeout_s must be > 0 and rollout.max_concurrent_calls >= 1")
    if not 0.0 <= self.max_error_share <= 1.0:
      raise ValueError(f"rollout.max_error_share must be in [0, 1], got {self.max_error_share}")

  @classmethod
  def from_config(cls, section: Any, **extra: Any) -> "RolloutSettings":
    """From the ``rollout`` section; ``max_turns=`` (``sampling.max_turns``) comes in ``extra``."""
    return settings_from_config(cls, section, "rollout", **extra)


@dataclasses.dataclass(frozen=True)
class PolicySamplingSettings:
  """The ``sampling.*`` config section: how the policy's groups are sampled (the sampler's
  cache and buckets, the per-turn ``SamplingSettings``, the group size and the tool turns)."""

  group_size: int = 4  # G trajectories per prompt; row 0 of each group is the greedy anchor
  temperature: float = 0.8
  top_p: float = 1.0
  top_k: int = 0  # 0 = no top-k
  max_new_tokens: int = 64  # per assistant turn
  max_turns: int = 2  # tool turns before the forced final answer
  cache_len: int = 1024  # static KV-cache length (tokens per row)
  # The token lengths prompts and appended chunks (tool results) are padded to, one compiled
  # program each; () = the powers of two up to cache_len (sampling/buckets.py).
  prompt_buckets: tuple[int, ...] = ()

  def __post_init__(self):
    # A tuple however the config gave it, so the settings stay hashable.
    object.__setattr__(self, "prompt_buckets", tuple(int(b) for b in self.prompt_buckets))

  @classmethod
  def from_config(cls, section: Any, **extra: Any) -> "PolicySamplingSettings":
    return settings_from_config(cls, section, "sampling", **extra)
