"""Local Flax judge: score reads by hand, tree-attention reads vs separate rows, both orders,
compiled programs per bucket, token budget, generative parsing, and one SmolLM2 batch."""
import dataclasses
import json
import math
import os

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from flax import nnx

from arenarl_jax.judges import make_judge
from arenarl_jax.judges import render
from arenarl_jax.judges import rubric as rubric_lib
from arenarl_jax.judges import verdict as verdict_lib
from arenarl_jax.judges.flax import FlaxJudge, FlaxJudgeSettings, programs, reads
from arenarl_jax.models import config as config_lib
from arenarl_jax.models.cpu import build as cpu_build
from arenarl_jax.models.cpu import kernel as cpu_kernel
from arenarl_jax.models.embedded import find_smollm2_gguf
from arenarl_jax.models.transformer import Transformer, make_model
from arenarl_jax.text.tokenizer import Tokenizer
from arenarl_jax.types import Match, Step, Trajectory
import judge_fakes
from judge_fakes import traj

TINY = config_lib.PRESETS["tiny"]
SMALL = FlaxJudgeSettings(max_rows=2, max_user_tokens=512)


@pytest.fixture(scope="module")
def tok():
  return Tokenizer.from_gguf(find_smollm2_gguf())


@pytest.fixture(scope="module")
def tiny_judge(tok):
  return FlaxJudge(make_model(TINY, seed=0), tok, SMALL)


def _match(p, q, group=0):
  return Match(group, 0, 1, p.query, p, q)


class FixedHead(Transformer):
  """A transformer whose head ignores its input: the same logits at every position."""

  def __init__(self, cfg, logits_V):
    super().__init__(cfg, rngs=nnx.Rngs(params=0))
    self.fixed = nnx.Variable(jnp.asarray(logits_V, jnp.float32))

  def head(self, h_NTD):
    return jnp.broadcast_to(self.fixed[...], h_NTD.shape[:-1] + self.fixed[...].shape)


class ScriptedModel(Transformer):
  """Writes ``script`` from position ``start`` on (then its last token again), whatever it reads."""

  def __init__(self, cfg, script, start):
    super().__init__(cfg, rngs=nnx.Rngs(params=0))
    self.script = nnx.Variable(jnp.asarray(script, jnp.int32))
    self.start = start

  def hidden(self, tokens_NT, positions_NT=None, *, cache=None, mask_NT=None):
    _, cache = super().hidden(tokens_NT, positions_NT, cache=cache, mask_NT=mask_NT)
    return positions_NT[..., None].astype(jnp.float32), cache

  def head(self, h_NTD):
    script = self.script[...]
    k = jnp.clip(h_NTD[..., 0].astype(jnp.int32) + 1 - self.start, 0, script.shape[0] - 1)
    return jax.nn.one_hot(script[k], self.cfg.vocab_size) * 50.0


# ---------------------------------------------------------------- score tokens and reads by hand
def test_branch_texts_are_json_key_paths(tok):
  texts = reads.branch_texts(rubric_lib.TRAVEL, "pairwise")
  assert len(texts) == 14
  assert texts[0] == '{"Agent_A": {"path": {"breadth": '
  assert texts[-1] == '{"Agent_B": {"answer": {"clarity": '
  assert reads.branch_texts(rubric_lib.TRAVEL, "pointwise")[3] == '{"answer": {"relevance": '
  # Each branch + a score + closing braces is a valid compact verdict fragment.
  assert json.loads(texts[-1] + "7}}}") == {"Agent_B": {"answer": {"clarity": 7}}}


def test_smollm2_scores_are_digit_tokens_and_ten_is_two(tok):
  digits, ten = reads.score_tokens(tok, reads.branch_texts(rubric_lib.TRAVEL, "pairwise"))
  assert digits == tuple(tok.token_to_id(str(d)) for d in range(10))
  assert ten == -1  # "10" -> "1", "0": read with a teacher-forced "1"


class CharTokenizer:
  """Characters as ids, except the merges given (longest first); "10" spelled as ``ten``."""

  def __init__(self, merges=(), ten="10"):
    self.merges = sorted(merges, key=len, reverse=True)
    self.ten = ten
    self.vocab = {}

  def _id(self, piece):
    return self.vocab.setdefault(piece, len(self.vocab))

  def encode(self, text):
    text = text.replace("10", self.ten)
    out, k = [], 0
    while k < len(text):
      piece = next((m for m in self.merges if text.startswith(m, k)), text[k])
      out.append(self._id(piece))
      k += len(piece)
    return out


