"""The verdict rule: does our gap reproduce the direction the paper reports?

A claim names the direction the paper reports (``direction=+1``: ``arm`` above ``versus``; -1:
below) for one outcome. Our gap is the paired difference of ``arm`` and ``versus`` (another arm,
or ``"start"``: the run's own starting policy), with its 95% hierarchical bootstrap interval over
seeds and tasks (``hierarchical.py``). The claim is **reproduced** when that interval excludes 0
on the paper's side, **contradicted** when it excludes 0 on the other side, and otherwise we
**cannot tell** (the interval holds 0, or there were too few tasks for one).
"""
from __future__ import annotations

import dataclasses
from typing import Sequence

from arenarl_jax.experiments import hierarchical, pooling

REPRODUCED, CONTRADICTED, CANNOT_TELL = "reproduced", "contradicted", "cannot tell"


@dataclasses.dataclass(frozen=True)
class Claim:
  """A direction the paper reports: ``arm`` minus ``versus`` has the sign of ``direction``."""

  text: str  # the statement, as a reader would say it
  metric: str  # an outcome of record.OUTCOMES: solved | met | win_vs_reference
  arm: str
  versus: str  # another arm, or "start" (the run's own starting policy)
  direction: int = 1
  source: str = ""  # where the paper reports it (e.g. "arXiv 2601.06487, main results")

  def __post_init__(self):
    if self.direction not in (1, -1):
      raise ValueError(f"claim {self.text!r}: direction must be +1 or -1")


def verdict(gap: hierarchical.Interval, direction: int) -> str:
  """The rule above, for a gap's interval and the paper's direction (+1 or -1)."""
  side = gap.excludes_zero()
  if side == 0:
    return CANNOT_TELL
  return REPRODUCED if side == direction else CONTRADICTED


def check(claim: Claim, results: Sequence[dict], samples: int = 2000,
          seed: int = 0) -> tuple[hierarchical.Interval, str]:
  """Our gap for ``claim`` from the result files, and its verdict."""
  gap = pooling.gap_interval(results, claim.arm, claim.versus, claim.metric, samples, seed)
  return gap, verdict(gap, claim.direction)
