"""Constrained generative decoding of the compact verdict: every reply parses by construction.

The compact verdict is fixed text around score slots (``verdict.verdict_skeleton``): ``texts[0]``
score ``texts[1]`` score ... ``texts[K]``. Its grammar is a short automaton that this module
compiles, once per (tokenizer, rubric, verdict mode), into device tables (``VerdictGrammar``):

- a fixed text is *forced*: its tokens (the tokenizer's own encoding of that text) are appended
  to every row in one model call, without sampling (fast-forward);
- a score slot allows only the score tokens: the digits "0".."9" (plus a single-token "10" where
  the tokenizer has one). With a digit-splitting tokenizer (SmolLM2) "10" is "1" then "0": after
  a "1" the automaton allows only "0" or the first token of the next fixed text, so the model
  itself decides between 1 and 10;
- after ``texts[K]`` the reply ends (EOS is implied: nothing is sampled after it).

One jitted program (``write_verdicts``) runs the whole automaton for a chunk of rows as a
``lax.scan`` over the K slots (the state is the slot index plus, per row, whether a "0" is
pending); each step picks among the allowed ids by gathering their logits (the mask as an index
table), greedy at temperature 0, otherwise sampled from the model's distribution renormalised
over the allowed ids. No host work happens between tokens; the host only turns the chosen
values into the reply's tokens and text afterwards (``reply_tokens``). The tables are checked
against the tokenizer when built: the concatenated pieces must equal the tokenizer's encoding of
the filled-in verdict for every score value, so a reply decodes and re-encodes to the same tokens.
"""
from __future__ import annotations

import dataclasses
from typing import Sequence

import jax
import jax.numpy as jnp
import numpy as np
from flax import nnx

from arenarl_jax.judges import rubric as rubric_lib
from arenarl_jax.judges import verdict as verdict_lib
from arenarl_jax.judges.flax import reads
from arenarl_jax.models import backend


@dataclasses.dataclass(frozen=True)
class VerdictGrammar:
  """The compact verdict's automaton as static tables (hashable: a jit static argument).

  ``spans[k]``: the forced tokens before slot k (k < K) and, ``spans[K]``, after the last slot.
  ``digits``: the ids of "0".."9"; ``ten``: the id of a single-token "10" or -1 ("1" + "0").
  """

  spans: tuple[tuple[int, ...], ...]
  digits: tuple[int, ...]
  ten: int = -1

  @property
  def n_slots(self) -> int:
    return len(self.spans) - 1

  @property
  def width(self) -> int:
    """Tokens per forced step: the longest span before a slot, plus one for a pending "0"."""
    return max(len(s) for s in self.spans[:-1]) + 1

  def max_tokens(self) -> int:
    """The longest reply in tokens (every score 10)."""
    per_score = 1 if self.ten >= 0 else 2
    return sum(len(s) for s in self.spans) + per_score * self.n_slots

  def score_ids(self, value: int) -> tuple[int, ...]:
    if not 0 <= value <= 10:
      raise ValueError(f"a score must be 0..10, got {value}")
    if value < 10:
      return (self.digits[value],)
    return (self.ten,) if self.ten >= 0 else (self.digits[1], self.digits[0])

  def reply_tokens(self, values: Sequence[int]) -> list[int]:
    """The reply's tokens for one score per slot (the verdict text's own tokenization)."""
    if len(values) != self.n_slots:
      raise ValueError(f"{self.n_slots} slots need {self.n_slots} values, got {len(values)}")
    out = list(self.spans[0])
    for value, span in zip(values, self.spans[1:]):
      out += list(self.score_ids(int(value))) + list(span)
    return out


def build_grammar(tokenizer, rubric: rubric_lib.Rubric, verdict_mode: str) -> VerdictGrammar:
  """The automaton of ``rubric``'s compact verdict for ``tokenizer``.

  Raises ValueError when the tokenizer does not split the verdict at its score slots (a score
  merging with the text around it), since forced text and chosen scores would then not be the
  tokens the tokenizer gives the finished reply.
  """
  texts, _ = verdict_lib.verdict_skeleton(rubric, verdict_mode)
  digits, ten = reads.score_tokens(tokenizer, [texts[0]])
  spans = tuple(tuple(tokenizer.encode(t)) for t in texts)
  if any(not s for s in spans[:-1]):
    raise ValueError("constrained decoding: a fixed text of the verdict encodes to no tokens")
  grammar = VerdictGrammar(spans, tuple(digits), ten)
  k = grammar.n_slots
  patterns = [[v] * k for v in range(11)] + [[(3 * i + 1) % 11 for i in range(k)],
                                             [(10 if i % 2 else 1) for i in range(k)]]
  for values in patterns:
    text = verdict_lib.fill_skeleton(texts, values)
    if tokenizer.encode(text) != grammar.reply_tokens(values):
      raise ValueError(f"constrained decoding: the tokenizer does not split the verdict at its "
                       f"score slots (scores {values}): {text[:120]!r}...")
  return grammar


