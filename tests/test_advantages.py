"""Rank/order -> reward -> advantage math against hand-computed values (ARENARL.md §2, §4)."""
import numpy as np
import pytest

from arenarl_jax.rl import advantages
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
