"""One RL step's statistics: the judge's work and the rewards and advantages it produced.

The rollouts' own statistics (lengths, turns, tool calls, finish reasons) are
``rollout/stats.py``'s, shared with the evaluation.
"""
from __future__ import annotations

import time
from typing import Any, Mapping, Sequence

import numpy as np
from scipy import stats as scipy_stats

# Judge counters whose per-step change is reported (judges/stats.py COUNTERS).
JUDGE_DELTAS = ("cache_hits", "retries", "parse_failures", "both_orders", "order_flips")


class TimedJudge:
  """Passes ``judge`` / ``score`` calls through to a judge and adds up the seconds spent in them."""

  def __init__(self, judge: Any):
    self.inner, self.seconds, self.calls = judge, 0.0, 0

  def judge(self, matches):
    t0 = time.perf_counter()
    try:
      return self.inner.judge(matches)
    finally:
      self.seconds += time.perf_counter() - t0
      self.calls += 1

  def score(self, trajectories):
    t0 = time.perf_counter()
    try:
      return self.inner.score(trajectories)
    finally:
      self.seconds += time.perf_counter() - t0
      self.calls += 1


def judge_counters(judge: Any) -> dict[str, float]:
  """The judge's running counters (``judge.metrics.snapshot()``; {} for a judge without them)."""
  metrics = getattr(judge, "metrics", None)
  return dict(metrics.snapshot()) if metrics is not None else {}


def judge_stats(before: Mapping[str, float], after: Mapping[str, float], timed: TimedJudge
                ) -> dict[str, float]:
  """This step's judge metrics: counter changes, the order-flip rate among this step's matches
  judged in both orders (left out when there were none), batched calls and the seconds spent
  inside them (``time/judge_calls_s``: a timing, so under ``time/``)."""
  out = {"time/judge_calls_s": timed.seconds, "judge/calls": float(timed.calls)}
  delta = {k: float(after[k] - before.get(k, 0)) for k in JUDGE_DELTAS if k in after}
  out.update({f"judge/{k}": v for k, v in delta.items()})
  if delta.get("both_orders", 0) > 0:
    out["judge/order_flip_rate"] = delta["order_flips"] / delta["both_orders"]
  return out


def step_stats(groups: Sequence[Sequence[Any]], adv_BG: np.ndarray, reward_BG: np.ndarray,
               mask_BG: np.ndarray | None = None) -> dict[str, float]:
  """Reward and advantage statistics of one step, the share of groups whose advantages are all
  zero (dropped groups included), and the (pooled Pearson) correlation of the advantage with the
  sampled tokens and with the final answer's characters (0 when either side is constant).

  With ``mask_BG`` (the advantage source's, 0 = unranked) the rewards, advantages and
  correlations count the ranked trajectories only: an unranked one's reward is a placeholder
  (NaN for a failed pointwise score) and its advantage 0 says nothing. No ranked one: all 0.
  """
  flat = [t for g in groups for t in g]
  adv_BG = np.asarray(adv_BG, np.float64)
  keep_N = (np.ones(adv_BG.shape, bool) if mask_BG is None
            else np.asarray(mask_BG) > 0).reshape(-1)
  adv_N = adv_BG.reshape(-1)[keep_N]
  reward_N = np.asarray(reward_BG, np.float64).reshape(-1)[keep_N]
  sampled = np.asarray([np.sum(t.loss_mask) for t in flat], np.float64)[keep_N]
  answer = np.asarray([len(t.final_answer) for t in flat], np.float64)[keep_N]
  if not keep_N.any():
    adv_N = reward_N = np.zeros(1)
  masked_BG = np.where(np.ones(adv_BG.shape, bool) if mask_BG is None else
                       np.asarray(mask_BG) > 0, np.asarray(reward_BG, np.float64), np.nan)
  all_tied, any_tied = tie_shares(masked_BG)
  return {
      "reward/all_tied_groups": all_tied, "reward/any_tied_groups": any_tied,
      "reward/mean": float(reward_N.mean()), "reward/std": float(reward_N.std()),
      "advantage/mean": float(adv_N.mean()), "advantage/std": float(adv_N.std()),
      "advantage/abs_max": float(np.abs(adv_N).max()),
      "advantage/zero_groups": float(np.mean(np.all(np.abs(adv_BG) < 1e-6, axis=1))),
      "length_win_corr": _corr(sampled, adv_N),
      "answer_chars_win_corr": _corr(answer, adv_N),
  }


def tie_shares(values_BG: np.ndarray) -> tuple[float, float]:
  """(share of groups whose finite values are all equal, share with at least one tie) over the
  groups of ``values_BG`` [B, G] (NaN = no value). All tied: the group gives no trajectory an
  advantage over another (one with fewer than two values counts too); any tie: some pair of its
  trajectories is left unordered (a tournament's shared rank, a pointwise score given twice)."""
  all_tied, any_tied = [], []
  for row in np.asarray(values_BG, np.float64):
    row = row[np.isfinite(row)]
    all_tied.append(len(row) < 2 or bool(np.ptp(row) == 0))
    any_tied.append(len(np.unique(row)) < len(row))
  if not all_tied:
    return 0.0, 0.0
  return float(np.mean(all_tied)), float(np.mean(any_tied))


def _corr(x: np.ndarray, y: np.ndarray) -> float:
  """Pearson correlation (0 when either side is constant)."""
  if len(x) < 2 or np.std(x) == 0 or np.std(y) == 0:
    return 0.0
  return float(np.corrcoef(x, y)[0, 1])


def checker_agreement(reward_BG: np.ndarray, checker_BG: np.ndarray,
                      mask_BG: np.ndarray | None = None) -> dict[str, float]:
  """How well one step's training rewards recover the noise-free checker's order in each group.

  Per group, Kendall's tau-b between the rewards and the checker's scores of its ranked
  trajectories (``mask_BG`` > 0); a group where either side is constant has no tau.
  ``reward/checker_tau`` is the mean over the groups that have one (left out when none does),
  ``reward/checker_tau_groups`` the share of groups that have one. A monitor only: the checker
  never reaches the advantages.
  """
  reward_BG = np.asarray(reward_BG, np.float64)
  checker_BG = np.asarray(checker_BG, np.float64)
  keep_BG = (np.ones(reward_BG.shape, bool) if mask_BG is None
             else np.asarray(mask_BG) > 0) & np.isfinite(reward_BG)
  taus = []
  for reward, checker, keep in zip(reward_BG, checker_BG, keep_BG):
    x, y = reward[keep], checker[keep]
    if len(x) < 2 or np.ptp(x) == 0 or np.ptp(y) == 0:
      continue
    tau = scipy_stats.kendalltau(x, y).statistic
    if np.isfinite(tau):
      taus.append(float(tau))
  out = {"reward/checker_tau_groups": len(taus) / max(len(reward_BG), 1)}
  if taus:
    out["reward/checker_tau"] = float(np.mean(taus))
  return out
