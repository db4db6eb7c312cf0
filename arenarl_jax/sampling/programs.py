"""The sampler's jitted programs: prefill, extend, and the decode while_loop (in segments).

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

from arenarl_jax.models import backend
from arenarl_jax.models.kv_cache import KVCache, layout_of
from arenarl_jax.sampling import choose
from arenarl_jax.sampling.settings import EOS, LENGTH, NONE, STOP, RowSettings

PAD = -1  # token id in output slots past a row's generated tokens


@flax.struct.dataclass
class SamplerState:
  """What the host rollout loop carries between turns (all rows on the 'data' axis).

  lengths_N: tokens in each row (prompt included; = position of its next token); hidden_ND:
  the final-norm hidden state of each row's last token (the next token's logits are
  ``model.head(hidden_ND)``: decode computes them when it samples, so the state holds D floats
  per row instead of V, and a finished row keeps its D, not V, values); done_N: the row is
  finished for good (EOS, cache full, or set by the host) and is skipped by decode. group_size
  says which rows are greedy anchors.
  """

  cache: KVCache
  lengths_N: jax.Array
  hidden_ND: jax.Array
  done_N: jax.Array
  group_size: int = flax.struct.field(pytree_node=False, default=1)


@flax.struct.dataclass
class SampleOutput:
  """One turn's result per row: tokens_NT/logp_NT hold lengths_N entries, then PAD / 0."""

  tokens_NT: jax.Array
  logp_NT: jax.Array
  lengths_N: jax.Array
  finish_N: jax.Array  # index into settings.TURN_STOP_REASONS


def on_rows(tree, mesh: Mesh | None):
  """Pins axis 0 of every array to the mesh's 'data' axis (scalars replicated) and the KV cache's
  head axis to 'tensor' (as the partition rules split the k/v kernels' heads), where it divides;
  a shared prefix (one row per prompt, B need not divide the mesh) keeps only its heads split."""
  if mesh is None:
    return tree
  tensor = mesh.shape["tensor"]

  def constrain(x, *spec):
    return jax.lax.with_sharding_constraint(x, NamedSharding(mesh, P(*spec[:x.ndim])))

  def heads(x, rows, axis):  # K (axis 1 or 2, as the layout puts it) over 'tensor' if it divides
    split = "tensor" if tensor > 1 and x.shape[axis] % tensor == 0 else None
    return constrain(x, rows, *((split,) if axis == 1 else (None, split)))

  def pin(x):
    if isinstance(x, KVCache):
      axis = x.head_axis
      prefix = None if x.prefix is None else jax.tree.map(
          lambda y: heads(y, None, axis) if y.ndim == 4 else constrain(y), x.prefix)
      return x.replace(k=tuple(heads(y, "data", axis) for y in x.k),
                       v=tuple(heads(y, "data", axis) for y in x.v), prefix=prefix)
    return constrain(x, "data") if x.ndim else constrain(x)
  return jax.tree.map(pin, tree, is_leaf=lambda x: isinstance(x, KVCache))


def _last_hidden(h_NTD, counts_N):
  """Each row's hidden state at its last real token (counts_N real tokens; at least one)."""
  idx_N = jnp.maximum(counts_N - 1, 0)
  return jnp.take_along_axis(h_NTD, idx_N[:, None, None], axis=1)[:, 0]


@backend.jit(static_argnames=("graphdef", "group_size", "n_slots", "mesh"))
def prefill(graphdef, params, tokens_BT, counts_B, *, group_size: int, n_slots: int,
            mesh: Mesh | None = None) -> SamplerState:
  """Prefills each distinct prompt once; it becomes the shared prefix of its G rows, whose own
  buffers (``n_slots`` each) start empty at the prompt's end."""
  model = nnx.merge(graphdef, params)
  b, t = tokens_BT.shape
  positions_BT = jnp.broadcast_to(jnp.arange(t, dtype=jnp.int32), (b, t))
  empty = KVCache.init(model.cfg, b, t, layout=layout_of(model))
  h_BTD, prompts = model.hidden(tokens_BT, positions_BT, cache=empty)
  hidden_BD = _last_hidden(h_BTD, counts_B)
  rows_N = jnp.arange(b * group_size) // group_size
  state = SamplerState(
      cache=KVCache.init(model.cfg, b * group_size, n_slots, prefix=prompts.as_prefix(counts_B),
                         layout=prompts.layout),
      lengths_N=counts_B[rows_N],
      hidden_ND=hidden_BD[rows_N],
      done_N=jnp.zeros((b * group_size,), bool),
      group_size=group_size)
  return on_rows(state, mesh)


