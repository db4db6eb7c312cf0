"""Evaluation win rate from judged matches: a failed match is left out and counted, never a tie."""
from __future__ import annotations

import dataclasses
from typing import Sequence

from arenarl_jax.types import MatchResult

TOLERANCE = 1e-6  # the tournament's tie tolerance on bidirectional sums


@dataclasses.dataclass(frozen=True)
class WinRate:
  """``rate`` = (wins + ties / 2) / judged over the matches that did not fail (NaN if none)."""

  wins: int
  ties: int
  losses: int
  failed: int  # matches left out of the rate (ok=False)

  @property
  def judged(self) -> int:
    return self.wins + self.ties + self.losses

  @property
  def rate(self) -> float:
    return (self.wins + 0.5 * self.ties) / self.judged if self.judged else float("nan")

  @property
  def failure_rate(self) -> float:
    total = self.judged + self.failed
    return self.failed / total if total else float("nan")


def win_rate(results: Sequence[MatchResult], side: str = "p") -> WinRate:
  """The win rate of ``side`` ("p" or "q") over ``results`` (e.g. policy as P vs a baseline)."""
  if side not in ("p", "q"):
    raise ValueError(f"win_rate: side must be 'p' or 'q', got {side!r}")
  wins = ties = losses = failed = 0
  for r in results:
    if not r.ok:
      failed += 1
      continue
    diff = r.score_p - r.score_q if side == "p" else r.score_q - r.score_p
    if diff > TOLERANCE:
      wins += 1
    elif diff < -TOLERANCE:
      losses += 1
    else:
      ties += 1
  return WinRate(wins, ties, losses, failed)
