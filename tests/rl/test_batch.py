"""make_batch: the training-batch contract from trajectories (padding, temperatures, anchor)."""
import numpy as np
import pytest

from arenarl_jax.rl.batch import BATCH_KEYS, bucket_length, make_batch, split_rows
from arenarl_jax.types import Trajectory


def _traj(tokens, mask, logprobs=None, **meta):
  return Trajectory(query="q", tokens=np.asarray(tokens, np.int32),
                    loss_mask=np.asarray(mask, np.int32),
                    logprobs=None if logprobs is None else np.asarray(logprobs, np.float32),
                    metadata=meta)


def test_rows_padded_to_a_bucket_greedy_rows_at_temperature_one():
  trajs = [_traj([5, 6, 7], [0, 1, 1], [0, -0.5, -0.25], greedy=True, temperature=0.0,
                 policy_step=3),
           _traj([5, 8, 9, 10, 11], [0, 1, 1, 0, 1], temperature=0.8, policy_step=3)]
  b = make_batch(trajs, [1.0, -1.0], bucket=4, rows_multiple=4)
  assert b["tokens_NT"].shape == (4, 8) and bucket_length(5, 4) == 8
  np.testing.assert_array_equal(b["tokens_NT"][0], [5, 6, 7, 0, 0, 0, 0, 0])
  np.testing.assert_array_equal(b["loss_mask_NT"][1], [0, 1, 1, 0, 1, 0, 0, 0])
  np.testing.assert_array_equal(b["loss_mask_NT"][2:], 0)  # padding rows train nothing
  np.testing.assert_allclose(b["temperature_N"], [1.0, 0.8, 1.0, 1.0])
  np.testing.assert_allclose(b["sampler_logp_NT"][0, :3], [0, -0.5, -0.25])
  np.testing.assert_allclose(b["advantages_N"], [1, -1, 0, 0])
  np.testing.assert_array_equal(b["policy_step_N"], [3, 3, 0, 0])
  assert {k: v.dtype.name for k, v in b.items()} == {
      "tokens_NT": "int32", "loss_mask_NT": "float32", "advantages_N": "float32",
      "temperature_N": "float32", "sampler_logp_NT": "float32", "policy_step_N": "int32"}
  assert tuple(b) == BATCH_KEYS
  # Not training the anchor zeroes its mask; minibatches take every second row.
  b = make_batch(trajs, [1.0, -1.0], bucket=4, rows_multiple=4, train_anchor=False)
  assert b["loss_mask_NT"][0].sum() == 0 and b["loss_mask_NT"][1].sum() == 3
  halves = split_rows(b, 2)
  np.testing.assert_array_equal(halves[1]["tokens_NT"][0], b["tokens_NT"][1])


def test_unranked_rows_train_nothing():
  """A trajectory without rank evidence (``metadata["ranked"]`` False: a failed judge match or
  score) gets loss mask 0, whatever train_anchor says; its tokens and advantage (0) stay."""
  trajs = [_traj([5, 6], [0, 1], greedy=True, ranked=False), _traj([5, 7], [0, 1], ranked=True),
           _traj([5, 8], [0, 1], ranked=False), _traj([5, 9], [0, 1])]
  for train_anchor in (True, False):
    b = make_batch(trajs, [0.0, 1.0, 0.0, -1.0], bucket=2, train_anchor=train_anchor)
    np.testing.assert_array_equal(b["loss_mask_NT"], [[0, 0], [0, 1], [0, 0], [0, 1]])
    np.testing.assert_array_equal(b["tokens_NT"][:, 1], [6, 7, 8, 9])
    np.testing.assert_allclose(b["advantages_N"], [0, 1, 0, -1])


def test_bad_rows_are_named():
  with pytest.raises(ValueError, match="row 1: tokens \\(3\\), loss_mask \\(2\\)"):
    make_batch([_traj([1], [1]), _traj([1, 2, 3], [0, 1])], [0.0, 0.0])
  with pytest.raises(ValueError, match="2 trajectories but advantages of shape \\(3,\\)"):
    make_batch([_traj([1], [1])] * 2, [0.0, 0.0, 0.0])
  with pytest.raises(ValueError, match="non-finite advantages at rows \\[1\\]"):
    make_batch([_traj([1], [1])] * 2, [0.0, np.nan])
  with pytest.raises(ValueError, match="do not split into rl.minibatches_per_rollout=3"):
    split_rows(make_batch([_traj([1], [1])] * 2, [0.0, 0.0]), 3)
