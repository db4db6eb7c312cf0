"""The sampler's three jitted programs: prefill, extend, and the decode while_loop.

Each takes the model as (graphdef, params) with the graphdef static, so one compiled program
serves every call with the same shapes; extend and decode donate the state (the KV cache is
updated in place).
"""
from __future__ import annotations

import functools

import flax.struct
import jax
import jax.numpy as jnp
from flax import nnx
from jax.sharding import Mesh, NamedSharding, PartitionSpec as P

from arenarl_jax import backend_options
from arenarl_jax.models.kv_cache import KVCache
from arenarl_jax.sampling import choose
from arenarl_jax.sampling.settings import EOS, LENGTH, NONE, STOP, RowSettings

PAD = -1  # token id in output slots past a row's generated tokens


@flax.struct.dataclass
class SamplerState:
  """What the host rollout loop carries between turns (all rows on the 'data' axis).

  lengths_N: tokens in each row's cache (= position of its next token); logits_NV: float32 logits
  for that next token; done_N: the row is finished for good (EOS, cache full, or set by the host)
  and is skipped by decode. group_size says which rows are greedy anchors.
  """

  cache: KVCache
  lengths_N: jax.Array
  logits_NV: jax.Array
  done_N: jax.Array
  group_size: int = flax.struct.field(pytree_node=False, default=1)


@flax.struct.dataclass
class SampleOutput:
  """One turn's result per row: tokens_NT/logp_NT hold lengths_N entries, then PAD / 0."""

  tokens_NT: jax.Array
  logp_NT: jax.Array
  lengths_N: jax.Array
  finish_N: jax.Array  # index into settings.FINISH_REASONS


def _on_rows(tree, mesh: Mesh | None):
  """Pins axis 0 of every array to the mesh's 'data' axis (scalars replicated)."""
  if mesh is None:
    return tree
  rows, scalar = NamedSharding(mesh, P("data")), NamedSharding(mesh, P())
  return jax.tree.map(lambda x: jax.lax.with_sharding_constraint(x, rows if x.ndim else scalar),
                      tree)


def _last_logits(model, h_NTD, counts_N):
  """Head at each row's last real token only (not over the whole padded chunk)."""
  idx_N = jnp.maximum(counts_N - 1, 0)
  h_ND = jnp.take_along_axis(h_NTD, idx_N[:, None, None], axis=1)[:, 0]
  return model.head(h_ND)


@backend_options.program(static_argnames=("graphdef", "group_size", "n_slots", "mesh"))
def prefill(graphdef, params, tokens_BT, counts_B, *, group_size: int, n_slots: int,
            mesh: Mesh | None = None) -> SamplerState:
  """Prefills each distinct prompt once, then copies its cache to the G rows of its group."""
  model = nnx.merge(graphdef, params)
  b, t = tokens_BT.shape
  cache = KVCache.init(model.cfg, b, n_slots)
  positions_BT = jnp.broadcast_to(jnp.arange(t, dtype=jnp.int32), (b, t))
  h_BTD, cache = model.hidden(tokens_BT, positions_BT, cache=cache)
  logits_BV = _last_logits(model, h_BTD, counts_B)
  rows_N = jnp.arange(b * group_size) // group_size
  state = SamplerState(
      cache=cache.take_rows(rows_N),
      lengths_N=counts_B[rows_N],
      logits_NV=logits_BV[rows_N],
      done_N=jnp.zeros((b * group_size,), bool),
      group_size=group_size)
  return _on_rows(state, mesh)


@backend_options.program(static_argnames=("graphdef", "mesh"), donate_argnames=("state",))
def extend(graphdef, params, state: SamplerState, tokens_NT, counts_N, *,
           mesh: Mesh | None = None) -> SamplerState:
  """Appends counts_N[n] tokens to row n at its own offset; rows with 0 keep their logits."""
  model = nnx.merge(graphdef, params)
  t = tokens_NT.shape[1]
  positions_NT = state.lengths_N[:, None] + jnp.arange(t, dtype=jnp.int32)[None, :]
  h_NTD, cache = model.hidden(tokens_NT, positions_NT, cache=state.cache)
  logits_NV = jnp.where(counts_N[:, None] > 0, _last_logits(model, h_NTD, counts_N),
                        state.logits_NV)
  return _on_rows(state.replace(cache=cache, lengths_N=state.lengths_N + counts_N,
                                logits_NV=logits_NV), mesh)


@functools.partial(jax.jit, static_argnames=("n_slots", "mesh"))
def resize(state: SamplerState, *, n_slots: int, mesh: Mesh | None = None) -> SamplerState:
  """Moves the state to a cache of ``n_slots`` slots (a larger bucket when rows need room)."""
  return _on_rows(state.replace(cache=state.cache.resize(n_slots)), mesh)


