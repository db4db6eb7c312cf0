"""Device programs of the local Flax judge (logit mode): shared prefix, row extension, score reads.

1. ``prefill_prefix``: the rubric's system prompt (identical for every request of a rubric/mode) is
   run ONCE into a one-row KV cache.
2. ``score_rows``: that cache is copied to all rows (``take_rows``); each row is extended with its
   match-specific text (right-padded to a length bucket, run in blocks; a beginning that several
   rows share, such as the query and the first trajectory, runs once and is copied to them,
   ``sharing``); then every score
   is read from its own short *branch* (the JSON key path of one agent, section and dimension)
   that sees the row's prompt and its own earlier tokens but no other branch. The branches form a
   trie: key-path tokens they share (``{"Agent_A": {"path": {"`` ...) are one node, computed
   once, which halves the branch tokens of the default rubrics. One tree-attention pass over all
   nodes (the model's ``branch_hidden``), without copying the cache per branch. One compiled
   program per (rows, bucket, shared beginnings, their bucket). Attention runs on the model's chosen implementation.

A score is the model's distribution over the score tokens 0..10 after its branch, renormalised over
those tokens. When "10" is spelled with two tokens ("1", "0", as SmolLM2's digit-splitting tokenizer
does), each branch ends with a teacher-forced "1" so the same pass also gives the distribution after
"1": P(10) = P("1")·P("0" | "1") and P(1) = P("1")·P(no digit | "1") (the number ends there; a
decimal such as "1.5" counts as 1 and longer numbers such as "12" are invalid scores and dropped).
"""
from __future__ import annotations

import collections
import dataclasses

import jax
import jax.numpy as jnp
import numpy as np
from flax import nnx

from arenarl_jax.models import backend

N_SCORES = 11  # the score tokens 0..10
# (program, rows, tokens) -> times traced; a trace is one compilation of a jitted program.
TRACES: collections.Counter = collections.Counter()


@dataclasses.dataclass(frozen=True)
class BranchLayout:
  """The branches of one verdict shape, flattened into Q tokens (static: hashable tuples).

  Node q holds token ``tokens[q]`` at offset ``offset[q]`` after the row's prompt; its parent is
  node ``parent[q]`` (-1: the prompt's last token), always at a smaller index. A node sees its
  ancestors and itself. Branches that begin with the same tokens share those nodes (a trie).
  ``first[b]``: node of branch b's last text token (its logits give the first score token);
  ``after_one[b]``: node of the teacher-forced "1" that ends branch b (-1 when "10" is one token).
  ``digits``: the ids of "0".."9"; ``ten``: the id of a single-token "10", or -1.
  """

  tokens: tuple[int, ...]
  parent: tuple[int, ...]
  offset: tuple[int, ...]
  first: tuple[int, ...]
  after_one: tuple[int, ...]
  digits: tuple[int, ...]
  ten: int = -1

  @classmethod
  def build(cls, branches: list[list[int]], digits: tuple[int, ...], ten: int) -> BranchLayout:
    """The trie of the given branch token lists (each followed by a "1" when "10" is two tokens)."""
    if len(digits) != 10:
      raise ValueError(f"need the ids of the 10 digits, got {len(digits)}")
    tokens, parent, offset, first, after_one = [], [], [], [], []
    nodes: dict[tuple[int, int], int] = {}

    def child(of: int, token: int) -> int:
      if (of, token) not in nodes:
        nodes[of, token] = len(tokens)
        tokens.append(int(token))
        parent.append(of)
        offset.append(0 if of < 0 else offset[of] + 1)
      return nodes[of, token]

    for b, ids in enumerate(branches):
      if not ids:
        raise ValueError(f"branch {b} has no tokens")
      node = -1
      for token in ids:
        node = child(node, token)
      first.append(node)
      after_one.append(child(node, digits[1]) if ten < 0 else -1)
    return cls(tuple(tokens), tuple(parent), tuple(offset), tuple(first), tuple(after_one),
               tuple(digits), ten)

  def sees(self) -> np.ndarray:
    """[Q, Q] bool: node q sees node p (p is q or one of its ancestors)."""
    q = len(self.tokens)
    out = np.eye(q, dtype=bool)
    for node, up in enumerate(self.parent):
      if up >= 0:
        out[node] |= out[up]
    return out

  @property
  def n_branches(self) -> int:
    return len(self.first)


@backend.jit(static_argnames=("graphdef",))
def prefill_prefix(graphdef, params, tokens_1T):
  """A one-row KV cache holding the shared prefix at positions 0..T-1."""
  TRACES["prefill_prefix", 1, tokens_1T.shape[1]] += 1
  model = nnx.merge(graphdef, params)
  t = tokens_1T.shape[1]
  positions_1T = jnp.arange(t, dtype=jnp.int32)[None]
  return model.fill(tokens_1T, positions_1T, cache=model.empty_cache(1, t))


