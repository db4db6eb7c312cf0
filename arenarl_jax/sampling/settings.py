"""Sampling settings: frozen (hashable) per-rollout settings and the per-row arrays they give."""
from __future__ import annotations

import dataclasses

import flax.struct
import jax
import numpy as np

# Why a row's turn stopped, as stored per row in device arrays (index into TURN_STOP_REASONS).
# Not how a trajectory ended (types.TRAJECTORY_FINISH_REASONS).
NONE, EOS, STOP, LENGTH = 0, 1, 2, 3
TURN_STOP_REASONS = ("none", "eos", "stop", "length")


@dataclasses.dataclass(frozen=True)
class SamplingSettings:
  """How a turn is sampled.

  temperature/top_p/top_k apply to every row except the greedy anchor (row 0 of each group when
  ``greedy_anchor``); temperature 0 means greedy; top_k 0 and top_p 1 mean no truncation. They
  travel to the device as per-row arrays, so changing them does not recompile. ``eos_ids``,
  ``stop_sequences`` and ``max_new_tokens`` shape the compiled decode loop (static).
  A row stops at an EOS id (and is then done for the whole rollout), at the end of a stop
  sequence (turn over, e.g. a closed tool call), or after max_new_tokens in this turn.
  """

  temperature: float = 1.0
  top_p: float = 1.0
  top_k: int = 0
  greedy_anchor: bool = True
  eos_ids: tuple[int, ...] = ()
  stop_sequences: tuple[tuple[int, ...], ...] = ()
  max_new_tokens: int = 128

  def __post_init__(self):
    if self.temperature < 0:
      raise ValueError(f"SamplingSettings.temperature must be >= 0, got {self.temperature}")
    if not 0 < self.top_p <= 1:
      raise ValueError(f"SamplingSettings.top_p must be in (0, 1], got {self.top_p}")
    if self.top_k < 0:
      raise ValueError(f"SamplingSettings.top_k must be >= 0 (0 = off), got {self.top_k}")
    if self.max_new_tokens < 1:
      raise ValueError(f"SamplingSettings.max_new_tokens must be >= 1, got {self.max_new_tokens}")
    # Normalise to tuples so lists given by a config still hash.
    object.__setattr__(self, "eos_ids", tuple(int(t) for t in self.eos_ids))
    stops = tuple(tuple(int(t) for t in seq) for seq in self.stop_sequences)
    if any(len(seq) == 0 for seq in stops):
      raise ValueError("SamplingSettings.stop_sequences: a stop sequence must not be empty")
    object.__setattr__(self, "stop_sequences", stops)

  def rows(self, n_rows: int, group_size: int, first_row: int = 0) -> "RowSettings":
    """Per-row arrays: the anchors (row r with r % group_size == 0) greedy, the rest as set.

    ``first_row``: the global index of row 0 when these rows are one host's share of a batch
    (see ``RowSettings.first_row``); a multiple of ``group_size``."""
    if first_row < 0 or first_row % group_size:
      raise ValueError(f"first_row={first_row} must be a non-negative multiple of "
                       f"group_size={group_size}")
    if n_rows % group_size:
      raise ValueError(f"n_rows={n_rows} is not a multiple of group_size={group_size}")
    temperature_N = np.full((n_rows,), self.temperature, np.float32)
    if self.greedy_anchor:
      temperature_N[::group_size] = 0.0
    return RowSettings(
        temperature_N=temperature_N,
        top_p_N=np.full((n_rows,), self.top_p, np.float32),
        top_k_N=np.full((n_rows,), self.top_k, np.int32),
        first_row=np.int32(first_row))


@flax.struct.dataclass
class RowSettings:
  """Per-row sampling parameters (device arrays under jit): temperature 0 = greedy."""

  temperature_N: jax.Array
  top_p_N: jax.Array
  top_k_N: jax.Array
  # The global index of row 0 (an int32 scalar, traced so that every offset shares one
  # program): row n draws the uniform number of global row first_row + n, so one host's share
  # of a batch samples what one process sampling the whole batch draws for those rows.
  first_row: jax.Array = flax.struct.field(default_factory=lambda: np.int32(0))