def test_score_tokens_single_token_ten_and_errors():
  texts = ['{"a": ', '{"b": ']
  t = CharTokenizer(merges=("10",))
  digits, ten = reads.score_tokens(t, texts)
  assert ten == t.vocab["10"] and digits == tuple(t.vocab[str(d)] for d in range(10))
  with pytest.raises(ValueError, match="re-tokenizes"):
    reads.score_tokens(CharTokenizer(merges=(" 7",)), texts)
  with pytest.raises(ValueError, match="neither one token"):
    reads.score_tokens(CharTokenizer(ten="1_0"), texts)


def _hand_logits(v, weights):
  """Logits whose softmax is ``weights`` (normalised) on their ids and 0 elsewhere."""
  logits = np.full((v,), -1e9, np.float32)
  for i, w in weights.items():
    logits[i] = math.log(w)
  return logits


def _log_probs(v, weights):
  return np.asarray(jax.nn.log_softmax(_hand_logits(v, weights)))


def test_score_log_probs_two_token_ten_by_hand():
  # ids 0..9 are the digits, 10 is another token; P("0")=.1, P("1")=.4, P("9")=.2, P(other)=.3.
  first = _log_probs(12, {0: 1, 1: 4, 9: 2, 10: 3})
  # After "1": P("0")=.5 (-> 10), P("3")=.25 (-> 13: invalid), P(other)=.25 (the number ends: 1).
  after = _log_probs(12, {0: 2, 3: 1, 11: 1})
  lp, mass = programs.score_log_probs(first[None, None], after[None, None], range(10), -1)
  p = {0: .1, 1: .4 * .25, 9: .2, 10: .4 * .5}
  total = sum(p.values())
  want = np.array([p.get(s, 0) / total for s in range(11)])
  np.testing.assert_allclose(np.exp(lp[0, 0]), want, atol=1e-6)
  assert float(mass[0, 0]) == pytest.approx(total, rel=1e-6)
  assert float(np.exp(lp[0, 0]) @ np.arange(11)) == pytest.approx(
      (1 * .1 + 9 * .2 + 10 * .2) / .6, rel=1e-6)


def test_score_log_probs_single_token_ten_by_hand():
  first = _log_probs(12, {2: 1, 11: 3, 5: 4})  # token 11 is "10"
  lp, mass = programs.score_log_probs(first[None, None], None, range(10), 11)
  np.testing.assert_allclose(np.exp(lp[0, 0]), np.eye(11)[2] * 1 / 8 + np.eye(11)[5] * 4 / 8
                             + np.eye(11)[10] * 3 / 8, atol=1e-6)
  assert float(mass[0, 0]) == pytest.approx(1.0, rel=1e-6)


def test_fixed_score_logits_give_hand_computed_scores(tok):
  # P("0")=.1, P("1")=.4, P("9")=.2, P(other)=.3 at every position, so after "1": P(no digit)=.3.
  # P(score): 0 -> .1, 1 -> .4*.3, 9 -> .2, 10 -> .4*.1; expectation (0.12 + 1.8 + 0.4) / 0.46.
  digit = [tok.token_to_id(str(d)) for d in range(10)]
  logits = _hand_logits(TINY.vocab_size, {digit[0]: 1, digit[1]: 4, digit[9]: 2,
                                          tok.token_to_id("x"): 3})
  judge = FlaxJudge(FixedHead(TINY, logits), tok, SMALL)
  expected = 2.32 / 0.46
  (r,) = judge.judge([_match(traj(3), traj(8))])
  assert r.ok and r.requests == 2
  assert r.score_p == pytest.approx(2 * expected, rel=1e-5)
  assert r.score_q == pytest.approx(2 * expected, rel=1e-5)
  assert r.detail["score_mass"] == pytest.approx(0.46, rel=1e-5)
  scores = judge.score([traj(3), traj(8)])
  np.testing.assert_allclose(scores.scores, [expected] * 2, rtol=1e-5)
  assert scores.ok.all()


