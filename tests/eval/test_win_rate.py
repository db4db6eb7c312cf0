"""Evaluation win rate: failed matches are left out and counted, never ties."""
import math

import pytest

from arenarl_jax.types import MatchResult
from arenarl_jax.eval.tally import win_rate


def test_failed_matches_are_left_out_and_counted():
  results = [MatchResult(14, 6, requests=2), MatchResult(10, 10, requests=2),
             MatchResult(3, 17, requests=2), MatchResult(0, 0, ok=False, error="x", requests=2),
             MatchResult(12, 8, requests=2)]
  w = win_rate(results)
  assert (w.wins, w.ties, w.losses, w.failed, w.judged) == (2, 1, 1, 1, 4)
  assert w.rate == pytest.approx(2.5 / 4)  # a tie would have made it 3 / 5
  assert w.failure_rate == pytest.approx(0.2)
  q = win_rate(results, side="q")
  assert (q.wins, q.losses, q.failed) == (1, 2, 1) and q.rate == pytest.approx(1.5 / 4)


def test_breaking_the_judge_when_losing_lifts_the_plain_rate_but_not_the_conservative_one():
  honest = win_rate([MatchResult(12, 8, requests=2), MatchResult(5, 15, requests=2)])
  broken = win_rate([MatchResult(12, 8, requests=2),
                     MatchResult(0, 0, ok=False, error="unparseable", requests=2)])
  # The plain rate leaves the failure out, so breaking the judge instead of losing lifts it from
  # 0.5 to 1.0; the failure is counted, and the conservative rate (failed = lost) stays at 0.5.
  assert honest.rate == 0.5 and broken.rate == 1.0 and broken.failed == 1
  assert broken.conservative == honest.conservative == honest.rate == 0.5
  tie_and_fail = win_rate([MatchResult(10, 10), MatchResult(0, 0, ok=False)])
  assert tie_and_fail.rate == 0.5 and tie_and_fail.conservative == 0.25
  # Left out, a failure neither scores as a tie nor hides: the count goes in the report.
  assert math.isnan(win_rate([MatchResult(0, 0, ok=False)]).rate)
  with pytest.raises(ValueError, match="side"):
    win_rate([], side="a")
