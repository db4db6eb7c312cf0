"""judges/verifier_judge.py: the ceiling judge scores what the strict verifier counts."""
import pytest

from arenarl_jax import config_tree, pipeline
from arenarl_jax.envs import base
from arenarl_jax.judges import rubric as rubric_lib
from arenarl_jax.judges import verifier_judge
from arenarl_jax.text import messages as messages_lib
from arenarl_jax.types import Match


def test_every_dimension_is_ten_times_the_met_fraction():
  verdicts = iter([base.Verification(3, 4, ("count",)), base.Verification(0, 17, ("finished",))])
  checker = verifier_judge.verifier_checker(lambda traj: next(verdicts), "travel")
  rub = rubric_lib.load_rubric("travel")
  assert checker(None) == {s: {d.name: 7.5 for d in rub.dimensions(s)}
                           for s in rubric_lib.SECTIONS}
  assert set(checker(None)["path"].values()) == {0.0}  # an unfinished trajectory meets nothing


def test_the_training_judge_prefers_the_trajectory_meeting_more_requirements():
  config = config_tree.make_base_config()
  config.env.name = "travel"
  config.judge.backend = "verifier"
  env = base.make_environment_from_config(config.env)
  judge = pipeline.make_training_judge(config, env)  # judge.noise is off in the base config
  matches, gaps = [], []
  for k, task in enumerate(env.tasks("test_one_day")[:3]):
    faulty, faultless = (messages_lib.trajectory_from_messages(
        env.expert(task, rate, 1), metadata={"task_id": task.id}) for rate in (0.9, 0.0))
    v_bad, v_good = env.verify(faulty), env.verify(faultless)
    # Each request rounds every dimension (judge.noise.integer_scores); a match adds its two
    # requests' combined scores, and every dimension of a side has the same value.
    gaps.append(2 * (rubric_lib.round_half_up(10 * v_good.met / v_good.total)
                     - rubric_lib.round_half_up(10 * v_bad.met / v_bad.total)))
    matches += [Match(k, 0, 1, task.query, faultless, faulty),
                Match(k, 1, 0, task.query, faulty, faultless)]
  results = judge.judge(matches)
  assert all(g > 0 for g in gaps)
  for k, gap in enumerate(gaps):  # both orders, the same margin: no position bias, no noise
    first, second = results[2 * k], results[2 * k + 1]
    assert first.ok and second.ok
    assert first.score_p - first.score_q == pytest.approx(gap)
    assert second.score_q - second.score_p == pytest.approx(gap)


def test_a_verifier_judge_without_the_environment_is_a_clear_error():
  from arenarl_jax import judges
  with pytest.raises(ValueError, match="verify=env.verify"):
    judges.make_judge({"backend": "verifier", "rubric": "travel"})