# ---------------------------------------------------------------- the device program
@pytest.mark.parametrize("family,attention", [
    ("llama", "reference"), ("qwen3", "reference"), ("llama", "cpu_kernel"),
    ("qwen3", "dot_product_attention")])
def test_branch_reads_equal_each_branch_as_its_own_sequence(family, attention):
  if attention == "cpu_kernel" and not cpu_kernel.available():
    # Where the kernel is required (CI with a compiler) a missing kernel fails, never skips.
    assert not os.environ.get(cpu_build.REQUIRE_ENV), "the CPU kernel is required but unavailable"
    pytest.skip("no C++ compiler / not a CPU backend")
  cfg = dataclasses.replace(TINY, vocab_size=1024)
  if family == "qwen3":
    cfg = dataclasses.replace(cfg, family="qwen3", qk_norm=True, qkv_bias=True,
                              tie_embeddings=False)
  model = make_model(cfg, seed=1, attention=attention)
  graphdef, params = nnx.split(model)
  rng = np.random.default_rng(0)
  prefix = rng.integers(20, 500, 37)
  rows = [rng.integers(20, 500, 20), rng.integers(20, 500, 33)]
  # Branches sharing leading tokens (one a prefix of another) share trie nodes.
  branches = [[501, 502], [503, 504, 505, 506, 507], [501, 502, 508], [503, 504, 509, 510],
              [511, 512, 513]]
  layout = programs.BranchLayout.build(branches, tuple(range(10, 20)), -1)
  assert len(layout.tokens) == 2 + 5 + 1 + 2 + 3 + len(branches)  # shared nodes counted once
  tokens = np.zeros((2, 64), np.int32)
  for r, ids in enumerate(rows):
    tokens[r, :len(ids)] = ids
  cache = programs.prefill_prefix(graphdef, params, prefix[None])
  probs, mass = programs.score_rows(graphdef, params, cache, tokens,
                                    np.array([20, 33], np.int32), layout=layout, block=24)
  # Reference: prefix + row + branch + "1" as ONE plain causal sequence per (row, branch), all
  # right-padded into one batch (causal: padding after a sequence cannot change it).
  seqs = [np.concatenate([prefix, ids, branch, [11]]) for ids in rows for branch in branches]
  batch = np.zeros((len(seqs), max(map(len, seqs))), np.int32)
  for k, seq in enumerate(seqs):
    batch[k, :len(seq)] = seq
  oracle, _ = nnx.split(make_model(cfg, seed=1, attention="reference"))
  logits = jax.jit(lambda p, x: nnx.merge(oracle, p)(x)[0])(params, batch)
  logp = jax.nn.log_softmax(logits, axis=-1)
  at = np.array([len(seq) - 2 for seq in seqs])  # the branch's last token; then after "1"
  rows_k = np.arange(len(seqs))
  lp, m = programs.score_log_probs(logp[rows_k, at][None], logp[rows_k, at + 1][None],
                                   tuple(range(10, 20)), -1)
  np.testing.assert_allclose(probs.reshape(-1, 11), np.exp(lp[0]), rtol=2e-4, atol=1e-6)
  np.testing.assert_allclose(mass.reshape(-1), m[0], rtol=2e-4)


# ---------------------------------------------------------------- protocol properties
def test_self_match_ties_exactly_and_swapping_swaps_the_sums(tiny_judge):
  p, q = traj(2, "slow trains"), traj(9, "with fares and times")
  same, pq, qp = tiny_judge.judge([_match(p, p), _match(p, q), _match(q, p)])
  assert same.ok and same.score_p == same.score_q
  assert pq.ok and qp.ok
  assert (qp.score_p, qp.score_q) == (pq.score_q, pq.score_p)
  assert qp.detail["forward"] == pq.detail["backward"]
  (alone,) = tiny_judge.judge([_match(q, p)])  # other chunk shapes: equal up to rounding
  assert (alone.score_p, alone.score_q) == pytest.approx((qp.score_p, qp.score_q), abs=1e-5)
  for r in (same, pq):
    assert 0 <= r.score_p <= 20 and 0 <= r.score_q <= 20


