"""sampling/shared_rows.py: rows of a group with one history extend once, and the rows after
it are the rows a whole-batch extend gives."""
import jax
import numpy as np
import pytest

from arenarl_jax.models.config import PRESETS
from arenarl_jax.models.kv_cache import as_nskf
from arenarl_jax.models.transformer import make_model
from arenarl_jax.sampling import shared_rows
from arenarl_jax.sampling.sampler import Sampler, SamplingSettings, token_lists


def test_same_history_points_each_row_at_the_first_equal_row_of_its_group():
  histories = [[1, 2], [1, 2], [1, 3], [1, 2], [1, 2], [1, 2]]
  new = [[7], [7], [7], [8], [7], []]
  # Group 0 (rows 0-2): row 1 equals row 0; row 2 has another history. Group 1 (rows 3-5):
  # row 4 equals row 0's history and tokens but is in another group; row 5 adds nothing.
  assert shared_rows.same_history(histories, new, 3) == [0, 0, 2, 3, 4, 5]


def test_plan_of_two_groups_by_hand():
  counts = np.array([3, 3, 3, 3, 5, 5, 2, 0])
  plan = shared_rows.plan(counts, [0, 0, 0, 0, 4, 4, 6, 7], group_size=4)
  # Group 0 has one history, group 1 two (rows 4-5 and row 6; row 7 adds nothing): D = 2.
  assert plan.group_size == 2
  np.testing.assert_array_equal(plan.rows_M, [0, 0, 4, 6])
  np.testing.assert_array_equal(plan.counts_M, [3, 0, 5, 2])  # row 1 of the batch: a filler
  np.testing.assert_array_equal(plan.take_N, [1, 1, 1, 1, 1, 1, 1, 0])
  np.testing.assert_array_equal(plan.from_N[:7], [0, 0, 0, 0, 2, 2, 3])
  # Three histories in a group round up to 4 = G: nothing to save.
  assert shared_rows.plan(counts, [0, 0, 0, 0, 4, 5, 6, 7], group_size=4) is None
  assert shared_rows.plan(counts, list(range(8)), group_size=1) is None
  # A mesh 'data' axis of 4 does not divide 2 groups x 2 rows... but divides 2 x 2 = 4.
  assert shared_rows.plan(counts, [0, 0, 0, 0, 4, 4, 6, 7], group_size=4, row_multiple=4)
  assert shared_rows.plan(counts, [0, 0, 0, 0, 4, 4, 6, 7], group_size=4, row_multiple=8) is None
  # A pointer to a row of another group, or to a row without tokens, is no share.
  lone = shared_rows.plan(counts, [0, 0, 0, 0, 0, 4, 7, 7], group_size=4)
  np.testing.assert_array_equal(lone.rows_M, [0, 0, 4, 6])
  # A chain (row 2 -> row 1 -> row 0) is no share for row 2: it extends on its own.
  chain = shared_rows.plan(counts, [0, 0, 1, 0, 4, 4, 6, 7], group_size=4)
  np.testing.assert_array_equal(chain.rows_M, [0, 2, 4, 6])
  np.testing.assert_array_equal(chain.from_N[:7], [0, 0, 1, 0, 2, 2, 3])
  # Rows of other token counts or other cache lengths hold other caches: no share.
  other = shared_rows.plan(counts, [0, 0, 0, 0, 4, 4, 4, 7], group_size=4)  # row 6: 2 vs 5
  np.testing.assert_array_equal(other.rows_M, [0, 0, 4, 6])
  lengths = np.array([9, 9, 9, 8, 9, 9, 9, 9])
  uneven = shared_rows.plan(counts, [0, 0, 0, 0, 4, 4, 6, 7], group_size=4, lengths_N=lengths)
  np.testing.assert_array_equal(uneven.rows_M, [0, 3, 4, 6])
  with pytest.raises(ValueError, match="same_as"):
    shared_rows.plan(counts, [0, 0, 0], group_size=4)
  with pytest.raises(ValueError, match="same_as"):
    shared_rows.plan(counts, [0, 0, 0, 0, 4, 4, 6, 8], group_size=4)


@pytest.fixture(scope="module")
def tiny():
  model = make_model(PRESETS["tiny"], seed=3)
  model.embed[...] = model.embed[...] * 50.0  # peaked logits: greedy is not a float-order tie
  return model


@pytest.mark.parametrize("observations", [
    # Every row of a group gets the same observation (rows of a group are greedy-identical).
    [[100, 101, 102]] * 4 + [[103, 104]] * 4,
    # One row of the second group differs, one adds nothing.
    [[100, 101, 102]] * 4 + [[103, 104], [103, 104], [105, 106, 107], []],
])
def test_a_shared_extend_gives_the_rows_a_whole_batch_extend_gives(tiny, observations):
  sampler = Sampler(tiny, cache_len=64)
  greedy = SamplingSettings(temperature=0.0, max_new_tokens=6)
  sampled = SamplingSettings(temperature=50.0, max_new_tokens=8)  # peaked logits: spread them
  prompts = [[11, 12, 13, 14, 15], [21, 22]]
  results = []
  for share in (False, True):
    turn1, state = sampler.sample(prompts, group_size=4, settings=greedy, key=jax.random.key(1))
    histories = [prompts[r // 4] + t + o for r, (t, o) in
                 enumerate(zip(token_lists(turn1), observations))]
    same_as = shared_rows.same_history(histories, observations, 4) if share else None
    state = sampler.extend(state, observations, same_as)
    turn2, state = sampler.decode(state, sampled, jax.random.key(2))
    results.append((same_as, turn2, jax.device_get(state)))
  (_, want, want_state), (same_as, got, got_state) = results
  assert same_as[:4] == [0, 0, 0, 0] and same_as[5] == 4  # the shared path ran
  np.testing.assert_array_equal(got.tokens_NT, want.tokens_NT)
  np.testing.assert_allclose(got.logp_NT, want.logp_NT, atol=1e-5, rtol=0)
  np.testing.assert_array_equal(got_state.lengths_N, want_state.lengths_N)
  # Each row's own slots below its length (a row that adds nothing is not written by the shared
  # extend, where the whole batch's writes padding past its length, which no one reads).
  own_N = got_state.lengths_N - np.repeat(got_state.cache.prefix.lengths_B, 4)
  layout = got_state.cache.layout
  for got_k, got_v, want_k, want_v in zip(got_state.cache.k, got_state.cache.v,
                                          want_state.cache.k, want_state.cache.v):
    for a, b in zip(as_nskf(got_k, got_v, layout), as_nskf(want_k, want_v, layout)):
      for r, own in enumerate(own_N):
        np.testing.assert_allclose(a[r, :own], b[r, :own], atol=1e-5, rtol=0)
  # The sampled rows differ from each other: the second turn is not all one path.
  assert len({tuple(t) for t in token_lists(got)[1:4]}) > 1
