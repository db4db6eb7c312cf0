"""Tournament ranking of trajectory groups (ARENARL.md §2-§4).

``rank(groups, judge, topology, rng)`` takes ``groups[b]`` = the N >= 2 trajectories of prompt b
(index 0 = greedy anchor, all with the same ``query``) and returns one ``GroupResult`` per group:
final order, ranks, base rewards, float32 advantages, the ranked mask, the match log and
request/failure counts. A failed match is left out of the ranking evidence and unranks both of
its players on every topology (topology.py): advantage 0 and loss mask 0, so a failure teaches
nothing; the others are standardized among themselves, and a group with fewer than two ranked
players is dropped.
All groups advance round by round; each round is one batched ``judge.judge`` call.
``TOPOLOGIES`` keys equal the config values: anchor, round_robin, swiss, double_elimination,
single_elimination (seeded).
"""
from arenarl_jax.tournament.engine import DEFAULT_FAILURE_THRESHOLD
from arenarl_jax.tournament.engine import JudgeFailureError
from arenarl_jax.tournament.engine import rank
from arenarl_jax.tournament.registry import TOPOLOGIES
from arenarl_jax.tournament.topology import Standing
from arenarl_jax.tournament.topology import Topology

__all__ = ["DEFAULT_FAILURE_THRESHOLD", "JudgeFailureError", "rank", "Standing", "TOPOLOGIES",
           "Topology"]
