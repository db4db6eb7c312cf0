"""Open-Travel offline: a deterministic world with the paper's six tools (see environment.py).

Importing this package registers the ``travel`` environment (``env.name=travel``).
"""
from arenarl_jax.envs.travel.environment import TravelEnvironment  # noqa: F401  (registers)