@backend.jit(static_argnames=("graphdef", "mesh"), donate_argnames=("state",))
def extend(graphdef, params, state: SamplerState, tokens_NT, counts_N, *,
           mesh: Mesh | None = None) -> SamplerState:
  """Appends counts_N[n] tokens to row n at its own offset; rows with 0 keep their state."""
  model = nnx.merge(graphdef, params)
  t = tokens_NT.shape[1]
  positions_NT = state.lengths_N[:, None] + jnp.arange(t, dtype=jnp.int32)[None, :]
  h_NTD, cache = model.hidden(tokens_NT, positions_NT, cache=state.cache)
  hidden_ND = jnp.where(counts_N[:, None] > 0, _last_hidden(h_NTD, counts_N), state.hidden_ND)
  return on_rows(state.replace(cache=cache, lengths_N=state.lengths_N + counts_N,
                                hidden_ND=hidden_ND), mesh)


@functools.partial(jax.jit, static_argnames=("n_slots", "mesh"))
def resize(state: SamplerState, *, n_slots: int, mesh: Mesh | None = None) -> SamplerState:
  """Moves the state to row buffers of ``n_slots`` slots (the next size when rows need room)."""
  return on_rows(state.replace(cache=state.cache.resize(n_slots)), mesh)


def _stop_hit(tail_NM, step, stop_sequences):
  """Whether the last generated tokens (tail, newest last) end with any stop sequence."""
  hit_N = jnp.zeros(tail_NM.shape[:1], bool)
  m = tail_NM.shape[1]
  for seq in stop_sequences:
    same_N = jnp.all(tail_NM[:, m - len(seq):] == jnp.asarray(seq, jnp.int32)[None], axis=1)
    hit_N = hit_N | (same_N & (step + 1 >= len(seq)))
  return hit_N


@flax.struct.dataclass
class TurnState:
  """A turn in progress, carried across decode segments (the cache may grow between them).

  step: tokens sampled so far this turn; start_N: each row's length when the turn began;
  tail_NM: the newest M generated tokens (for stop sequences); tokens_NT/logp_NT: the output.
  """

  step: jax.Array
  active_N: jax.Array
  finish_N: jax.Array
  start_N: jax.Array
  tail_NM: jax.Array
  tokens_NT: jax.Array
  logp_NT: jax.Array


@functools.partial(jax.jit, static_argnames=("max_new_tokens", "tail_len", "cache_len", "mesh"))
def begin_turn(lengths_N, done_N, *, max_new_tokens: int, tail_len: int, cache_len: int,
               mesh: Mesh | None = None) -> TurnState:
  """A fresh turn: every row not done and with room in cache_len is active. (Takes the rows'
  lengths, not the state, so it compiles once whatever the cache size.)"""
  n = lengths_N.shape[0]
  return on_rows(TurnState(
      step=jnp.zeros((), jnp.int32),
      active_N=~done_N & (lengths_N < cache_len),
      finish_N=jnp.zeros((n,), jnp.int32),
      start_N=lengths_N,
      tail_NM=jnp.full((n, tail_len), PAD, jnp.int32),
      tokens_NT=jnp.full((n, max_new_tokens), PAD, jnp.int32),
      logp_NT=jnp.zeros((n, max_new_tokens), jnp.float32)), mesh)


@functools.partial(jax.jit, static_argnames=("cache_len", "mesh"), donate_argnames=("turn",))
def end_turn(lengths_N, done_N, turn: TurnState, *, cache_len: int,
             mesh: Mesh | None = None) -> tuple[jax.Array, SampleOutput]:
  """(done_N: rows that hit EOS or filled cache_len are done for good, the turn's output)."""
  done_N = done_N | (turn.finish_N == EOS) | (lengths_N >= cache_len)
  out = SampleOutput(tokens_NT=turn.tokens_NT, logp_NT=turn.logp_NT,
                     lengths_N=lengths_N - turn.start_N, finish_N=turn.finish_N)
  return on_rows(done_N, mesh), on_rows(out, mesh)


