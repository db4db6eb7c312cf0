"""Tournament ranking of trajectory groups: ``rank(groups, judge, topology, rng)``.

Topologies (``TOPOLOGIES`` keys = config values): anchor, round_robin, swiss, double_elimination,
single_elimination (seeded). See engine.rank for the contract.
"""
from arenarl_jax.tournament.engine import DEFAULT_FAILURE_THRESHOLD
from arenarl_jax.tournament.engine import JudgeFailureError
from arenarl_jax.tournament.engine import rank
from arenarl_jax.tournament.registry import TOPOLOGIES
from arenarl_jax.tournament.topology import Standing
from arenarl_jax.tournament.topology import Topology

__all__ = ["DEFAULT_FAILURE_THRESHOLD", "JudgeFailureError", "rank", "Standing", "TOPOLOGIES",
           "Topology"]
