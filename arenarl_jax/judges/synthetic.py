"""Synthetic judges for tests and simulation: a fixed score matrix, and hidden qualities + noise.

Both implement the ``Judge`` protocol: ``judge(matches) -> list[MatchResult]`` with
bidirectional-sum scores in [0, 20], and record the size of every batch call in ``batch_sizes``.
Each match counts as the two requests a real judge would send (``MatchResult.requests = 2``);
a failed match is ``ok=False`` with scores (0, 0), which the tournament ignores.
"""
from __future__ import annotations

import time
from typing import Iterable, Sequence

import numpy as np

from arenarl_jax.types import Match, MatchResult, Stateless

MAX_SCORE = 20.0
NOISE_MODELS = ("exact", "gaussian", "bradley_terry")


def _match_indices(matches: Sequence[Match]) -> np.ndarray:
  """[M, 3] int64 (group, i, j)."""
  return np.array([(m.group, m.i, m.j) for m in matches], np.int64).reshape(-1, 3)


def _check_indices(gij_M3: np.ndarray, num_groups: int | None, size: int, name: str) -> None:
  """Clear error for a match that points outside the judge's table."""
  bad = (gij_M3[:, 1:] < 0).any(1) | (gij_M3[:, 1:] >= size).any(1) | (gij_M3[:, 0] < 0)
  if num_groups is not None:
    bad |= gij_M3[:, 0] >= num_groups
  if bad.any():
    g, i, j = gij_M3[int(np.argmax(bad))].tolist()
    raise IndexError(f"{name}: match group={g} i={i} j={j} is outside the table "
                     f"({num_groups if num_groups is not None else 'any'} groups x {size})")


class ScoreMatrixJudge(Stateless):
  """Match (g, i, j) scores (S[g][i][j], S[g][j][i]); one [G, G] matrix serves every group.

  S[i][j] is the bidirectional-sum score i gets against j, so the result does not depend on
  which side plays P. Unordered pairs in ``fail_pairs`` fail in every group (for tests).
  """

  def __init__(self, scores: np.ndarray, *, fail_pairs: Iterable[tuple[int, int]] = ()):
    scores = np.asarray(scores, np.float64)
    if scores.ndim not in (2, 3) or scores.shape[-1] != scores.shape[-2]:
      raise ValueError(f"ScoreMatrixJudge: scores must be [G, G] or [B, G, G], "
                       f"got shape {scores.shape}")
    off_diag = ~np.eye(scores.shape[-1], dtype=bool)
    values = scores[..., off_diag]
    if not np.all(np.isfinite(values) & (values >= 0) & (values <= MAX_SCORE)):
      raise ValueError("ScoreMatrixJudge: off-diagonal scores must be finite and in [0, 20]")
    self.scores_BGG = scores if scores.ndim == 3 else None
    self.scores_GG = scores if scores.ndim == 2 else None
    self.fail_pairs = frozenset(frozenset(p) for p in fail_pairs)
    self.batch_sizes: list[int] = []

  def judge(self, matches: Sequence[Match], *, offset: int = 0) -> list[MatchResult]:
    """Looks every match up in the table."""
    del offset  # a table does not depend on where a match sits in the batch
    self.batch_sizes.append(len(matches))
    gij_M3 = _match_indices(matches)
    if self.scores_GG is not None:
      _check_indices(gij_M3, None, self.scores_GG.shape[0], "ScoreMatrixJudge")
      g, i, j = gij_M3.T
      s_p, s_q = self.scores_GG[i, j], self.scores_GG[j, i]
    else:
      _check_indices(gij_M3, self.scores_BGG.shape[0], self.scores_BGG.shape[1],
                     "ScoreMatrixJudge")
      g, i, j = gij_M3.T
      s_p, s_q = self.scores_BGG[g, i, j], self.scores_BGG[g, j, i]
    results = []
    for m, sp, sq in zip(matches, s_p.tolist(), s_q.tolist()):
      if self.fail_pairs and frozenset((m.i, m.j)) in self.fail_pairs:
        results.append(MatchResult(0.0, 0.0, ok=False, error="ScoreMatrixJudge: fail_pairs",
                                   requests=2))
      else:
        results.append(MatchResult(sp, sq, requests=2))
    return results


