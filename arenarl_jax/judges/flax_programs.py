"""Device programs of the local Flax judge (logit mode): shared prefix, row extension, score reads.

1. ``prefill_prefix``: the rubric's system prompt (identical for every request of a rubric/mode) is
   run ONCE into a one-row KV cache.
2. ``score_rows``: that cache is copied to all rows (``take_rows``); each row is extended with its
   match-specific text (right-padded to a length bucket, run in blocks); then every score
   is read from its own short *branch* (the JSON key path of one agent, section and dimension)
   that sees the row's prompt and its own earlier tokens but no other branch. The branches form a
   trie: key-path tokens they share (``{"Agent_A": {"path": {"`` ...) are one node, computed
   once, which halves the branch tokens of the default rubrics. One tree-attention pass over all
   nodes, without copying the cache per branch. One compiled program per (rows, bucket).

A score is the model's distribution over the score tokens 0..10 after its branch, renormalised over
those tokens. When "10" is spelled with two tokens ("1", "0", as SmolLM2's digit-splitting tokenizer
does), each branch ends with a teacher-forced "1" so the same pass also gives the distribution after
"1": P(10) = P("1")·P("0" | "1") and P(1) = P("1")·P(no digit | "1") (the number ends there; a
decimal such as "1.5" counts as 1 and longer numbers such as "12" are invalid scores and dropped).
"""
from __future__ import annotations

import collections
import dataclasses
import functools

import jax
import jax.numpy as jnp
import numpy as np
from flax import nnx

from arenarl_jax import backend_options
from arenarl_jax.models import cache_attention
from arenarl_jax.models.kv_cache import KVCache
from arenarl_jax.models.rope import rope_tables

N_SCORES = 11  # the score tokens 0..10
_MASKED = -1e30  # as the model's attention: finite, so a fully masked row cannot produce NaN
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


@backend_options.program(static_argnames=("graphdef", "kernel"))
def prefill_prefix(graphdef, params, tokens_1T, *, kernel: bool = False) -> KVCache:
  """A one-row cache holding the shared prefix at positions 0..T-1. ``kernel``: attention on the
  compiled CPU kernel (``models.cache_attention``), here and in ``score_rows``."""
  TRACES["prefill_prefix", 1, tokens_1T.shape[1]] += 1
  model = nnx.merge(graphdef, params)
  t = tokens_1T.shape[1]
  cache = KVCache.init(model.cfg, 1, t)
  return model.fill(tokens_1T, jnp.arange(t, dtype=jnp.int32)[None], cache=cache, kernel=kernel)


def key_slot_axis(cfg) -> int:
  """The slot axis of the cache's key buffers ([N, K, S, F] or the transposed [N, K, F, S])."""
  probe = jax.eval_shape(lambda: KVCache.init(cfg, 1, cfg.head_dim + 1))
  return probe.k[0].shape.index(cfg.head_dim + 1)


def pad_slots(cache: KVCache, extra: int, key_axis: int) -> KVCache:
  """The cache with ``extra`` empty slots appended."""
  def pad(x, axis):
    widths = [(0, 0)] * x.ndim
    widths[axis] = (0, extra)
    return jnp.pad(x, widths)
  return KVCache(k=tuple(pad(x, key_axis) for x in cache.k), v=tuple(pad(x, 2) for x in cache.v))


def _attend(q_NQKRF, k_NKFX, v_NKXF, visible_NQX):
  """Softmax attention in float32 (the model's formula) over X = cache slots + branch tokens."""
  scale = q_NQKRF.shape[-1] ** -0.5
  scores_NKRQX = jnp.einsum("nqkrf,nkfx->nkrqx", q_NQKRF, k_NKFX,
                            preferred_element_type=jnp.float32) * scale
  scores_NKRQX = jnp.where(visible_NQX[:, None, None], scores_NKRQX, _MASKED)
  probs_NKRQX = jax.nn.softmax(scores_NKRQX, axis=-1).astype(v_NKXF.dtype)
  return jnp.einsum("nkrqx,nkxf->nqkrf", probs_NKRQX, v_NKXF)


def _attend_merged(q_NQKRF, cache_k, cache_v, lengths_N, k_NKFQ, v_NKQF, sees_QQ):
  """``_attend`` on the CPU kernel for the cache part (slots < length: no [.., Q, S] score
  tensor), merged with the nodes' own tree attention through both parts' softmax normalisers."""
  n, q, kv, r, f = q_NQKRF.shape
  q_NKQRF = (q_NQKRF * f ** -0.5).transpose(0, 2, 1, 3, 4)
  count_NQ = jnp.broadcast_to(lengths_N[:, None], (n, q))
  out_NKQRF, lse_NKQR, _, _ = cache_attention.attend(q_NKQRF, cache_k, cache_v, count_NQ,
                                                      lse=True)
  scores_NKQRX = jnp.einsum("nkqrf,nkfx->nkqrx", q_NKQRF, k_NKFQ,
                            preferred_element_type=jnp.float32)
  scores_NKQRX = jnp.where(sees_QQ[:, None, :], scores_NKQRX, _MASKED)
  self_lse_NKQR = jax.nn.logsumexp(scores_NKQRX, axis=-1)
  self_NKQRF = jnp.einsum("nkqrx,nkxf->nkqrf", jnp.exp(scores_NKQRX - self_lse_NKQR[..., None]),
                          v_NKQF)
  total_NKQR = jnp.logaddexp(lse_NKQR, self_lse_NKQR)
  out_NKQRF = (jnp.exp(lse_NKQR - total_NKQR)[..., None] * out_NKQRF
               + jnp.exp(self_lse_NKQR - total_NKQR)[..., None] * self_NKQRF)
  return out_NKQRF.transpose(0, 2, 1, 3, 4)


