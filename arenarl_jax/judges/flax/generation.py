"""Generative mode of the local Flax judge: the model writes verdicts, parsed like HTTP replies.

The shared prefix is prefilled once per chunk of rows and fanned out to them (``Sampler.prefill``
with ``group_size`` = rows), each row is extended with its match-specific text, then one compiled
program writes all verdicts (greedy unless ``temperature`` > 0): by default under the compact
verdict's grammar (``grammar.write_verdicts``: every reply parses), or freely with the
sampler's decode loop until EOS or ``max_new_tokens`` (``constrained=False``).
"""
from __future__ import annotations

import time

import jax
import numpy as np

from arenarl_jax.sampling import sampler as sampler_lib
from arenarl_jax.judges import verdict as verdict_lib
from arenarl_jax.judges.flax import grammar


def verdict_grammar(judge, verdict_mode: str) -> grammar.VerdictGrammar:
  """The judge's verdict automaton for ``verdict_mode``, built once."""
  if verdict_mode not in judge.grammars:
    judge.grammars[verdict_mode] = grammar.build_grammar(
        judge.tokenizer, judge.rubric, verdict_mode)
  return judge.grammars[verdict_mode]


def verdict_rows(judge, verdict_mode: str, unique: list[tuple[int, ...]]) -> dict:
  """Per distinct prompt: (per-agent combined scores or None, error or None, detail)."""
  cfg = judge.config
  prefix_ids, _ = judge.prefix_state(verdict_mode)
  key = jax.random.fold_in(jax.random.key(cfg.seed), judge.calls)
  g = verdict_grammar(judge, verdict_mode) if cfg.constrained else None
  out = {}
  for c, (part, tokens, lengths) in enumerate(judge.chunks(unique)):
    n, t = tokens.shape
    room = g.max_tokens() + g.width if g is not None else cfg.max_new_tokens
    # One cache size: the row's text plus the whole verdict (nothing grows mid-verdict).
    sampler = sampler_lib.Sampler(judge.model, cache_len=len(prefix_ids) + t + room,
                                  cache_sizes=(t + room,))
    start = time.perf_counter()
    state = sampler.prefill([prefix_ids], group_size=n, reserve=t + room)
    state = sampler.extend(state, [tokens[r, :lengths[r]] for r in range(n)])
    if g is not None:
      values = jax.device_get(grammar.write_verdicts(
          judge.graphdef, judge.params, state.cache, state.lengths_N,
          np.float32(cfg.temperature), jax.random.fold_in(key, c), grammar=g))
      token_lists = [g.reply_tokens(values[r]) for r in range(len(part))]
      finish = ["eos"] * len(part)
    else:
      settings = sampler_lib.SamplingSettings(
          temperature=cfg.temperature, greedy_anchor=False, eos_ids=(judge.tokenizer.eos_id,),
          max_new_tokens=cfg.max_new_tokens)
      sample, _ = sampler.decode(state, settings, jax.random.fold_in(key, c))
      token_lists = sampler_lib.token_lists(sample)
      finish = sampler_lib.finish_reasons(sample)
    texts = judge.tokenizer.decode_batch(token_lists, skip_special_tokens=True)
    judge.metrics.latency(time.perf_counter() - start)
    judge.counts["calls"] += 1
    judge.counts["generated_tokens"] += sum(len(ids) for ids in token_lists[:len(part)])
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
