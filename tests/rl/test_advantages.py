"""Rank/order -> reward -> advantage math against hand-computed values (ARENARL.md §2, §4)."""
import numpy as np
import pytest

from arenarl_jax.rl import advantages
from arenarl_jax.rl.settings import AdvantageSettings
from arenarl_jax.tournament import rewards


def test_n2_advantages_are_plus_minus_0_7071():
  adv = rewards.standardize(rewards.rewards_from_order([1, 0]))
  # x = [0, 1]: mean 0.5, unbiased std sqrt(0.5), adv = +-0.5 / sqrt(0.5) (eps is negligible).
  np.testing.assert_allclose(adv, [-0.70710, 0.70710], atol=1e-5)
  assert adv.dtype == np.float32


def test_n8_distinct_positions():
  order = [3, 0, 7, 1, 6, 2, 5, 4]
  adv = rewards.standardize(rewards.rewards_from_order(order))
  by_position = adv[np.array(order)]
  expected = [1.4289, 1.0206, 0.6124, 0.2041, -0.2041, -0.6124, -1.0206, -1.4289]
  np.testing.assert_allclose(by_position, expected, atol=1e-4)


def test_anchor_hand_vector_from_scores():
  ranks = rewards.min_ranks(np.array([10.0, 10.0, 12.0, 8.0]))
  np.testing.assert_array_equal(ranks, [2, 2, 1, 4])
  x = rewards.rewards_from_ranks(ranks)
  np.testing.assert_allclose(x, [2 / 3, 2 / 3, 1.0, 0.0], atol=1e-7)
  np.testing.assert_allclose(rewards.standardize(x), [0.19868, 0.19868, 0.99340, -1.39076],
                             atol=1e-5)


def test_min_ranks_ties_share_the_smallest_rank():
  np.testing.assert_array_equal(rewards.min_ranks([3.0, 3.0, 1.0, 1.0]), [1, 1, 3, 3])
  np.testing.assert_array_equal(rewards.rewards_from_ranks([1, 1, 3, 3]), [1, 1, 0, 0])
  np.testing.assert_array_equal(rewards.min_ranks([0.5, 2.0, 2.0, 1.0, 2.0]), [5, 1, 1, 4, 1])


def test_all_tied_gives_zero_rewards_and_advantages():
  x = rewards.rewards_from_ranks(rewards.min_ranks(np.full(5, 7.0)))
  np.testing.assert_array_equal(x, np.zeros(5))
  np.testing.assert_array_equal(rewards.standardize(x), np.zeros(5))


def test_full_ties_share_the_average_of_their_positions():
  # Positions 1 and 2 of 4 tied: x = [1, 2/3, 1/3, 0] -> the pair shares 0.5.
  order = [2, 0, 3, 1]
  ranks = np.array([2, 4, 1, 2])
  np.testing.assert_allclose(rewards.rewards_from_order(order, ranks), [0.5, 0, 1, 0.5],
                             atol=1e-7)


def test_ties_must_be_contiguous_in_the_order():
  with pytest.raises(ValueError, match="do not follow"):
    rewards.rewards_from_order([0, 1, 2], np.array([1, 3, 1]))


def test_order_must_be_a_permutation():
  with pytest.raises(ValueError, match="permutation"):
    rewards.rewards_from_order([0, 0, 1])


@pytest.mark.parametrize("bad", [[1.0], []])
def test_groups_of_fewer_than_two_are_errors(bad):
  with pytest.raises(ValueError, match="at least 2"):
    rewards.standardize(np.array(bad))
  with pytest.raises(ValueError, match="at least 2"):
    rewards.min_ranks(np.array(bad))


def test_pointwise_advantages_per_group():
  scores = np.array([[1.0, 2.0, 3.0], [5.0, 5.0, 5.0]])
  adv = advantages.pointwise_advantages(scores)
  np.testing.assert_allclose(adv[0], [-1.0, 0.0, 1.0], atol=1e-5)  # unbiased std = 1
  np.testing.assert_array_equal(adv[1], [0.0, 0.0, 0.0])
  assert adv.dtype == np.float32
  with pytest.raises(ValueError, match=r"\[B, G\]"):
    advantages.pointwise_advantages(np.zeros(3))


