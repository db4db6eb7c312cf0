"""Judges: rubric prompts, strict verdict parsing and backends behind one ``make_judge(config)``.

  judge = make_judge(config.judge, env_rubric=env.rubric, checker=env.checker)
  results = judge.judge(matches)          # list[MatchResult], aligned with matches

``registry.py`` names the backends (``register_backend`` adds one) and documents the ``judge``
section; the backends are ``http.py``, ``rubric_judge.py``, ``flax/`` and ``verifier_judge.py``
(a ceiling diagnostic), their settings the dataclasses of ``settings.py``. Importing this
package loads no HTTP, array or model code: ``make_judge`` imports the backend it builds.
"""
from arenarl_jax.judges.registry import make_judge, register_backend
from arenarl_jax.judges.rubric import Rubric, load_rubric
from arenarl_jax.judges.settings import (FlaxJudgeSettings, HttpJudgeSettings, NoiseModel,
                                         RenderLimits)

__all__ = ["make_judge", "register_backend", "Rubric", "load_rubric", "FlaxJudgeSettings",
           "HttpJudgeSettings", "NoiseModel", "RenderLimits"]