class NoisyJudge:
  """Hidden qualities q (one [G] vector for all groups, or [B, G]) judged with noise.

  The exact score of P against Q is 20 * sigmoid((q_P - q_Q) / scale), and Q gets 20 minus it.
  ``noise``: "exact"; "gaussian" adds N(0, noise_level) to each side's score (clipped to [0, 20]);
  "bradley_terry" adds Logistic(0, noise_level) noise to the quality gap the judge perceives, so
  P(P wins) = sigmoid((q_P - q_Q) / noise_level) and the scores follow the perceived gap.
  Independently, a match is a forced (10, 10) tie with ``tie_rate`` and a
  failure (ok=False) with ``failure_rate``. ``latency_s`` is slept once per batch call. The noise
  comes from one stream seeded by ``seed``: the same calls give the same results.
  """

  def __init__(self, qualities: np.ndarray, *, noise: str = "exact", noise_level: float = 0.0,
               tie_rate: float = 0.0, failure_rate: float = 0.0, latency_s: float = 0.0,
               scale: float = 1.0, seed: int = 0):
    qualities = np.asarray(qualities, np.float64)
    if qualities.ndim not in (1, 2) or not np.all(np.isfinite(qualities)):
      raise ValueError(f"NoisyJudge: qualities must be finite [G] or [B, G], "
                       f"got shape {qualities.shape}")
    if noise not in NOISE_MODELS:
      raise ValueError(f"NoisyJudge: unknown noise {noise!r}; expected one of {NOISE_MODELS}")
    if noise != "exact" and noise_level <= 0:
      raise ValueError(f"NoisyJudge: noise={noise!r} needs noise_level > 0, got {noise_level}")
    for name, rate in (("tie_rate", tie_rate), ("failure_rate", failure_rate)):
      if not 0.0 <= rate <= 1.0:
        raise ValueError(f"NoisyJudge: {name} must be in [0, 1], got {rate}")
    if scale <= 0 or latency_s < 0:
      raise ValueError(f"NoisyJudge: need scale > 0 and latency_s >= 0, "
                       f"got scale={scale} latency_s={latency_s}")
    self.qualities = qualities
    self.noise, self.noise_level, self.scale = noise, float(noise_level), float(scale)
    self.tie_rate, self.failure_rate, self.latency_s = tie_rate, failure_rate, latency_s
    self.rng = np.random.default_rng(seed)
    self.batch_sizes: list[int] = []

  def state_dict(self) -> dict:
    """The noise generator's state, so a resumed run draws what an uninterrupted one would."""
    return {"rng": self.rng.bit_generator.state}

  def load_state_dict(self, state) -> None:
    if "rng" in state:
      self.rng.bit_generator.state = state["rng"]

  def judge(self, matches: Sequence[Match], *, offset: int = 0) -> list[MatchResult]:
    """Scores a batch; sleeps ``latency_s`` once for the whole batch."""
    self.batch_sizes.append(len(matches))
    if self.latency_s:
      time.sleep(self.latency_s)
    gij_M3 = _match_indices(matches)
    g, i, j = gij_M3.T
    if self.qualities.ndim == 1:
      _check_indices(gij_M3, None, self.qualities.shape[0], "NoisyJudge")
      diff_M = self.qualities[i] - self.qualities[j]
    else:
      _check_indices(gij_M3, *self.qualities.shape, "NoisyJudge")
      diff_M = self.qualities[g, i] - self.qualities[g, j]
    m = len(matches)
    if self.noise == "bradley_terry":
      diff_M = diff_M + self.rng.logistic(0.0, self.noise_level, m)
    s_p = MAX_SCORE / (1.0 + np.exp(-diff_M / self.scale))
    s_q = MAX_SCORE - s_p
    if self.noise == "gaussian":
      s_p = np.clip(s_p + self.rng.normal(0.0, self.noise_level, m), 0.0, MAX_SCORE)
      s_q = np.clip(s_q + self.rng.normal(0.0, self.noise_level, m), 0.0, MAX_SCORE)
    if self.tie_rate:
      tie = self.rng.random(m) < self.tie_rate
      s_p, s_q = np.where(tie, 10.0, s_p), np.where(tie, 10.0, s_q)
    failed = self.rng.random(m) < self.failure_rate if self.failure_rate else np.zeros(m, bool)
    error = f"NoisyJudge: forced failure (failure_rate={self.failure_rate})"
    return [
        MatchResult(0.0, 0.0, ok=False, error=error, requests=2) if f
        else MatchResult(sp, sq, requests=2)
        for sp, sq, f in zip(s_p.tolist(), s_q.tolist(), failed.tolist())
    ]
