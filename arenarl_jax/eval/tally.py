"""Evaluation win rate from judged matches: a failed match is left out and counted, never a tie."""
from __future__ import annotations

import dataclasses
import math
from typing import Any, Sequence

from arenarl_jax.types import MatchResult

TOLERANCE = 1e-6  # the tournament's tie tolerance on bidirectional sums


@dataclasses.dataclass(frozen=True)
class WinRate:
  """``rate`` = (wins + ties / 2) / judged over the matches that did not fail (NaN if none);
  ``conservative`` counts the failed ones as losses for the policy.

  The evaluation adds the rate's 95% interval (``eval.compare``); a bare tally has none (NaN).
  """

  wins: int
  ties: int
  losses: int
  failed: int  # matches left out of the rate (ok=False)
  tasks: int = 0  # tasks with at least one match (judged or failed); 0 = not counted
  low: float = math.nan  # the 95% interval of ``rate``
  high: float = math.nan
  method: str = ""  # how the interval was drawn (eval.interval); "" = no interval

  @property
  def judged(self) -> int:
    return self.wins + self.ties + self.losses

  @property
  def rate(self) -> float:
    return (self.wins + 0.5 * self.ties) / self.judged if self.judged else float("nan")

  @property
  def conservative(self) -> float:
    """The rate with every failed match counted as a loss for the policy: (wins + ties / 2) /
    (judged + failed). A policy that breaks the judge when it would lose gains nothing here."""
    total = self.judged + self.failed
    return (self.wins + 0.5 * self.ties) / total if total else float("nan")

  @property
  def failure_rate(self) -> float:
    total = self.judged + self.failed
    return self.failed / total if total else float("nan")

  def to_dict(self) -> dict[str, Any]:
    return {**dataclasses.asdict(self), "rate": self.rate, "judged": self.judged,
            "conservative": self.conservative}


def _check_side(side: str) -> None:
  if side not in ("p", "q"):
    raise ValueError(f"win_rate: side must be 'p' or 'q', got {side!r}")


def outcome(result: MatchResult, side: str = "p") -> float | None:
  """1 (``side`` wins), 0.5 (tie), 0 (``side`` loses) or None for a failed match (left out)."""
  _check_side(side)
  if not result.ok:
    return None
  diff = result.score_p - result.score_q if side == "p" else result.score_q - result.score_p
  return 1.0 if diff > TOLERANCE else 0.0 if diff < -TOLERANCE else 0.5


def count(scores: Sequence[float | None]) -> WinRate:
  """Wins, ties, losses and failures of a sequence of ``outcome`` values."""
  return WinRate(wins=sum(s == 1.0 for s in scores), ties=sum(s == 0.5 for s in scores),
                 losses=sum(s == 0.0 for s in scores), failed=sum(s is None for s in scores))


def win_rate(results: Sequence[MatchResult], side: str = "p") -> WinRate:
  """The win rate of ``side`` ("p" or "q") over ``results`` (e.g. policy as P vs a baseline)."""
  _check_side(side)
  return count([outcome(r, side) for r in results])
