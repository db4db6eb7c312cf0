"""Lockstep tournament engine: all groups advance one round together, one judge call per round."""
from __future__ import annotations

import logging
from typing import Sequence

import numpy as np

from arenarl_jax.tournament import rewards as rewards_lib
from arenarl_jax.tournament import registry
from arenarl_jax.tournament import topology as topology_lib
from arenarl_jax.types import GroupResult, Judge, Match, MatchResult, Trajectory

DEFAULT_FAILURE_THRESHOLD = 0.1
_MAX_SCORE = 20.0


class JudgeFailureError(RuntimeError):
  """Too many matches of one ``rank`` call failed to be judged."""


def rank(
    groups: Sequence[Sequence[Trajectory]],
    judge: Judge,
    topology: str,
    rng: int | np.random.Generator,
    *,
    failure_threshold: float = DEFAULT_FAILURE_THRESHOLD,
) -> list[GroupResult]:
  """Ranks every group of a batch with one tournament each; returns one GroupResult per group.

  ``groups[b]`` is the list of N >= 2 trajectories of prompt b (index 0 = the greedy anchor); all
  share one ``query``, which fills ``Match.query``; ``Match.group`` is b. Sizes may differ.
  ``rng`` (a seed or a numpy Generator) is split into one stream per group, so a group's result
  depends only on its seed stream, its index and the judge. A failed match (``ok=False``; its
  scores are ignored) is left out of the ranking evidence and UNRANKS both of its players on
  every topology (topology.py): they get advantage 0 and ``GroupResult.ranked`` False (loss mask
  0: a failure teaches nothing, whichever side broke the judge). The others are standardized
  among themselves; a group with fewer than two ranked players is dropped (all advantages 0, all
  ``ranked`` False). Failures are logged and counted in ``GroupResult.failures``; when more than
  ``failure_threshold`` of all matches of this call fail, a ``JudgeFailureError`` is raised (as
  soon as that is certain).
  """
  spec = registry.TOPOLOGIES.get(topology)
  if spec is None:
    raise ValueError(f"tournament.rank: unknown topology {topology!r}; "
                     f"expected one of {sorted(registry.TOPOLOGIES)}")
  if not 0.0 <= failure_threshold <= 1.0:
    raise ValueError(f"tournament.rank: failure_threshold must be in [0, 1], "
                     f"got {failure_threshold}")
  groups = [list(g) for g in groups]
  queries = [_query_of(b, g) for b, g in enumerate(groups)]
  if not isinstance(rng, (int, np.integer, np.random.Generator)) or isinstance(rng, bool):
    raise TypeError(f"tournament.rank: rng must be an int seed or a numpy Generator, "
                    f"got {type(rng).__name__}")
  # Only topologies with random pairings pay for the per-group streams.
  streams = np.random.default_rng(rng).spawn(len(groups)) if spec.uses_rng else None
  planned = sum(spec.num_matches(len(g)) for g in groups)

  plays = [spec.play(len(g), streams[b] if streams else None) for b, g in enumerate(groups)]
  logs: list[list[tuple[Match, MatchResult]]] = [[] for _ in groups]
  rounds: list[list[int]] = [[] for _ in groups]
  requests = [0] * len(groups)
  failures = [0] * len(groups)
  standings: list[topology_lib.Standing | None] = [None] * len(groups)
  active = [(b, _advance(play, None)) for b, play in enumerate(plays)]
  failed_so_far, round_index = 0, 0
  while active:
    matches: list[Match] = []
    for b, pairs in active:
      group, query = groups[b], queries[b]
      matches.extend([Match(b, i, j, query, group[i], group[j]) for i, j in pairs])
    results = list(judge.judge(matches))
    scores, ok = _check_results(matches, results)
    num_failed = len(matches) - sum(ok)
    if num_failed:
      failed_so_far += num_failed
      first = next(r for r in results if not r.ok)
      logging.warning("tournament %s round %d: %d of %d matches failed; their players are "
                      "unranked (first error: %s)", topology, round_index, num_failed,
                      len(matches), first.error)
      # The final rate is failed / planned, so passing the threshold is already certain here.
      if failed_so_far > failure_threshold * planned:
        raise JudgeFailureError(
            f"tournament {topology}: {failed_so_far} of {planned} matches failed "
            f"({failed_so_far / planned:.1%}) > failure_threshold={failure_threshold:.1%}; "
            f"first error: {first.error}")
    next_active, start = [], 0
    for b, pairs in active:
      stop = start + len(pairs)
      logs[b].extend(zip(matches[start:stop], results[start:stop]))
      rounds[b].extend([round_index] * (stop - start))
      requests[b] += sum([r.requests for r in results[start:stop]])
      if num_failed:
        failures[b] += stop - start - sum(ok[start:stop])
      try:
        next_active.append((b, _advance(plays[b], scores[start:stop])))
      except StopIteration as done:
        standings[b] = done.value
      start = stop
    active, round_index = next_active, round_index + 1

  advantages_by_group = _standardize_all(standings)
  return [
      GroupResult(order=s.order, ranks=s.ranks, base_rewards=s.rewards, advantages=adv,
                  ranked=rewards_lib.trainable(s.ranked), matches=tuple(log), requests=req,
                  failures=fail, rounds=tuple(rnd))
      for s, adv, log, req, fail, rnd in zip(standings, advantages_by_group, logs, requests,
                                             failures, rounds)
  ]


