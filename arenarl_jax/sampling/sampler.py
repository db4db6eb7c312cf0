"""The group sampler: prefill each prompt once, decode G rows per prompt in one jitted loop, extend.

    sampler = Sampler(model, cache_len=1024, mesh=mesh)
    settings = SamplingSettings(temperature=1.0, eos_ids=(tok.eos_id,), max_new_tokens=256)
    out, state = sampler.sample(prompts, group_size=8, settings=settings, key=key)
    # host: parse tool calls, run tools, then per row: observation tokens (or [] to leave it as is)
    state = sampler.extend(state, observation_tokens)
    out, state = sampler.decode(state, settings, key2)

Rows are N = B * G with row r belonging to prompt r // G; row 0 of each group is greedy when
``settings.greedy_anchor``. Each prompt's keys/values are stored once, as a prefix shared by its G
rows (decode reads them once per group); a row's own tokens (generated, observed) go to its own
buffer, which grows along a few cache sizes as the row does. Prompt and observation chunks are
right-padded to a bucket length, so a whole multi-turn rollout compiles a few programs once.
"""
from __future__ import annotations

from typing import Sequence

import jax
import numpy as np
from flax import nnx
from jax.sharding import Mesh

from arenarl_jax.models import backend
from arenarl_jax.sampling import programs
from arenarl_jax.sampling import shared_rows
from arenarl_jax.sampling.buckets import (bucket_length, cache_size_ladder, pad_rows,
                                          power_of_two_buckets)
from arenarl_jax.sampling.programs import PAD, SampleOutput, SamplerState
from arenarl_jax.sampling.settings import TURN_STOP_REASONS, RowSettings, SamplingSettings

__all__ = ["PAD", "RowSettings", "SampleOutput", "Sampler", "SamplerState",
           "SamplingSettings", "finish_reasons", "sample", "token_lists"]


