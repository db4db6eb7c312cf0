"""The advantage sources ``advantage.source`` names (``SOURCES``), and GRPO's pointwise advantages.

The tournament's standing -> base rewards -> normalized advantages math is
``tournament/rewards.py``'s (the tournament returns advantages). All functions are host-side
numpy; rewards and advantages are float32, the math runs in float64. A source turns one step's
groups into advantages with the judge: ``arena`` ranks each group by a tournament
(``tournament.topology``), ``pointwise`` scores each trajectory alone (GRPO/GSPO).
``register_source`` adds another; its key is the config value.

A failure teaches nothing (both sources): a trajectory in a failed match, or with a failed
pointwise score, is unranked: advantage 0 and mask 0 (no gradient, not even the KL term's, and
not counted by the loss normalisers). The others are standardized among themselves; a group
with fewer than two of them is dropped (all 0). The stats count both per step:
``judge/unranked_trajectories`` (every trajectory with mask 0, dropped groups' included) and
``judge/dropped_groups``.

``rl.advantage_control`` (``control_advantages``) is an experiment's control, applied after the
source: ``permute`` shuffles each group's advantages among its trainable members (the same
magnitudes, no information about which trajectory earned them), ``flip`` negates them. A loop
that still learns under ``permute`` learns from something other than the judge.
"""
from __future__ import annotations

import dataclasses
from typing import Any, Callable, Sequence

import numpy as np

from arenarl_jax import tournament
from arenarl_jax.rl.settings import AdvantageSettings
from arenarl_jax.rl import stats as rl_stats
from arenarl_jax.tournament import diagnostics
from arenarl_jax.tournament.rewards import standardize, standardize_ranked, trainable


def pointwise_advantages(scores_BG: np.ndarray, ok_BG: np.ndarray | None = None) -> np.ndarray:
  """GRPO baseline: per-group (r - mean) / (std + 1e-6) of pointwise judge scores [B, G].

  A failed score (``ok_BG`` False; its value, often NaN, is ignored) is no evidence: it gets
  advantage 0 and the group is standardized over its judged scores only; a group with fewer
  than two judged scores gets 0 everywhere (``pointwise_mask`` is the loss mask that goes with
  it). A score never stands in for a failure: any stand-in would reward or punish a trajectory
  for what the judge could not say. Count failures where the scores come from
  (``PointwiseScores.ok``).
  """
  scores_BG = np.asarray(scores_BG, np.float64)
  if scores_BG.ndim != 2:
    raise ValueError(f"pointwise_advantages: expected scores [B, G], got shape {scores_BG.shape}")
  if ok_BG is None:
    return standardize(scores_BG)  # a NaN without an ok flag is a bug: standardize raises
  ok_BG = np.asarray(ok_BG, bool)
  if ok_BG.shape != scores_BG.shape:
    raise ValueError(f"pointwise_advantages: ok {ok_BG.shape} does not match scores "
                     f"{scores_BG.shape}")
  return standardize_ranked(scores_BG, ok_BG)


def pointwise_mask(ok_BG: np.ndarray) -> np.ndarray:
  """float32 [B, G]: 1 where the score was judged and its group has at least two judged."""
  return trainable(ok_BG).astype(np.float32)


def mask_stats(mask_BG: np.ndarray) -> dict[str, float]:
  """This step's unranked trajectories (mask 0) and dropped groups (mask 0 everywhere)."""
  mask_BG = np.asarray(mask_BG) > 0
  return {"judge/unranked_trajectories": float(np.sum(~mask_BG)),
          "judge/dropped_groups": float(np.sum(~mask_BG.any(axis=1)))}


# ---------------------------------------------------------------------------- advantage sources
@dataclasses.dataclass(frozen=True)
class Judged:
  """One step's groups after the judge: advantages and base rewards [B, G], the tournament
  results (None for pointwise scores), the source's own stats and the loss mask [B, G] float32
  (1 = ranked, trains; 0 = no rank evidence: its row trains nothing). A source without
  failures may leave the mask None: every trajectory trains."""

  advantages_BG: np.ndarray
  rewards_BG: np.ndarray
  results: list[Any] | None
  stats: dict[str, float]
  mask_BG: np.ndarray | None = None