def _standardize_all(standings: list[topology_lib.Standing]) -> list[np.ndarray]:
  """Advantages per group over its ranked players, one vectorized call per group size."""
  out: list[np.ndarray | None] = [None] * len(standings)
  by_size: dict[int, list[int]] = {}
  for b, s in enumerate(standings):
    by_size.setdefault(len(s.rewards), []).append(b)
  for members in by_size.values():
    adv_BG = rewards_lib.standardize_ranked(np.stack([standings[b].rewards for b in members]),
                                            np.stack([standings[b].ranked for b in members]))
    for row, b in enumerate(members):
      out[b] = adv_BG[row]
  return out


def _advance(play: topology_lib.Play, scores: topology_lib.Scores | None) -> topology_lib.Pairs:
  """The group's next non-empty round (StopIteration carries its Standing when it is done)."""
  pairs = next(play) if scores is None else play.send(scores)
  while not pairs:
    pairs = play.send([])
  return pairs


def _query_of(b: int, group: list[Trajectory]) -> str:
  if len(group) < 2:
    raise ValueError(f"tournament.rank: group {b} has {len(group)} trajectories; "
                     f"a tournament needs N >= 2")
  query = group[0].query
  for i, t in enumerate(group):
    if t.query != query:
      raise ValueError(f"tournament.rank: group {b} mixes queries: trajectory 0 has "
                       f"{query!r}, trajectory {i} has {t.query!r}")
  return query


def _check_results(matches: list[Match], results: list[MatchResult]):
  """(score_p, score_q) per match, None for a failed one, and ok flags; bad scores raise."""
  if len(results) != len(matches):
    raise ValueError(f"judge returned {len(results)} results for {len(matches)} matches")
  ok = [bool(r.ok) for r in results]
  scores = [(r.score_p, r.score_q) if good else None for r, good in zip(results, ok)]
  scores_M2 = np.array([s if s is not None else (0.0, 0.0) for s in scores],
                       np.float64).reshape(-1, 2)
  bad_M = ~np.all((scores_M2 >= 0) & (scores_M2 <= _MAX_SCORE), axis=1)  # NaN fails too
  if bad_M.any():
    k = int(np.argmax(bad_M))
    m = matches[k]
    raise ValueError(f"judge returned scores {scores[k]} outside [0, 20] for match "
                     f"group={m.group} i={m.i} j={m.j}")
  return scores, ok
