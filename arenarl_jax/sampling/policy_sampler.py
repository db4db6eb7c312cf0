"""The policy's sampler as the RL loop and the evaluation use it: built from the ``sampling.*``
settings (``rollout/settings.py``) on this host's sampling mesh (``sampling/layout.py``) and
pointed at the train state's current parameters by one jitted resharding (device to device,
never through the host)."""
from __future__ import annotations

import jax.numpy as jnp
from flax import nnx
from jax.sharding import Mesh

from arenarl_jax.rollout.settings import PolicySamplingSettings
from arenarl_jax.sampling.buckets import power_of_two_buckets
from arenarl_jax.sampling.layout import SamplingLayout
from arenarl_jax.sampling.sampler import Sampler, SamplingSettings


class PolicySampler(Sampler):
  """A ``Sampler`` on this host's sampling mesh that takes parameters in any layout."""

  def __init__(self, model, *, cache_len: int, layout: SamplingLayout,
               buckets: tuple[int, ...] | None = None):
    graphdef, params = nnx.split(model)
    super().__init__(nnx.merge(graphdef, self._placed(layout, nnx.to_pure_dict(params))),
                     cache_len=cache_len, buckets=buckets, mesh=layout.mesh)
    self.layout = layout

  @staticmethod
  def _placed(layout: SamplingLayout, params) -> nnx.State:
    return nnx.State(layout.place(params))

  def set_policy(self, params) -> None:
    """Samples from ``params`` (a pure dict: the train state's, or any other layout) next."""
    self.set_params(self._placed(self.layout, params))


def make_sampler(sampling: PolicySamplingSettings, model, mesh: Mesh) -> PolicySampler:
  """The policy's sampler on this host's devices of the run's ``mesh``, in the sampling layout:
  rows over 'data', heads and MLP over 'tensor'. It starts on ``model``'s parameters;
  ``set_policy`` points it at others. Prompts and appended chunks are padded to
  ``sampling.prompt_buckets`` (``prompt_buckets``). A model computing in a narrower dtype than
  its parameters (bfloat16 over float32 masters) samples from a copy in that dtype
  (``sampling/layout.py``)."""
  return PolicySampler(model, cache_len=sampling.cache_len,
                       layout=SamplingLayout(mesh, dtype=sampling_dtype(model.cfg)),
                       buckets=prompt_buckets(sampling))


def sampling_dtype(cfg):
  """The dtype of the sampler's parameter copy: the compute dtype where it is narrower than the
  parameters' (the weights are cast to it at use anyway), else None (as they are)."""
  compute, params = jnp.dtype(cfg.act_dtype), jnp.dtype(cfg.dtype)
  return compute if compute.itemsize < params.itemsize else None


def prompt_buckets(s: PolicySamplingSettings) -> tuple[int, ...]:
  """``sampling.prompt_buckets`` checked (positive, ascending, within ``sampling.cache_len``),
  or the powers of two up to ``sampling.cache_len`` when it is empty."""
  declared = tuple(int(b) for b in s.prompt_buckets)
  if not declared:
    return power_of_two_buckets(int(s.cache_len))
  if any(b <= 0 for b in declared) or list(declared) != sorted(set(declared)):
    raise ValueError(f"sampling.prompt_buckets={declared}: positive token lengths, ascending, "
                     "without repeats")
  if declared[-1] > int(s.cache_len):
    raise ValueError(f"sampling.prompt_buckets: {declared[-1]} is longer than "
                     f"sampling.cache_len={s.cache_len}")
  return declared


def sampling_settings(s: PolicySamplingSettings, tokenizer) -> SamplingSettings:
  """The sampler's per-turn settings of ``sampling.*``, stopping at the tokenizer's EOS id."""
  return SamplingSettings(temperature=s.temperature, top_p=s.top_p, top_k=s.top_k,
                          eos_ids=(tokenizer.eos_id,), max_new_tokens=s.max_new_tokens)


def set_policy(sampler: PolicySampler, params) -> None:
  """Points the sampler at ``params`` (a pure dict from the train state)."""
  sampler.set_policy(params)