def _pick(logits_NA, temperature, key):
  """Index into the allowed ids per row: argmax at temperature 0, else a sample of softmax(l/T)."""
  greedy_N = jnp.argmax(logits_NA, axis=-1)
  scaled = logits_NA / jnp.maximum(temperature, 1e-6)
  sampled_N = jax.random.categorical(key, scaled, axis=-1)
  return jnp.where(temperature > 0, sampled_N, greedy_N).astype(jnp.int32)


@backend.jit(static_argnames=("graphdef", "grammar"))
def write_verdicts(graphdef, params, cache, lengths_N, temperature, key, *,
                   grammar: VerdictGrammar):
  """Per row and slot: the chosen score 0..10, [N, K] int32.

  ``cache``/``lengths_N``: each row's prompt already in the cache (``lengths_N`` tokens, its
  next position), with room for ``lengths_N + grammar.max_tokens() + grammar.width`` tokens.
  Step k feeds the pending "0" (if the previous slot chose 10) and span k in one call (rows
  right-padded to ``grammar.width``; padding lands past the row's end and is overwritten later),
  picks slot k's first score token, feeds it, and decides whether a "0" follows.
  """
  model = nnx.merge(graphdef, params)
  k_slots, width = grammar.n_slots, grammar.width
  spans_KW = np.zeros((k_slots, width - 1), np.int32)
  for k, span in enumerate(grammar.spans[:-1]):
    spans_KW[k, :len(span)] = span
  span_len_K = jnp.asarray([len(s) for s in grammar.spans[:-1]], jnp.int32)
  next_first_K = jnp.asarray([s[0] for s in grammar.spans[1:]], jnp.int32)
  first_ids = jnp.asarray(grammar.digits + ((grammar.ten,) if grammar.ten >= 0 else ()),
                          jnp.int32)
  zero_id, one_id = grammar.digits[0], grammar.digits[1]
  n = lengths_N.shape[0]
  offsets_W = jnp.arange(width, dtype=jnp.int32)

  def step(carry, k):
    cache, lengths_N, zero_N = carry
    span_W1 = jnp.asarray(spans_KW)[k]
    with_zero = jnp.concatenate([jnp.full((1,), zero_id, jnp.int32), span_W1])
    without = jnp.concatenate([span_W1, jnp.zeros((1,), jnp.int32)])
    tokens_NW = jnp.where(zero_N[:, None], with_zero[None], without[None])
    counts_N = span_len_K[k] + zero_N.astype(jnp.int32)
    h_NWD, cache = model.hidden(tokens_NW, lengths_N[:, None] + offsets_W[None], cache=cache)
    lengths_N = lengths_N + counts_N
    h_ND = jnp.take_along_axis(h_NWD, (counts_N - 1)[:, None, None], axis=1)[:, 0]
    key_k = jax.random.fold_in(key, k)
    choice_N = _pick(model.head(h_ND)[:, first_ids], temperature, jax.random.fold_in(key_k, 0))
    token_N = first_ids[choice_N]
    h_N1D, cache = model.hidden(token_N[:, None], lengths_N[:, None], cache=cache)
    lengths_N = lengths_N + 1
    if grammar.ten >= 0:
      return (cache, lengths_N, jnp.zeros((n,), bool)), choice_N
    # After "1": "0" (the score is 10) or the next fixed text (the score is 1).
    pair_N2 = model.head(h_N1D[:, 0])[:, jnp.stack([jnp.asarray(zero_id), next_first_K[k]])]
    zero_N = (_pick(pair_N2, temperature, jax.random.fold_in(key_k, 1)) == 0) & (
        token_N == one_id)
    return (cache, lengths_N, zero_N), jnp.where(zero_N, 10, choice_N)

  carry = (cache, lengths_N, jnp.zeros((n,), bool))
  _, values_KN = jax.lax.scan(step, carry, jnp.arange(k_slots))
  return values_KN.T