@backend.jit(
    static_argnames=("graphdef", "decode_step", "eos_ids", "stop_sequences", "max_new_tokens",
                     "cache_len", "mesh"),
    donate_argnames=("state", "turn"))
def decode(graphdef, params, state: SamplerState, turn: TurnState, rows: RowSettings, key,
           prepared=None, *, decode_step=backend.ROWS_DECODE, eos_ids: tuple[int, ...],
           stop_sequences: tuple[tuple[int, ...], ...], max_new_tokens: int, cache_len: int,
           mesh: Mesh | None = None) -> tuple[SamplerState, TurnState]:
  """One segment of a turn: a lax.while_loop of sample -> feed over the cache as it is.

  Each step computes the logits from the carried hidden states and samples, then feeds the token
  at the row's position, so a row's last token (e.g. the end of a tool call) is in its cache and
  its hidden state is ready when the host extends it. Finished rows keep their hidden state;
  their fed tokens land past their end.
  The loop ends when every row stopped (early exit), or pauses when an active row has filled a
  cache smaller than cache_len: the host then moves the state to a larger cache and calls again.
  The reference attention reads every slot of the cache, so growing it within a turn keeps early
  steps cheap (the CPU kernel reads only the filled slots).
  Step k always uses fold_in(key, k): pausing does not change what is sampled.
  ``decode_step`` is the backend's decode step for the model (``backend.current().decode_step``);
  ``prepared`` is what its ``prepare`` made of these weights. The step computes the logits (in
  the layout it samples them in) and feeds the tokens. The attention is the model's chosen
  implementation.
  """
  model = nnx.merge(graphdef, params)
  n_slots = state.cache.n_slots
  eos_E = jnp.asarray(eos_ids or (PAD,), jnp.int32)

  start_N = state.cache.start_N()

  def cond(c):
    s, t = c
    full = jnp.any(t.active_N & (s.lengths_N - start_N >= n_slots))
    return (t.step < max_new_tokens) & jnp.any(t.active_N) & ~full

  def body(c):
    s, t = c
    step, active_N = t.step, t.active_N
    logits, vocab_axis = decode_step.logits(model, prepared, s.hidden_ND)
    tok_N, logp_N = choose.choose_tokens(logits, rows, jax.random.fold_in(key, step),
                                         vocab_axis=vocab_axis)
    tok_N = jnp.where(active_N, tok_N, PAD)
    logp_N = jnp.where(active_N, logp_N, 0.0)
    lengths_N = s.lengths_N + active_N
    tail_NM = jnp.concatenate([t.tail_NM[:, 1:], tok_N[:, None]], axis=1)
    reason_N = jnp.where(
        jnp.isin(tok_N, eos_E) & bool(eos_ids), EOS,
        jnp.where(_stop_hit(tail_NM, step, stop_sequences), STOP,
                  jnp.where((step + 1 >= max_new_tokens) | (lengths_N >= cache_len), LENGTH,
                            NONE)))
    reason_N = jnp.where(active_N, reason_N, NONE)
    h_ND, cache = decode_step.feed(model, prepared, jnp.maximum(tok_N, 0), s.lengths_N, s.cache,
                                   mesh=mesh)
    s = s.replace(cache=cache, lengths_N=lengths_N,
                  hidden_ND=jnp.where(active_N[:, None], h_ND, s.hidden_ND))
    t = t.replace(
        step=step + 1,
        active_N=active_N & (reason_N == NONE),
        finish_N=jnp.where(reason_N != NONE, reason_N, t.finish_N),
        tail_NM=tail_NM,
        tokens_NT=jax.lax.dynamic_update_slice(t.tokens_NT, tok_N[:, None], (0, step)),
        logp_NT=jax.lax.dynamic_update_slice(t.logp_NT, logp_N[:, None], (0, step)))
    return s, t

  state, turn = jax.lax.while_loop(cond, body, on_rows((state, turn), mesh))
  return on_rows(state, mesh), on_rows(turn, mesh)