class Sampler:
  """Holds the model (graphdef + params) and the static choices: cache sizes, buckets, mesh.

  ``cache_len`` is the most tokens a row can hold. The cache starts at the smallest of
  ``cache_sizes`` that fits and grows to the next one when a row needs room, between turns and
  within a turn (decode pauses, the state moves, decoding resumes with the same tokens):
  The reference attention reads every slot of the cache (the CPU kernel only the filled ones), so
  short rows stay cheap and hold little memory. Each size compiles its programs once. The default
  ladder is ``cache_size_ladder(cache_len)`` (32, 64, 96, 128, 192, 256, ..., cache_len);
  ``cache_sizes=()`` keeps the cache at cache_len throughout.
  Decode steps run as the backend's ``decode_step(model)`` says (``models/backend.py``; on CPU
  with ``cpu_kernel`` attention, ``auto`` there, the library's Transformer steps feature-major),
  chosen once here.
  """

  def __init__(self, model: nnx.Module, *, cache_len: int, buckets: Sequence[int] | None = None,
               cache_sizes: Sequence[int] | None = None, mesh: Mesh | None = None):
    self.graphdef, self.params = nnx.split(model)
    self.cfg = model.cfg
    self.cache_len = int(cache_len)
    self.buckets = tuple(sorted(buckets)) if buckets else power_of_two_buckets(self.cache_len)
    if self.buckets[-1] > self.cache_len:
      raise ValueError(f"bucket {self.buckets[-1]} is longer than cache_len={self.cache_len}")
    if cache_sizes is None:
      cache_sizes = cache_size_ladder(self.cache_len)
    self.cache_sizes = tuple(sorted({int(s) for s in cache_sizes} | {self.cache_len}))
    if self.cache_sizes[-1] > self.cache_len or self.cache_sizes[0] < 1:
      raise ValueError(f"cache_sizes {self.cache_sizes} must lie in [1, cache_len="
                       f"{self.cache_len}]")
    self.mesh = mesh
    self.decode_step = backend.current().decode_step(model)
    self._prepared = None  # what the decode step made of self.params
    self.shared_group_sizes: set[int] = set()  # D of every shared extend (its programs' shapes)

  def _cache_size(self, need: int) -> int:
    """The smallest cache size holding ``need`` tokens (cache_len at most)."""
    return bucket_length(min(need, self.cache_len), self.cache_sizes, what="cache need")

  def _room(self, state: SamplerState, need: int) -> SamplerState:
    """The state with room for ``need`` tokens in each row's own buffer (after its prompt)."""
    size = self._cache_size(need)
    if size <= state.cache.n_slots:
      return state
    state = programs.resize(state, n_slots=size, mesh=self.mesh)
    backend.release_host_memory()  # the smaller buffers' pages: no later size fits in them
    return state

  def set_params(self, params: nnx.State) -> None:
    """New weights (e.g. after a train step); same structure, so nothing recompiles."""
    self.params = params
    self._prepared = None

  def _decode_prepared(self):
    """What the decode step reads besides the weights (e.g. transposed kernels, one
    weight-sized buffer), made once per set of weights."""
    if self._prepared is None:
      self._prepared = self.decode_step.prepare(self.graphdef, self.params)
    return self._prepared

  def _check_tokens(self, rows: Sequence[Sequence[int]], what: str) -> None:
    for i, row in enumerate(rows):
      arr = np.asarray(row)
      if arr.size and (arr.min() < 0 or arr.max() >= self.cfg.vocab_size):
        raise ValueError(f"{what} row {i}: token ids must be in [0, {self.cfg.vocab_size}), "
                         f"got min {arr.min()} max {arr.max()}")

  @property
  def row_multiple(self) -> int:
    """Row counts the mesh splits evenly: the size of its 'data' axis (1 without a mesh)."""
    return 1 if self.mesh is None else int(self.mesh.shape["data"])

  def _padding(self, n_prompts: int, group_size: int) -> int:
    """The fewest prompts to add so that the rows split evenly over the 'data' axis."""
    return next(e for e in range(self.row_multiple)
                if (n_prompts + e) * group_size % self.row_multiple == 0)

  def _rows_for(self, state: SamplerState, rows: RowSettings) -> RowSettings:
    """``rows`` (the caller's rows) for ``state``, whose padding rows (done) repeat the last."""
    have, n, g = len(rows.temperature_N), state.lengths_N.shape[0], state.group_size
    if have % g or (have // g + self._padding(have // g, g)) * g != n:
      raise ValueError(f"decode: row settings for {have} rows, the state has {n}")
    pad = lambda a: np.concatenate([np.asarray(a)] + [np.asarray(a)[-1:]] * (n - have))
    return rows.replace(temperature_N=pad(rows.temperature_N), top_p_N=pad(rows.top_p_N),
                        top_k_N=pad(rows.top_k_N))

  def prefill(self, prompts: Sequence[Sequence[int]], group_size: int = 1, *,
              reserve: int = 0) -> SamplerState:
    """Caches B prompts once each as the shared prefix of N = B * group_size rows, whose own
    buffers start with room for ``reserve`` tokens (the next cache size that fits).

    On a mesh whose 'data' axis does not divide N, copies of the first prompt are added until it
    does: their rows come after the caller's in the state and in every output, and are done from
    the start (decode skips them). ``extend`` takes a token list for every row of the state;
    ``decode`` extends shorter row settings itself."""
    if not prompts or any(len(p) == 0 for p in prompts):
      raise ValueError("prefill: every prompt needs at least one token")
    if group_size < 1:
      raise ValueError(f"prefill: group_size must be >= 1, got {group_size}")
    self._check_tokens(prompts, "prompt")
    real = len(prompts) * group_size
    prompts = list(prompts) + [prompts[0]] * self._padding(len(prompts), group_size)
    longest = max(len(p) for p in prompts)
    if longest >= self.cache_len:
      raise ValueError(f"prefill: a {longest}-token prompt leaves no room in cache_len="
                       f"{self.cache_len}")
    tokens_BT, counts_B = pad_rows(prompts, bucket_length(longest, self.buckets, what="prompt"))
    state = programs.prefill(self.graphdef, self.params, tokens_BT, counts_B,
                             group_size=group_size, n_slots=self._cache_size(max(reserve, 1)),
                             mesh=self.mesh)
    n = len(prompts) * group_size
    if n > real:  # the padding rows are done before they start
      done = np.arange(n) >= real
      state = state.replace(done_N=jax.device_put(done, state.done_N.sharding))
    return state

  def extend(self, state: SamplerState, new_tokens: Sequence[Sequence[int]],
             same_as: Sequence[int] | None = None) -> SamplerState:
    """Appends new_tokens[n] (any length, may be empty) to row n's cache; donates ``state``.

    ``same_as[n]``: a row of n's group whose history and new tokens equal n's (n itself when
    none; ``shared_rows.same_history`` finds them): each such history extends once, in a smaller
    batch, and its cache is copied to the rows that share it."""
    n = state.lengths_N.shape[0]
    if len(new_tokens) != n:
      raise ValueError(f"extend: got token lists for {len(new_tokens)} rows, state has {n}")
    self._check_tokens(new_tokens, "extend")
    counts = np.asarray([len(t) for t in new_tokens])
    if not counts.any():
      return state
    lengths, prompt_lengths = jax.device_get((state.lengths_N, state.cache.prefix.lengths_B))
    own = _own_tokens(lengths, prompt_lengths)
    over = np.nonzero(lengths + counts > self.cache_len)[0]
    if over.size:
      r = int(over[0])
      raise ValueError(f"extend: row {r} holds {lengths[r]} tokens; {counts[r]} more exceed "
                       f"cache_len={self.cache_len}")
    bucket = bucket_length(int(counts.max()), self.buckets)
    state = self._room(state, int((own + counts).max()))
    shared = None if same_as is None else shared_rows.plan(
        counts, same_as, state.group_size, self.row_multiple, lengths_N=lengths)
    if shared is None:
      tokens_NT, counts_N = pad_rows(new_tokens, bucket)
      return programs.extend(self.graphdef, self.params, state, tokens_NT, counts_N,
                             mesh=self.mesh)
    self.shared_group_sizes.add(shared.group_size)
    part = shared_rows.take(state, shared.rows_M, group_size=shared.group_size, mesh=self.mesh)
    tokens_MT, counts_M = pad_rows([new_tokens[r] if c else [] for r, c in
                                    zip(shared.rows_M, shared.counts_M)], bucket)
    part = programs.extend(self.graphdef, self.params, part, tokens_MT, counts_M, mesh=self.mesh)
    return shared_rows.put(state, part, shared.from_N, shared.take_N, mesh=self.mesh)

  def decode(self, state: SamplerState, settings: SamplingSettings, key: jax.Array,
             rows: RowSettings | None = None) -> tuple[SampleOutput, SamplerState]:
    """Samples one turn for every row not done; donates ``state``.

    With several cache sizes the turn runs in segments: decode pauses when a row fills the
    cache, the state moves to the next size, and decoding resumes (same tokens as one segment).
    """
    n = state.lengths_N.shape[0]
    rows = settings.rows(n, state.group_size) if rows is None else self._rows_for(state, rows)
    tail_len = max([len(s) for s in settings.stop_sequences], default=1)
    turn = programs.begin_turn(state.lengths_N, state.done_N,
                               max_new_tokens=settings.max_new_tokens, tail_len=tail_len,
                               cache_len=self.cache_len, mesh=self.mesh)
    static = dict(eos_ids=settings.eos_ids, stop_sequences=settings.stop_sequences,
                  max_new_tokens=settings.max_new_tokens, cache_len=self.cache_len, mesh=self.mesh)
    growing = len(self.cache_sizes) > 1
    prepared = self._decode_prepared()
    while True:
      if growing:
        # One host sync per segment: is the turn over, and how full are the active rows?
        step, active, lengths, prompt_lengths = jax.device_get(
            (turn.step, turn.active_N, state.lengths_N, state.cache.prefix.lengths_B))
        if step >= settings.max_new_tokens or not active.any():
          break
        state = self._room(state, int(_own_tokens(lengths, prompt_lengths)[active].max()) + 1)
      state, turn = programs.decode(self.graphdef, self.params, state, turn, rows, key, prepared,
                                    decode_step=self.decode_step, **static)
      if not growing:
        break
    done_N, out = programs.end_turn(state.lengths_N, state.done_N, turn, cache_len=self.cache_len,
                                    mesh=self.mesh)
    return out, state.replace(done_N=done_N)

  def sample(self, prompts: Sequence[Sequence[int]], *, group_size: int,
             settings: SamplingSettings, key: jax.Array,
             rows: RowSettings | None = None) -> tuple[SampleOutput, SamplerState]:
    """prefill + decode: G samples for each of B prompts (N = B * G rows)."""
    state = self.prefill(prompts, group_size)
    return self.decode(state, settings, key, rows)


def _own_tokens(lengths_N: np.ndarray, prompt_lengths_B: np.ndarray) -> np.ndarray:
  """Host copy of KVCache.start_N's rule: the tokens in each row's own buffer (after its prompt;
  row n belongs to prompt n // G)."""
  return lengths_N - np.repeat(prompt_lengths_B, len(lengths_N) // len(prompt_lengths_B))


def sample(model: nnx.Module, prompts: Sequence[Sequence[int]], *, group_size: int,
           settings: SamplingSettings, key: jax.Array, cache_len: int | None = None,
           mesh: Mesh | None = None) -> SampleOutput:
  """One-shot sampling; for rollouts keep a Sampler (and its state) instead."""
  if cache_len is None:
    longest = max(len(p) for p in prompts)
    cache_len = bucket_length(longest, power_of_two_buckets(1 << 30)) + settings.max_new_tokens
  out, _ = Sampler(model, cache_len=cache_len, mesh=mesh).sample(
      prompts, group_size=group_size, settings=settings, key=key)
  return out


def token_lists(out: SampleOutput) -> list[list[int]]:
  """Each row's generated tokens as a host list (the padding dropped)."""
  tokens, lengths = jax.device_get((out.tokens_NT, out.lengths_N))
  return [tokens[i, : lengths[i]].tolist() for i in range(len(lengths))]


def finish_reasons(out: SampleOutput) -> list[str]:
  """Per row: "eos", "stop", "length", or "none" (the row was done before this turn)."""
  return [TURN_STOP_REASONS[int(f)] for f in jax.device_get(out.finish_N)]
