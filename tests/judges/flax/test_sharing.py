"""Shared beginnings in the local judge's logit mode: the plan by hand and by its invariants, and
the judge's verdicts with sharing equal to those without it, on both attention implementations."""
import dataclasses

import numpy as np
import pytest

from arenarl_jax.judges.flax import FlaxJudge, FlaxJudgeSettings, programs, sharing
from arenarl_jax.models import config as config_lib
from arenarl_jax.models.cpu import kernel as cpu_kernel
from arenarl_jax.models.embedded import find_smollm2_gguf
from arenarl_jax.models.transformer import make_model
from arenarl_jax.text.tokenizer import Tokenizer
from arenarl_jax.types import Match, Step, ToolCall, Trajectory


def _rows(firsts, seconds, query=(1, 2, 3), long=50, tail=40):
  """Prompts "query + first + second + end" for every ordered pair of distinct players."""
  out = []
  for a in firsts:
    for b in seconds:
      if a != b:
        out.append(tuple(query) + (100 + a,) * long + (200 + b,) * tail + (9,))
  return out


def test_rows_with_the_same_first_player_share_query_and_first_player():
  rows = _rows(range(3), range(3))
  (c,) = sharing.plan_chunks(rows, max_rows=8, min_shared=16)
  assert sorted(c.rows) == sorted(rows)
  assert [len(s) for s in c.shared] == [53, 53, 53]  # query (3) + first player (50)
  assert c.offset == (53,) * 6
  for ids, g, tail in zip(c.rows, c.group, c.tails()):
    assert ids[:53] == c.shared[g] and ids[53:] == tail
  # Two rows per shared beginning: (6 - 3) x 53 tokens are not run again.
  assert sum(c.offset) - sum(map(len, c.shared)) == 3 * 53


def test_the_split_that_saves_most_not_the_first_common_run():
  # A row that shares only the query with the next group comes first in sorted order: grouping
  # it with them would cut their common part from 53 to 3 tokens.
  lone = (1, 2, 3) + (99,) * 60
  rows = _rows([100], [1, 2, 3, 4]) + [lone]
  (c,) = sharing.plan_chunks(rows, max_rows=8, min_shared=1)
  shared_of = {ids: (c.shared[g][:o] if o else ()) for ids, g, o in zip(c.rows, c.group, c.offset)}
  assert shared_of[lone] == ()
  assert {len(v) for k, v in shared_of.items() if k != lone} == {53}


def test_no_sharing_below_the_threshold_or_when_disabled():
  rows = _rows(range(3), range(3), long=10)  # query + 10 common tokens = 13 < 16
  assert all(not c.shared for c in sharing.plan_chunks(rows, 8, min_shared=16))
  chunks = sharing.plan_chunks(_rows(range(3), range(3)), 4, min_shared=0)
  assert all(not c.shared and set(c.offset) == {0} for c in chunks)
  assert [len(c.rows) for c in chunks] == [4, 2]


def test_chunks_are_filled_and_a_cut_group_shares_in_both_chunks():
  rows = _rows(range(4), range(4))  # 4 groups of 3
  chunks = sharing.plan_chunks(rows, max_rows=8, min_shared=16)
  assert [len(c.rows) for c in chunks] == [8, 4]
  assert [len(c.shared) for c in chunks] == [3, 2]
  assert chunks[0].shared[2] == chunks[1].shared[0]  # the cut group, in both
  assert all(set(c.offset) == {53} for c in chunks)


def test_a_row_keeps_a_token_of_its_own():
  short = (5, 6, 7, 8)
  (c,) = sharing.plan_chunks([short, short + (1,), short + (2,)], 8, min_shared=2)
  assert all(1 <= len(t) for t in c.tails())
  assert dict(zip(c.rows, c.offset))[short] == 3


def test_plan_invariants_on_random_rows():
  rng = np.random.default_rng(0)
  for trial in range(30):
    base = [tuple(rng.integers(0, 5, rng.integers(1, 30)).tolist()) for _ in range(4)]
    rows = list({b + tuple(rng.integers(0, 3, rng.integers(1, 10)).tolist())
                 for b in base for _ in range(5)})
    max_rows = int(rng.integers(1, 9))
    chunks = sharing.plan_chunks(rows, max_rows, min_shared=int(rng.integers(0, 6)))
    seen = [ids for c in chunks for ids in c.rows]
    assert sorted(seen) == sorted(rows), trial  # every row exactly once
    for c in chunks:
      assert len(c.rows) <= max_rows
      for ids, g, o in zip(c.rows, c.group, c.offset):
        assert o < len(ids) and (o == 0 or ids[:o] == c.shared[g][:o])


