"""Offline deep-research world: importing this package registers ``env.name=research``."""
from arenarl_jax.envs.research.environment import ResearchEnvironment

__all__ = ["ResearchEnvironment"]