def test_non_finite_scores_are_errors():
  with pytest.raises(ValueError, match="non-finite"):
    advantages.pointwise_advantages(np.array([[1.0, np.nan]]))


def test_pointwise_failed_scores_are_no_evidence():
  scores = np.array([[8.0, 6.0, np.nan, 7.0], [5.0, 9.0, 9.0, 1.0], [4.0, np.nan, 2.0, 3.0]])
  ok = np.array([[True, True, False, True], [True, False, True, True],
                 [False, False, True, False]])
  adv = advantages.pointwise_advantages(scores, ok)
  # Row 0: [8, 6, 7] standardized alone (mean 7, unbiased std 1), the NaN gets 0. Row 1: the 9 of
  # a failed request is ignored: [5, 9, 1] alone (mean 5, std 4). Row 2: one judged score: dropped.
  np.testing.assert_allclose(adv, [[1.0, -1.0, 0.0, 0.0], [0.0, 0.0, 1.0, -1.0], [0, 0, 0, 0]],
                             atol=1e-5)
  np.testing.assert_array_equal(advantages.pointwise_mask(ok),
                                [[1, 1, 0, 1], [1, 0, 1, 1], [0, 0, 0, 0]])
  # Whatever a failed trajectory's real score would have been, its advantage is 0, and the
  # others' advantages do not depend on it.
  for real in np.linspace(0, 10, 11):
    again = advantages.pointwise_advantages(np.array([[8.0, 6.0, real, 7.0]]), ok[:1])
    np.testing.assert_array_equal(again, adv[:1])
  with pytest.raises(ValueError, match="does not match"):
    advantages.pointwise_advantages(scores, ok[:, :2])
  with pytest.raises(ValueError, match="non-finite"):  # a NaN flagged ok is a bug
    advantages.pointwise_advantages(scores, np.ones_like(ok))


def test_standardize_ranked_is_standardize_over_the_ranked():
  rng = np.random.default_rng(0)
  x = rng.uniform(0, 1, (50, 6))
  ranked = rng.random((50, 6)) < 0.7
  ranked[:5] = True  # whole groups: exactly standardize's values
  adv = rewards.standardize_ranked(x, ranked)
  np.testing.assert_array_equal(adv[:5], rewards.standardize(x[:5]))
  assert adv.dtype == np.float32
  for b in range(50):
    keep = ranked[b]
    if keep.sum() >= 2:
      np.testing.assert_allclose(adv[b, keep], rewards.standardize(x[b, keep]), atol=1e-6)
    np.testing.assert_array_equal(adv[b, ~keep] if keep.sum() >= 2 else adv[b], 0.0)
  np.testing.assert_array_equal(rewards.trainable(ranked), ranked & (ranked.sum(1) >= 2)[:, None])


# ------------------------------------------------------------- rl.advantage_control
ADV_BG = np.array([[1.0, -1.0, 0.5, 0.0], [2.0, 0.0, -2.0, 0.0], [0.75, -0.75, 0.0, 0.0]],
                  np.float32)
MASK_BG = np.array([[1, 1, 1, 0], [1, 1, 1, 0], [0, 0, 0, 0]], np.float32)  # group 2: dropped


def _controlled(kind, seed=5, step=3, first_group=0, adv=ADV_BG, mask=MASK_BG):
  return advantages.control_advantages(adv, mask, kind,
                                       advantages.control_rng(seed, step, first_group))


def test_control_none_is_the_identity_and_flip_negates_the_trainable():
  np.testing.assert_array_equal(_controlled("none"), ADV_BG)
  np.testing.assert_array_equal(_controlled("flip"), [[-1.0, 1.0, -0.5, 0.0],
                                                      [-2.0, 0.0, 2.0, 0.0],
                                                      [0.75, -0.75, 0.0, 0.0]])
  np.testing.assert_array_equal(_controlled("flip", mask=None), -ADV_BG)
  assert _controlled("flip").dtype == np.float32