# source(groups, judge, settings: AdvantageSettings, *, step, first_group) -> Judged
AdvantageSource = Callable[..., Judged]


def tournament_rng(seed: int, step: int, first_group: int = 0) -> np.random.Generator:
  """The step's tournament generator, seeded by (seed, step). ``tournament.rank`` spawns one
  stream per group from it; a host whose groups start at ``first_group`` skips the streams of
  the groups before its own, so each group gets the stream it gets in one process."""
  rng = np.random.default_rng([int(seed), int(step)])
  rng.bit_generator.seed_seq.spawn(int(first_group))
  return rng


def arena(groups: Sequence[Sequence[Any]], judge: Any, settings: AdvantageSettings, *,
          step: int, first_group: int = 0) -> Judged:
  """ArenaRL: each group ranked by a tournament (``settings.tournament``) of bidirectional
  pairwise matches, its pairings drawn from the step's stream of ``settings.seed``."""
  topology = settings.tournament.topology
  results = tournament.rank(groups, judge, topology,
                            tournament_rng(settings.seed, step, first_group),
                            failure_threshold=settings.tournament.failure_threshold)
  stats = {"judge/requests": float(sum(r.requests for r in results)),
           "judge/failures": float(sum(r.failures for r in results)),
           "judge/matches": float(sum(len(r.matches) for r in results))}
  mask_BG = np.stack([r.ranked for r in results]).astype(np.float32)
  stats.update(mask_stats(mask_BG))
  # Does the greedy anchor's seeding agree with the final order? (the anchor's final rank where
  # it is ranked, and Kendall's tau between the anchor-pass scores and the final ranks)
  anchor_ranks = [r.ranks[0] for r in results if r.ranked[0]]
  if anchor_ranks:
    stats["tournament/anchor_rank_mean"] = float(np.mean(anchor_ranks))
  tau = diagnostics.mean_seeding_tau(results, topology)
  if tau is not None:
    stats["tournament/seeding_tau"] = tau
  return Judged(np.stack([r.advantages for r in results]),
                np.stack([r.base_rewards for r in results]), results, stats, mask_BG)


def pointwise_repeats(settings: AdvantageSettings) -> int:
  """``advantage.pointwise_repeats``: how many times each trajectory is scored (averaged)."""
  repeats = settings.pointwise_repeats
  if not isinstance(repeats, int) or isinstance(repeats, bool) or repeats < 1:
    raise ValueError(f"advantage.pointwise_repeats must be an int >= 1, got {repeats!r}")
  return repeats


def pointwise(groups: Sequence[Sequence[Any]], judge: Any, settings: AdvantageSettings, *,
              step: int, first_group: int = 0) -> Judged:
  """GRPO/GSPO: each trajectory scored alone, standardised within its group.

  With ``advantage.pointwise_repeats`` = K each trajectory is scored K times (K requests, each
  with the judge's own noise) and its reward is the mean of its successful scores: at K = 4(N-1)/N
  a group costs the judge as many requests as seeded single elimination's, the equal budget a
  comparison of the two needs. ``judge/pointwise_tied_groups`` is the share of groups whose first
  request scored every judged trajectory the same: the discriminative collapse one pointwise
  request shows before any averaging.
  """
  del step, first_group  # the judge's offset places the share (experience.ShareJudge)
  flat = [t for g in groups for t in g]
  sums_N = np.zeros(len(flat), np.float64)
  counts_N = np.zeros(len(flat), np.int64)
  tied = None
  repeats = pointwise_repeats(settings)
  for _ in range(repeats):
    scored = judge.score(flat)
    ok_N = np.asarray(scored.ok, bool)
    scores_N = np.where(ok_N, np.asarray(scored.scores, np.float64), 0.0)
    sums_N += scores_N
    counts_N += ok_N
    if tied is None:
      tied = rl_stats.tie_shares(np.where(ok_N, scores_N, np.nan).reshape(len(groups), -1))[0]
  ok_BG = (counts_N > 0).reshape(len(groups), -1)
  # A failed score is no score: NaN in the rewards (null in the rollout log), never a number.
  rewards_BG = np.where(ok_BG, (sums_N / np.maximum(counts_N, 1)).reshape(ok_BG.shape), np.nan)
  mask_BG = pointwise_mask(ok_BG)
  requests = repeats * len(flat)
  stats = {"judge/requests": float(requests), "judge/failures": float(requests - counts_N.sum()),
           "judge/pointwise_tied_groups": tied}
  stats.update(mask_stats(mask_BG))
  return Judged(pointwise_advantages(rewards_BG, ok_BG), rewards_BG, None, stats, mask_BG)