def test_chunk_rejects_a_row_that_does_not_begin_with_its_shared_part():
  with pytest.raises(ValueError, match="row 0 does not begin"):
    sharing.Chunk(((1, 2, 3),), ((1, 5),), (0,), (2,))
  with pytest.raises(ValueError, match="at least one token"):
    sharing.Chunk(((1, 2),), ((1, 2),), (0,), (2,))


def _pow2(n: int) -> int:
  return 1 << (n - 1).bit_length()


def test_cut_finds_the_cheapest_cut_of_its_order():
  rng = np.random.default_rng(2)
  pad = lambda n: -(-n // 8) * 8
  for trial in range(40):
    groups = rng.integers(0, 3, int(rng.integers(1, 8))).tolist()  # group g shares 5g tokens
    order = [(tuple(range(int(rng.integers(11, 40)))), g, 5 * g) for g in groups]
    max_rows, call = int(rng.integers(1, 5)), int(rng.integers(0, 30))
    total = lambda plan: sum(sharing.chunk_cost(c, pad, _pow2) + call for c in plan)
    got = sharing.cut(order, max_rows, pad, _pow2, call)
    assert [ids for c in got for ids in c.rows] == [ids for ids, _, _ in order], trial
    assert max(len(c.rows) for c in got) <= max_rows

    def brute(items):  # every cut into consecutive pieces of <= max_rows
      if not items:
        return 0
      return min(total([sharing.cut(items[:k], k)[0]]) + brute(items[k:])
                 for k in range(1, min(max_rows, len(items)) + 1))
    assert total(got) == brute(order), trial


def test_a_group_is_split_between_chunks_only_when_that_pads_less():
  rows = _rows(range(4), range(4))  # 4 groups of 3 rows: 53 common tokens, 41 of their own
  # Counting rows as they are, splitting a group runs its beginning twice: no group is split.
  chunks = sharing.plan_chunks(rows, 8, 16, pad=lambda n: n)
  assert [len(c.rows) for c in chunks] == [6, 6] and [len(c.shared) for c in chunks] == [2, 2]
  # With rows padded to powers of two, 6 rows cost 8: 8 + 4 rows, one group in both chunks,
  # run 12 x 41 + 6 x 53 tokens instead of 16 x 41 + 4 x 53.
  chunks = sharing.plan_chunks(rows, 8, 16, pad=lambda n: n, pad_rows=_pow2)
  assert sorted(len(c.rows) for c in chunks) == [4, 8]
  assert sum(sharing.chunk_cost(c, pad_rows=_pow2) for c in chunks) == 12 * 41 + 6 * 53
  assert len({s for c in chunks for s in c.shared}) == 4  # one beginning in both chunks


# ---------------------------------------------------------------- the judge
@pytest.fixture(scope="module")
def tok():
  return Tokenizer.from_gguf(find_smollm2_gguf())


def _trajectory(k: int, query: str) -> Trajectory:
  """Trajectories long enough that the first one shown is far more than the threshold."""
  call = ToolCall("search_train_tickets", {"from_city": "Lyon", "to_city": f"City{k}"})
  return Trajectory(query, (
      Step(reasoning=f"Plan {k}: first the trains, then the sights. " * 3, tool_calls=(call,),
           tool_results=(f"TGV {7 + k}:04 arrives {9 + k}:10, {20 + 7 * k} EUR.",)),
      Step(content=f"Take the {7 + k}:04 TGV and visit museum {k}. " * (2 + k % 3))))


def _round_robin(n: int, query: str = "Plan a day trip from Lyon.") -> list[Match]:
  trajs = [_trajectory(k, query) for k in range(n)]
  return [Match(0, i, j, query, trajs[i], trajs[j]) for i in range(n) for j in range(i + 1, n)]


ATTENTION = ["reference"] + (["cpu_kernel"] if cpu_kernel.available() else [])


@pytest.mark.parametrize("attention", ATTENTION)
def test_shared_beginnings_give_the_verdicts_of_separate_rows(tok, attention):
  cfg = dataclasses.replace(config_lib.PRESETS["tiny"], n_layers=2)
  model = make_model(cfg, seed=3, attention=attention)
  matches = _round_robin(4)
  scores, snaps = {}, {}
  for min_shared in (0, 64):
    judge = FlaxJudge(model, tok, FlaxJudgeSettings(
        max_rows=8, max_user_tokens=1024, min_shared_tokens=min_shared))
    results = judge.judge(matches)
    assert all(r.ok for r in results)
    scores[min_shared] = np.array([(r.score_p, r.score_q) for r in results])
    snaps[min_shared] = judge.snapshot()
  np.testing.assert_allclose(scores[64], scores[0], atol=2e-5)
  assert snaps[0]["shared_tokens"] == 0 and snaps[0]["tokens"] == snaps[64]["tokens"]
  # 12 prompts, 3 per first trajectory: 2 of every 3 first parts are not run again.
  assert snaps[64]["shared_tokens"] > 0.2 * snaps[64]["tokens"]
  # Swapping P and Q gives the same prompts, the same plan, and swapped sums exactly.
  swapped = [dataclasses.replace(m, i=m.j, j=m.i, p=m.q, q=m.p) for m in matches]
  again = judge.judge(swapped)
  assert [(r.score_q, r.score_p) for r in again] == [tuple(s) for s in scores[64]]


def test_one_program_per_shared_shape(tok):
  cfg = dataclasses.replace(config_lib.PRESETS["tiny"], n_layers=1, d_model=48)
  judge = FlaxJudge(make_model(cfg), tok, FlaxJudgeSettings(
      max_rows=8, max_user_tokens=1024))
  before = dict(programs.TRACES)
  judge.judge(_round_robin(4))
  new = [k for k, v in programs.TRACES.items()
         if k[0] == "score_rows" and v > before.get(k, 0)]
  # 12 prompts, 3 per first trajectory: chunks of 8 and 4 rows (the third group is cut), with 3
  # and 2 shared beginnings: one program each, the first with 4 shared rows (a power of two).
  assert sorted(k[1:4] for k in new) == [(4, 256, 2), (8, 256, 4)] and all(k[4] for k in new)
  compiles = judge.snapshot()["compiles"]
  judge.judge(_round_robin(4, "Plan a day trip from Paris."))  # same shapes: nothing new
  assert judge.snapshot()["compiles"] == compiles


def test_the_judge_plans_the_fewest_padded_tokens(tok):
  judge = FlaxJudge(make_model(config_lib.PRESETS["tiny"]), tok,
                    FlaxJudgeSettings(max_rows=4, min_shared_tokens=8))
  call = 2 * judge.config.block_tokens
  cost = lambda plan: sum(sharing.chunk_cost(c, judge._pad, judge._pad_rows) + call
                          for c in plan)
  rng = np.random.default_rng(1)
  chose = set()
  for _ in range(20):
    base = [tuple(rng.integers(0, 4, rng.integers(8, 120)).tolist()) for _ in range(3)]
    rows = sorted({b + tuple(rng.integers(0, 9, rng.integers(1, 200)).tolist())
                   for b in base for _ in range(int(rng.integers(1, 5)))})
    plan = judge._plan(rows)
    assert sorted(ids for c in plan for ids in c.rows) == rows
    # Never more than without sharing, nor than chunks filled in order (with or without it).
    plain = sharing.plan_chunks(rows, 4, 0, judge._pad, judge._pad_rows, call)
    assert cost(plan) <= min(cost(plain), cost(sharing.plan_chunks(rows, 4, 0)),
                             cost(sharing.plan_chunks(rows, 4, 8)))
    # The counters and compiled shapes follow the same padding.
    assert [sharing.chunk_cost(c, judge._pad, judge._pad_rows) for c in plan] == [
        n * t + b * l for n, t, b, l in map(judge._shape, plan)]
    chose.add(any(c.shared for c in plan))
  assert chose == {True, False}  # both outcomes occur in this sample