def test_control_permute_shuffles_each_group_among_its_trainable_members_only():
  out = _controlled("permute")
  for b in range(3):
    keep = MASK_BG[b] > 0
    # The same multiset per group (same magnitudes), the masked members untouched.
    np.testing.assert_array_equal(np.sort(out[b, keep]), np.sort(ADV_BG[b, keep]))
    np.testing.assert_array_equal(out[b, ~keep], ADV_BG[b, ~keep])
  np.testing.assert_array_equal(out[2], ADV_BG[2])  # a dropped group stays as it is
  np.testing.assert_array_equal(ADV_BG[0], [1.0, -1.0, 0.5, 0.0])  # the input is not changed


def test_control_permute_is_seeded_and_a_hosts_share_permutes_as_one_process():
  np.testing.assert_array_equal(_controlled("permute"), _controlled("permute"))
  adv = np.tile(np.arange(8, dtype=np.float32), (6, 1))
  mask = np.ones_like(adv)
  whole = _controlled("permute", adv=adv, mask=mask)
  # 6 groups of the 8 distinct values: some group is not left in order; other seeds differ.
  assert (whole != adv).any()
  assert (whole != _controlled("permute", seed=6, adv=adv, mask=mask)).any()
  assert (whole != _controlled("permute", step=4, adv=adv, mask=mask)).any()
  # A host holding groups 2..5 of the step draws what one process draws for them.
  np.testing.assert_array_equal(_controlled("permute", first_group=2, adv=adv[2:], mask=mask[2:]),
                                whole[2:])


def test_control_names_the_config_key_for_an_unknown_value():
  with pytest.raises(ValueError, match=r"rl\.advantage_control.*'shuffle'"):
    advantages.check_control("shuffle")
  with pytest.raises(ValueError, match=r"rl\.advantage_control"):
    _controlled("shuffle")
  with pytest.raises(ValueError, match="does not match"):
    _controlled("permute", mask=MASK_BG[:, :2])


class _ScriptedScores:
  """A judge whose k-th ``score`` call returns ``calls[k]`` (NaN = a failed request)."""

  def __init__(self, calls):
    self.calls, self.seen = [np.asarray(c, np.float64) for c in calls], 0

  def score(self, trajectories):
    from arenarl_jax.judges.verdict import PointwiseScores  # pylint: disable=g-import-not-at-top
    values = self.calls[self.seen]
    self.seen += 1
    assert len(trajectories) == len(values)
    ok = np.isfinite(values)
    return PointwiseScores(np.where(ok, values, 0.0).astype(np.float32), ok,
                           (None,) * len(values))


def _config(repeats):
  return AdvantageSettings(source="pointwise", pointwise_repeats=repeats)


def test_pointwise_repeats_average_the_successful_requests_by_hand():
  groups = [["a", "b"], ["c", "d"]]
  judge = _ScriptedScores([[8, 8, 5, 5], [8, 6, 7, np.nan], [8, 7, 6, np.nan]])
  judged = advantages.pointwise(groups, judge, _config(3), step=0)
  assert judge.seen == 3  # three requests per trajectory
  # Means of the successful scores: a 8, b 7, c 6, d 5 (its two failed requests left out).
  np.testing.assert_allclose(judged.rewards_BG, [[8, 7], [6, 5]])
  # Standardised with the unbiased std of two values: +-0.5 / sqrt(0.5) = +-1 / sqrt(2).
  np.testing.assert_allclose(judged.advantages_BG, np.array([[1, -1], [1, -1]]) / np.sqrt(2),
                             atol=1e-5)
  assert judged.stats["judge/requests"] == 12 and judged.stats["judge/failures"] == 2
  # The first request alone tied both groups: the collapse one pointwise request shows.
  assert judged.stats["judge/pointwise_tied_groups"] == 1.0


def test_pointwise_repeats_one_is_one_request_and_bad_values_name_the_key():
  judge = _ScriptedScores([[3, 3, 1, 2]])
  judged = advantages.pointwise([["a", "b"], ["c", "d"]], judge, _config(1), step=0)
  assert judge.seen == 1 and judged.stats["judge/requests"] == 4
  assert judged.stats["judge/pointwise_tied_groups"] == 0.5
  for bad in (0, 1.5, True):
    with pytest.raises(ValueError, match="advantage.pointwise_repeats"):
      advantages.pointwise_repeats(_config(bad))