def _stop_hit(tail_NM, step, stop_sequences):
  """Whether the last generated tokens (tail, newest last) end with any stop sequence."""
  hit_N = jnp.zeros(tail_NM.shape[:1], bool)
  m = tail_NM.shape[1]
  for seq in stop_sequences:
    same_N = jnp.all(tail_NM[:, m - len(seq):] == jnp.asarray(seq, jnp.int32)[None], axis=1)
    hit_N = hit_N | (same_N & (step + 1 >= len(seq)))
  return hit_N


@backend_options.program(
    static_argnames=("graphdef", "eos_ids", "stop_sequences", "max_new_tokens", "mesh"),
    donate_argnames=("state",))
def decode(graphdef, params, state: SamplerState, rows: RowSettings, key, *,
           eos_ids: tuple[int, ...], stop_sequences: tuple[tuple[int, ...], ...],
           max_new_tokens: int, mesh: Mesh | None = None) -> tuple[SamplerState, SampleOutput]:
  """One turn: a lax.while_loop of sample -> feed, until every row stopped (early exit).

  Each step samples from the carried logits, then feeds the token at the row's position, so a
  row's last token (e.g. the end of a tool call) is in its cache and its logits are ready when
  the host extends it. Finished rows keep their logits; their fed tokens land past their end.
  """
  model = nnx.merge(graphdef, params)
  n = state.lengths_N.shape[0]
  n_slots = state.cache.n_slots
  tail_len = max([len(s) for s in stop_sequences], default=1)
  eos_E = jnp.asarray(eos_ids or (PAD,), jnp.int32)

  def cond(c):
    return (c["step"] < max_new_tokens) & jnp.any(c["active_N"])

  def body(c):
    step, active_N = c["step"], c["active_N"]
    tok_N, logp_N = choose.choose_tokens(c["logits_NV"], rows, jax.random.fold_in(key, step))
    tok_N = jnp.where(active_N, tok_N, PAD)
    logp_N = jnp.where(active_N, logp_N, 0.0)
    lengths_N = c["lengths_N"] + active_N
    tail_NM = jnp.concatenate([c["tail_NM"][:, 1:], tok_N[:, None]], axis=1)
    reason_N = jnp.where(
        jnp.isin(tok_N, eos_E) & bool(eos_ids), EOS,
        jnp.where(_stop_hit(tail_NM, step, stop_sequences), STOP,
                  jnp.where((step + 1 >= max_new_tokens) | (lengths_N >= n_slots), LENGTH, NONE)))
    reason_N = jnp.where(active_N, reason_N, NONE)
    logits_N1V, cache = model(jnp.maximum(tok_N, 0)[:, None], c["lengths_N"][:, None],
                              cache=c["cache"])
    return dict(
        step=step + 1,
        cache=cache,
        lengths_N=lengths_N,
        logits_NV=jnp.where(active_N[:, None], logits_N1V[:, 0], c["logits_NV"]),
        active_N=active_N & (reason_N == NONE),
        finish_N=jnp.where(reason_N != NONE, reason_N, c["finish_N"]),
        tail_NM=tail_NM,
        tokens_NT=jax.lax.dynamic_update_slice(c["tokens_NT"], tok_N[:, None], (0, step)),
        logp_NT=jax.lax.dynamic_update_slice(c["logp_NT"], logp_N[:, None], (0, step)),
    )

  init = dict(
      step=jnp.zeros((), jnp.int32),
      cache=state.cache,
      lengths_N=state.lengths_N,
      logits_NV=state.logits_NV,
      active_N=~state.done_N & (state.lengths_N < n_slots),
      finish_N=jnp.zeros((n,), jnp.int32),
      tail_NM=jnp.full((n, tail_len), PAD, jnp.int32),
      tokens_NT=jnp.full((n, max_new_tokens), PAD, jnp.int32),
      logp_NT=jnp.zeros((n, max_new_tokens), jnp.float32),
  )
  c = jax.lax.while_loop(cond, body, _on_rows(init, mesh))
  done_N = state.done_N | (c["finish_N"] == EOS) | (c["lengths_N"] >= n_slots)
  new_state = state.replace(cache=c["cache"], lengths_N=c["lengths_N"], logits_NV=c["logits_NV"],
                            done_N=done_N)
  out = SampleOutput(tokens_NT=c["tokens_NT"], logp_NT=c["logp_NT"],
                     lengths_N=c["lengths_N"] - state.lengths_N, finish_N=c["finish_N"])
  return _on_rows(new_state, mesh), _on_rows(out, mesh)