def score_log_probs(first_NBV, after_one_NBV, digits, ten: int):
  """(log P(score = s) renormalised over s = 0..10 [N, B, 11], mass on score tokens [N, B]).

  ``first_NBV``: log-probs after each branch; ``after_one_NBV``: log-probs after its "1" (None when
  "10" is a single token ``ten``).
  """
  digits_10 = jnp.asarray(tuple(digits), jnp.int32)
  first_NBV = jnp.asarray(first_NBV)
  lp_NB10 = first_NBV[..., digits_10]
  if after_one_NBV is None:
    lp_ten_NB = first_NBV[..., ten]
  else:
    after_one_NBV = jnp.asarray(after_one_NBV)
    lq_NB10 = after_one_NBV[..., digits_10]
    is_digit_V = jnp.zeros(after_one_NBV.shape[-1], bool).at[digits_10].set(True)
    # log P(no digit | "1") as a logsumexp over the other tokens: exact even when it is tiny.
    l_end_NB = jax.nn.logsumexp(jnp.where(is_digit_V, -jnp.inf, after_one_NBV), axis=-1)
    lp_ten_NB = lp_NB10[..., 1] + lq_NB10[..., 0]
    lp_NB10 = lp_NB10.at[..., 1].add(l_end_NB)
  lp_NBS = jnp.concatenate([lp_NB10, lp_ten_NB[..., None]], axis=-1)
  total_NB = jax.nn.logsumexp(lp_NBS, axis=-1)
  return lp_NBS - total_NB[..., None], jnp.exp(total_NB)


def _extend(model, cache, tokens_NT, start_N, block: int):
  """``cache`` with row n's tokens written at positions start_N[n], start_N[n] + 1, ...: in
  ``block``-token pieces, each with a cache grown by that piece only, so its attention covers
  the slots filled so far instead of the whole (mostly masked) cache (causal attention then
  costs ~T·(start + T/2) scores, not T·(start + T))."""
  n, t = tokens_NT.shape
  for begin in range(0, t, block):
    size = min(block, t - begin)
    cache = cache.resize(cache.n_slots + size)
    positions_NT = start_N[:, None] + begin + jnp.arange(size, dtype=jnp.int32)[None, :]
    cache = model.fill(tokens_NT[:, begin:begin + size], positions_NT, cache=cache)
  return cache


@backend.jit(static_argnames=("graphdef", "layout", "block"))
def score_rows(graphdef, params, prefix, tokens_NT, lengths_N, shared_BL=None, group_N=None,
               offset_N=None, *, layout: BranchLayout, block: int):
  """Per row and branch: (score probabilities [N, B, 11], mass on score tokens [N, B]).

  Rows are the prefix (every row the same) followed by ``lengths_N`` real tokens of ``tokens_NT``
  (right-padded), run in ``block``-token pieces (``_extend``). ``prefix``: the one-row cache of
  ``prefill_prefix``. With ``shared_BL`` (B common beginnings, right-padded; see
  ``sharing``), those run first, once each, and row n copies the first offset_N[n] tokens of
  beginning group_N[n] before its own tokens (offset 0: none); ``tokens_NT`` and ``lengths_N``
  are then what follows. A row's slots past its copied part hold the rest of the padded
  beginning until its own tokens overwrite them: a query only sees slots up to its own position.
  """
  n, t = tokens_NT.shape
  b, l = (0, 0) if shared_BL is None else shared_BL.shape
  TRACES["score_rows", n, t, b, l] += 1
  model = nnx.merge(graphdef, params)
  ts = prefix.n_slots
  if l:
    cache = prefix.take_rows(jnp.zeros((b,), jnp.int32))
    cache = _extend(model, cache, shared_BL, jnp.full((b,), ts, jnp.int32), block)
    cache = cache.take_rows(group_N)
    start_N = ts + offset_N
  else:
    cache = prefix.take_rows(jnp.zeros((n,), jnp.int32))
    start_N = jnp.full((n,), ts, jnp.int32)
  cache = _extend(model, cache, tokens_NT, start_N, block)
  h_NQD = model.branch_hidden(layout.tokens, layout.offset, layout.sees(), cache=cache,
                              lengths_N=start_N + lengths_N)
  two_tokens = layout.after_one[0] >= 0
  reads = layout.first + (layout.after_one if two_tokens else ())
  logp_NRV = jax.nn.log_softmax(model.head(h_NQD[:, jnp.asarray(reads)]), axis=-1)
  b = layout.n_branches
  after = logp_NRV[:, b:] if two_tokens else None
  lp_NBS, mass_NB = score_log_probs(logp_NRV[:, :b], after, layout.digits, layout.ten)
  return jnp.exp(lp_NBS), mass_NB