SOURCES: dict[str, AdvantageSource] = {"arena": arena, "pointwise": pointwise}


def register_source(name: str, source: AdvantageSource) -> None:
  """Adds an advantage source under the config value ``name``."""
  if name in SOURCES:
    raise ValueError(f"advantage source {name!r} is already registered")
  SOURCES[name] = source


def get_source(name: str) -> AdvantageSource:
  """The source ``advantage.source`` names (an error lists the known ones)."""
  if name not in SOURCES:
    raise ValueError(f"advantage.source: unknown value {name!r}; known: {sorted(SOURCES)}")
  return SOURCES[name]


# ------------------------------------------------------------------------- advantage controls
CONTROLS = ("none", "permute", "flip")  # the values of rl.advantage_control
_CONTROL_STREAM = 1  # set apart from the tournament's (seed, step) streams


def check_control(kind: str) -> str:
  """``kind`` if it is an ``rl.advantage_control`` value, else a ValueError naming the key."""
  if kind not in CONTROLS:
    raise ValueError(f"rl.advantage_control: unknown value {kind!r}; known: {list(CONTROLS)}")
  return kind


def control_rng(seed: int, step: int, first_group: int = 0) -> np.random.Generator:
  """The step's control generator, seeded by (seed, step); like ``tournament_rng``, a host whose
  groups start at ``first_group`` skips the streams of the groups before its own, so
  ``control_advantages`` permutes each group as one process would."""
  rng = np.random.default_rng([int(seed), int(step), _CONTROL_STREAM])
  rng.bit_generator.seed_seq.spawn(int(first_group))
  return rng


def control_advantages(adv_BG: np.ndarray, mask_BG: np.ndarray | None, kind: str,
                       rng: np.random.Generator) -> np.ndarray:
  """The advantages [B, G] under control ``kind`` (float32; the input is not changed).

  Only the trainable members (``mask_BG > 0``; every member when the mask is None) change;
  members with mask 0 keep their value. ``none``: as given. ``flip``: negated. ``permute``: in
  each group b, the trainable members' values are shuffled among them by stream b of
  ``rng.spawn(B)`` (``rng`` is not used otherwise).
  """
  check_control(kind)
  adv_BG = np.array(adv_BG, np.float32)
  if adv_BG.ndim != 2:
    raise ValueError(f"control_advantages: expected advantages [B, G], got shape {adv_BG.shape}")
  keep_BG = (np.ones(adv_BG.shape, bool) if mask_BG is None else np.asarray(mask_BG) > 0)
  if keep_BG.shape != adv_BG.shape:
    raise ValueError(f"control_advantages: mask {keep_BG.shape} does not match advantages "
                     f"{adv_BG.shape}")
  if kind == "none":
    return adv_BG
  if kind == "flip":
    return np.where(keep_BG, -adv_BG, adv_BG)
  for b, stream in enumerate(rng.spawn(adv_BG.shape[0])):
    members = np.flatnonzero(keep_BG[b])
    adv_BG[b, members] = adv_BG[b, stream.permutation(members)]
  return adv_BG