def test_batch_results_align_with_inputs(tiny_judge):
  pairs = [(traj(1), traj(4, "and a museum")), (traj(6, "cheap"), traj(2)),
           (traj(3, "by bus"), traj(3, "by tram")), (traj(7), traj(5, "late"))]
  batch = tiny_judge.judge([_match(p, q, g) for g, (p, q) in enumerate(pairs)])
  for (p, q), got in zip(pairs, batch):
    (want,) = tiny_judge.judge([_match(p, q)])
    assert (got.score_p, got.score_q) == pytest.approx((want.score_p, want.score_q), abs=1e-4)
  with pytest.raises(ValueError, match=r"matches\[0\].*no trajectories"):
    tiny_judge.judge([Match(0, 0, 1, "q", traj(1), None)])
  assert tiny_judge.judge([]) == []


def test_set_params_replaces_the_weights_and_the_prefix_cache(tok):
  match = _match(traj(2), traj(7))
  judge = FlaxJudge(make_model(TINY, seed=0), tok, SMALL)
  (before,) = judge.judge([match])
  other = make_model(TINY, seed=5)
  judge.set_params(nnx.split(other)[1])
  (after,) = judge.judge([match])
  (fresh,) = FlaxJudge(other, tok, SMALL).judge([match])
  assert after.score_p != pytest.approx(before.score_p, abs=1e-6)
  assert (after.score_p, after.score_q) == pytest.approx((fresh.score_p, fresh.score_q), abs=1e-6)


def test_one_compiled_program_per_shape_bucket(tok):
  # A model shape of its own, so no other test has compiled these programs.
  cfg = dataclasses.replace(TINY, n_layers=1)
  judge = FlaxJudge(make_model(cfg), tok, FlaxJudgeSettings(
      max_rows=2, min_bucket=64, max_user_tokens=1024))
  judge.judge([_match(traj(1), traj(2))])
  assert judge.snapshot()["compiles"] == 2  # the prefix and the (2 rows, bucket) program
  judge.judge([_match(traj(5, "other words"), traj(6))])
  assert judge.snapshot()["compiles"] == 2
  long = Trajectory("Plan a day in Lyon", (Step(content="A long answer. " * 60),))
  judge.judge([_match(long, traj(2))])
  snap = judge.snapshot()
  assert snap["compiles"] == 3 and snap["calls"] == 3 and snap["matches"] == 3
  assert snap["requests"] == 6 and snap["rows"] == 6 and snap["failed_matches"] == 0


def test_token_budget_truncates_with_a_marker_or_fails_cleanly(tok):
  cfg = FlaxJudgeSettings(max_rows=2, min_bucket=64, max_user_tokens=256)
  judge = FlaxJudge(make_model(dataclasses.replace(TINY, n_layers=1)), tok, cfg)
  huge = Trajectory("Plan a day in Lyon", (Step(content="Visit the old town. " * 400),))
  row = judge.prompt_row("pairwise", lambda lim: render.render_pairwise(
      judge.rubric, huge.query, huge, traj(3), lim, True))
  assert len(row.ids) <= 256 and "truncated]" in tok.decode(row.ids)
  (r,) = judge.judge([_match(huge, traj(3))])
  assert r.ok and judge.snapshot()["refits"] > 0 and judge.snapshot()["truncations"] > 0
  tight = FlaxJudge(judge.model, tok, dataclasses.replace(cfg, max_user_tokens=64))
  (r,) = tight.judge([_match(huge, traj(3))])
  assert not r.ok and "max_user_tokens=64" in r.error and r.score_p == r.score_q == 0.0
  assert tight.snapshot()["failed_matches"] == 1


# ---------------------------------------------------------------- generative mode
def _generative(tok, reply: str):
  """A judge whose model writes ``reply`` then EOS after its (equal-length) prompts."""
  cfg = FlaxJudgeSettings(mode="generative", max_rows=2, max_user_tokens=512,
                        max_new_tokens=192, constrained=False)
  p, q = traj(4), traj(6)
  probe = FlaxJudge(make_model(TINY), tok, cfg, compact=True)
  prefix, _ = probe.prefix_state("pairwise")
  row = probe.prompt_row("pairwise", lambda lim: render.render_pairwise(
      probe.rubric, p.query, p, q, lim, True))
  script = tok.encode(reply) + [tok.eos_id]
  model = ScriptedModel(dataclasses.replace(TINY, n_layers=1), script, len(prefix) + len(row.ids))
  return FlaxJudge(model, tok, cfg, compact=True), _match(p, q)


