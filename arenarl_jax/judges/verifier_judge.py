"""A ceiling diagnostic, never a method: the rubric judge reading the strict verifier.

``judge.backend=verifier`` scores every rubric dimension of a trajectory as
``10 x met / total``, the share of its task's requirements that the environment's strict verifier
(``env.verify``) finds met, and then applies ``judge.noise`` exactly as the ``rubric`` backend
does. The tournament, the advantages and the objective are unchanged.

It trains on the evaluation's own metric, so a run with it is no evidence of learning (the
pipeline says so above its RESULT line). What it measures is the ceiling of the judge: with every
other setting fixed, no judge can tell the training what the verifier counts better than this
one. When a run with it does not raise the verifier's met rate on validation tasks, a better
judge will not either; the limit is the optimisation (steps, batch, learning rate) or the policy.
"""
from __future__ import annotations

from typing import Any, Callable, Mapping

from arenarl_jax import types
from arenarl_jax.envs import base
from arenarl_jax.judges import registry, rubric_judge
from arenarl_jax.judges import rubric as rubric_lib


def verifier_checker(verify: Callable[[types.Trajectory], base.Verification],
                     rubric: rubric_lib.Rubric | str) -> Callable[[types.Trajectory], dict]:
  """A ``Checker`` (trajectory -> {section: {dimension: 0-10}}) giving every dimension of
  ``rubric`` 10 x the verifier's met fraction."""
  rub = rubric_lib.load_rubric(rubric)
  sections = {s: tuple(d.name for d in rub.dimensions(s)) for s in rubric_lib.SECTIONS}

  def checker(trajectory: types.Trajectory) -> dict[str, dict[str, float]]:
    v = verify(trajectory)
    x = 10.0 * v.met / v.total  # a Verification has total >= 1
    return {s: {name: x for name in names} for s, names in sections.items()}

  return checker


def make_verifier_judge(cfg: Mapping[str, Any],
                        verify: Callable[[types.Trajectory], base.Verification] | None = None
                        ) -> types.Judge:
  """``backend="verifier"``: the rubric backend on :func:`verifier_checker` (``verify`` is the
  environment's ``verify``)."""
  if verify is None:
    raise ValueError("judge.backend='verifier' needs make_judge(config, verify=env.verify): the "
                     "environment's strict verifier")
  return rubric_judge.make_rubric_judge(
      cfg, checker=verifier_checker(verify, registry.rubric_name(cfg)))
