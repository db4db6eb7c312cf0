"""Generative mode of the local Flax judge: the sampler writes verdicts, parsed like HTTP replies.

The shared prefix is prefilled once per chunk of rows and fanned out to them (``Sampler.prefill``
with ``group_size`` = rows), each row is extended with its match-specific text, then one decode
loop writes all verdicts (greedy unless ``temperature`` > 0) until EOS or ``max_new_tokens``.
"""
from __future__ import annotations

import time

import jax

from arenarl_jax import sampler as sampler_lib
from arenarl_jax.judges import verdict as verdict_lib


def verdict_rows(judge, verdict_mode: str, unique: list[tuple[int, ...]]) -> dict:
  """Per distinct prompt: (per-agent combined scores or None, error or None, detail)."""
  cfg = judge.config
  prefix_ids, _ = judge.prefix_state(verdict_mode)
  settings = sampler_lib.SamplingSettings(
      temperature=cfg.temperature, greedy_anchor=False, eos_ids=(judge.tokenizer.eos_id,),
      max_new_tokens=cfg.max_new_tokens)
  key = jax.random.fold_in(jax.random.key(cfg.seed), judge.calls)
  out = {}
  for c, (part, tokens, lengths) in enumerate(judge.chunks(unique)):
    n, t = tokens.shape
    sampler = sampler_lib.Sampler(judge.model, cache_len=len(prefix_ids) + t + cfg.max_new_tokens)
    start = time.perf_counter()
    state = sampler.prefill([prefix_ids], group_size=n)
    state = sampler.extend(state, [tokens[r, :lengths[r]] for r in range(n)])
    sample, _ = sampler.decode(state, settings, jax.random.fold_in(key, c))
    texts = judge.tokenizer.decode_batch(sampler_lib.token_lists(sample), skip_special_tokens=True)
    finish = sampler_lib.finish_reasons(sample)
    judge.metrics.latency(time.perf_counter() - start)
    judge.counts["calls"] += 1
    for r, ids in enumerate(part):
      out[ids] = _parse(judge, verdict_mode, texts[r], finish[r])
  return out


def _parse(judge, verdict_mode: str, reply: str, finish: str):
  try:
    if verdict_mode == "pairwise":
      v = verdict_lib.parse_pairwise(reply, judge.rubric, judge.compact)
      scores = (v.a.combined, v.b.combined)
    else:
      v = verdict_lib.parse_pointwise(reply, judge.rubric, judge.compact)
      scores = (v.score,)
  except verdict_lib.VerdictError as e:
    judge.metrics.add("parse_failures")
    judge.metrics.add("failures")
    cut = " (stopped at judge.flax.max_new_tokens)" if finish == "length" else ""
    return None, f"unparseable verdict{cut}: {e}", {}
  judge.metrics.add("mismatches", v.mismatches)
  return scores, None, {"mismatches": v.mismatches}