def branch_hidden(model, cache: KVCache, lengths_N, layout: BranchLayout, kernel: bool = False):
  """Final hidden states [N, Q, D] of the branch tokens of every row.

  Node q sits at position ``lengths_N + offset[q]`` and sees the row's cache slots below
  ``lengths_N`` and its own ancestors in the trie only (tree attention). This is the
  model's Block/Attention computation with extra keys; tests check it against running each branch
  as its own cache row through ``model(...)``. ``kernel``: the cache part on the CPU kernel.
  """
  cfg = model.cfg
  key_axis = key_slot_axis(cfg)
  n, q = lengths_N.shape[0], len(layout.tokens)
  heads, kv, hd = cfg.n_heads, cfg.n_kv_heads, cfg.head_dim
  offset_Q = jnp.asarray(layout.offset, jnp.int32)
  x_QD = jnp.take(model.embed[...], jnp.asarray(layout.tokens, jnp.int32), axis=0)
  x_NQD = jnp.broadcast_to(x_QD[None], (n, q, cfg.d_model))
  positions_NQ = lengths_N[:, None] + offset_Q[None, :]
  cos, sin = rope_tables(cfg, positions_NQ, cache.position_bound + max(layout.offset) + 1)
  slots_S = jnp.arange(cache.n_slots)
  see_cache_NQS = jnp.broadcast_to((slots_S[None, :] < lengths_N[:, None])[:, None, :],
                                   (n, q, cache.n_slots))
  see_self_QQ = jnp.asarray(layout.sees())
  visible_NQX = jnp.concatenate(
      [see_cache_NQS, jnp.broadcast_to(see_self_QQ[None], (n, q, q))], axis=-1)
  for i, layer in enumerate(model.layers):
    attn = layer.attn
    q_NQHF, k_NQKF, v_NQKF = attn.project(layer.attn_norm(x_NQD), cos, sin)
    q_NQKRF = q_NQHF.reshape(n, q, kv, heads // kv, hd)
    k_cache = cache.k[i] if key_axis == 3 else cache.k[i].transpose(0, 1, 3, 2)
    k_NKFQ = k_NQKF.transpose(0, 2, 3, 1).astype(k_cache.dtype)
    v_NKQF = v_NQKF.transpose(0, 2, 1, 3).astype(cache.v[i].dtype)
    if kernel:
      out_NQKRF = _attend_merged(q_NQKRF, k_cache, cache.v[i], lengths_N, k_NKFQ, v_NKQF,
                                 see_self_QQ)
    else:
      k_NKFX = jnp.concatenate([k_cache, k_NKFQ], axis=3)
      v_NKXF = jnp.concatenate([cache.v[i], v_NKQF], axis=2)
      out_NQKRF = _attend(q_NQKRF, k_NKFX, v_NKXF, visible_NQX)
    x_NQD = x_NQD + attn.o(out_NQKRF.reshape(n, q, heads * hd))
    x_NQD = x_NQD + layer.mlp(layer.mlp_norm(x_NQD))
  return model.final_norm(x_NQD)


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


@backend_options.program(static_argnames=("graphdef", "layout", "block", "kernel"))
def score_rows(graphdef, params, prefix: KVCache, tokens_NT, lengths_N, *, layout: BranchLayout,
               block: int, kernel: bool = False):
  """Per row and branch: (score probabilities [N, B, 11], mass on score tokens [N, B]).

  Rows are the prefix (every row the same) followed by ``lengths_N`` real tokens of ``tokens_NT``
  (right-padded). The text goes through the model in ``block``-token pieces, each with a cache
  grown by that piece only, so its attention covers the slots filled so far instead of the
  whole (mostly masked) cache: causal attention costs ~T·(prefix + T/2) scores, not T·(prefix + T).
  ``kernel``: the text's attention, and the branches' attention to the cache, run on the compiled
  CPU kernel, which reads exactly each query's visible slots.
  """
  n, t = tokens_NT.shape
  TRACES["score_rows", n, t] += 1
  model = nnx.merge(graphdef, params)
  key_axis = key_slot_axis(model.cfg)
  ts = prefix.n_slots
  cache = prefix.take_rows(jnp.zeros((n,), jnp.int32))
  for start in range(0, t, block):
    size = min(block, t - start)
    cache = pad_slots(cache, size, key_axis)
    positions_NT = ts + start + jnp.broadcast_to(jnp.arange(size, dtype=jnp.int32), (n, size))
    cache = model.fill(tokens_NT[:, start:start + size], positions_NT, cache=cache, kernel=kernel)
  h_NQD = branch_hidden(model, cache, ts + lengths_N, layout, kernel)
  two_tokens = layout.after_one[0] >= 0
  reads = layout.first + (layout.after_one if two_tokens else ())
  logp_NRV = jax.nn.log_softmax(model.head(h_NQD[:, jnp.asarray(reads)]), axis=-1)
  b = layout.n_branches
  after = logp_NRV[:, b:] if two_tokens else None
  lp_NBS, mass_NB = score_log_probs(logp_NRV[:, :b], after, layout.digits, layout.ten)
  return jnp.exp(lp_NBS), mass_NB
