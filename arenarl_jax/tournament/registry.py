"""The five topologies by their config names (``tournament.topology``)."""
from __future__ import annotations

from arenarl_jax.tournament import anchor
from arenarl_jax.tournament import double_elimination
from arenarl_jax.tournament import round_robin
from arenarl_jax.tournament import single_elimination
from arenarl_jax.tournament import swiss
from arenarl_jax.tournament import topology

TOPOLOGIES: dict[str, topology.Topology] = {
    t.name: t
    for t in (anchor.ANCHOR, round_robin.ROUND_ROBIN, swiss.SWISS,
              double_elimination.DOUBLE_ELIMINATION, single_elimination.SINGLE_ELIMINATION)
}
