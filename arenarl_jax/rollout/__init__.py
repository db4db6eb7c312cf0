"""Rollouts: the multi-turn agent loop and what a set of its trajectories looks like.

  agent_loop.py  tasks x G -> one masked ``Trajectory`` per row (``Rollout``)
  stats.py       lengths, turns, tool calls and finish reasons: shared by RL and evaluation

Modules are imported by name (``from arenarl_jax.rollout import agent_loop``).
"""
