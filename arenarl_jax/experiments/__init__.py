"""Experiment harness: a study is a list of pipeline runs; one command runs what is missing or
stale and rebuilds the study's tables, figures and README block from the committed result files.

  python -m arenarl_jax.experiments.run experiments/<study> [--preset=smoke] [--check]

``Run`` and ``Claim`` are what a study's ``study.py`` builds; ``verdict`` is the rule that says
whether a claim is reproduced.
"""
from arenarl_jax.experiments.study import Run
from arenarl_jax.experiments.claims import Claim, verdict

__all__ = ["Run", "Claim", "verdict"]