def test_generative_parses_the_verdict_and_fails_cleanly_on_garbage(tok):
  rubric = rubric_lib.TRAVEL
  a = verdict_lib.score_agent(rubric, [8, 7, 9], [6, 6, 7, 8])
  b = verdict_lib.score_agent(rubric, [3, 4, 2], [5, 4, 4, 3])
  reply = verdict_lib.format_verdict(rubric, "pairwise", [a, b], compact=True)
  judge, match = _generative(tok, reply)
  (r,) = judge.judge([match])
  # Both orders read the same reply: score_p = fwd.A + bwd.B, combined with the rubric's rounding.
  assert r.ok and (r.score_p, r.score_q) == (a.combined + b.combined, b.combined + a.combined)
  assert r.detail["forward"] == (a.combined, b.combined) and r.detail["mismatches"] == 0
  judge, match = _generative(tok, 'Agent_A wins! {"Agent_A": 10')
  (r,) = judge.judge([match])
  assert not r.ok and r.score_p == r.score_q == 0.0 and "unparseable verdict" in r.error
  snap = judge.snapshot()
  assert snap["parse_failures"] == 2 and snap["failed_matches"] == 1  # both orders failed


def test_generative_scripted_replies_distinguish_the_two_orders(tok, monkeypatch):
  """Each order gets the truthful reply for ITS prompt (A = the agent shown first), so a P/Q swap
  in pairing or summing the two orders changes the result (one reply for both orders cannot)."""
  judge, match = _generative(tok, "{}")  # P has QUALITY=4, Q has QUALITY=6
  parts = []
  real_chunks = judge.chunks

  def chunks(unique):
    for part, tokens, lengths in real_chunks(unique):
      parts.append(part)
      yield part, tokens, lengths

  class ScriptedTokenizer:
    def __getattr__(self, name):
      return getattr(tok, name)

    def decode_batch(self, lists, **kw):
      del kw
      return [judge_fakes.truthful_reply({"messages": [{"content": tok.decode(list(ids))}]},
                                         rubric_lib.TRAVEL, compact=True)
              for ids in parts[-1][:len(lists)]]

  monkeypatch.setattr(judge, "chunks", chunks)
  monkeypatch.setattr(judge, "tokenizer", ScriptedTokenizer())
  (r,) = judge.judge([match])
  assert r.ok and r.detail["forward"] == (4.0, 6.0) and r.detail["backward"] == (6.0, 4.0)
  assert (r.score_p, r.score_q) == (8.0, 12.0)
  snap = judge.snapshot()
  assert snap["both_orders"] == 1 and snap["order_flips"] == 0 and snap["requests"] == 2


# ---------------------------------------------------------------- config and SmolLM2
def test_config_errors_name_the_key():
  with pytest.raises(ValueError, match="judge.flax.mode"):
    FlaxJudgeSettings(mode="beam")
  with pytest.raises(ValueError, match="judge.flax.max_rows"):
    FlaxJudgeSettings(max_rows=0)
  with pytest.raises(ValueError, match=r"judge.flax: unknown key\(s\) \['rows'\]"):
    make_judge({"backend": "flax", "flax": {"rows": 4}})
  with pytest.raises(ValueError, match="both model= and tokenizer="):
    make_judge({"backend": "flax"}, model=object())


def test_smollm2_judges_a_small_batch():
  judge = make_judge({"backend": "flax", "rubric": "travel",
                      "flax": {"model": "smollm2", "max_rows": 2, "max_user_tokens": 512}})
  p, q = traj(2, "no times given"), traj(9, "TGV 8:04, 35 EUR, museum 10-18h")
  pq, qp = judge.judge([_match(p, q), _match(q, p)])
  for r in (pq, qp):
    assert r.ok and math.isfinite(r.score_p) and math.isfinite(r.score_q)
    assert 0 <= r.score_p <= 20 and 0 <= r.score_q <= 20
    assert r.detail["score_mass"] > 0.1  # the key path makes the model want to write a number
  assert (qp.score_p, qp.score_q) == (pq.score_q, pq.score_p)
  assert judge.snapshot()["rows"] == 2  # the swapped match reuses both prompts
