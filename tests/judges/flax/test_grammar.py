"""Constrained generative decoding of the local Flax judge: the automaton's tokens are the
tokenizer's, every reply parses, the scores read are the model's choice under the grammar
(by hand on constant logits, per order on a scripted model), and one SmolLM2 check."""
import dataclasses

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from flax import nnx

from arenarl_jax.judges import render
from arenarl_jax.judges import rubric as rubric_lib
from arenarl_jax.judges import verdict as verdict_lib
from arenarl_jax.judges.flax import FlaxJudge, FlaxJudgeSettings, grammar, make_flax_judge
from arenarl_jax.models import config as config_lib
from arenarl_jax.models.embedded import find_smollm2_gguf
from arenarl_jax.models.transformer import Transformer, make_model
from arenarl_jax.text.tokenizer import Tokenizer
from arenarl_jax.types import Match
import judge_fakes
from judge_fakes import traj

TINY = config_lib.PRESETS["tiny"]
ONE_LAYER = dataclasses.replace(TINY, n_layers=1)
GEN = FlaxJudgeSettings(mode="generative", max_rows=4, max_user_tokens=512)


@pytest.fixture(scope="module")
def tok():
  return Tokenizer.from_gguf(find_smollm2_gguf())


def _match(p, q):
  return Match(0, 0, 1, p.query, p, q)


# ---------------------------------------------------------------- the automaton's tables
@pytest.mark.parametrize("mode", ["pairwise", "pointwise"])
def test_forced_tokens_are_the_tokenizers_encoding(tok, mode):
  g = grammar.build_grammar(tok, rubric_lib.TRAVEL, mode)
  texts, slots = verdict_lib.verdict_skeleton(rubric_lib.TRAVEL, mode)
  assert g.n_slots == len(slots) and [list(s) for s in g.spans] == [tok.encode(t) for t in texts]
  assert g.ten == -1 and g.digits == tuple(tok.encode(str(d))[0] for d in range(10))
  rng = np.random.default_rng(0)
  for _ in range(5):
    values = rng.integers(0, 11, g.n_slots).tolist()
    text = verdict_lib.fill_skeleton(texts, values)
    ids = g.reply_tokens(values)
    assert ids == tok.encode(text) and tok.decode(ids) == text
    parse = (verdict_lib.parse_pairwise if mode == "pairwise" else verdict_lib.parse_pointwise)
    v = parse(text, rubric_lib.TRAVEL, compact=True)
    first = v.a if mode == "pairwise" else v.agent
    assert list(first.path) == values[:len(rubric_lib.TRAVEL.path)]
  assert len(g.reply_tokens([10] * g.n_slots)) == g.max_tokens()


class MergingTokenizer:
  """Characters as ids, except "5," which is one token (a score merging with the next text)."""

  def __init__(self):
    self.vocab = {}

  def encode(self, text):
    out, k = [], 0
    while k < len(text):
      piece = "5," if text.startswith("5,", k) else text[k]
      out.append(self.vocab.setdefault(piece, len(self.vocab)))
      k += len(piece)
    return out


def test_a_tokenizer_that_merges_a_score_with_the_text_is_refused():
  with pytest.raises(ValueError, match="does not split the verdict at its score slots"):
    grammar.build_grammar(MergingTokenizer(), rubric_lib.TRAVEL, "pairwise")


def test_constrained_is_a_checked_option_and_sets_the_compact_prompt():
  with pytest.raises(ValueError, match="judge.flax.constrained"):
    FlaxJudgeSettings(mode="generative", constrained="yes")
  free = FlaxJudgeSettings(mode="generative", constrained=False)
  model = make_model(ONE_LAYER)
  assert FlaxJudge(model, None, free, compact=False).compact is False
  assert FlaxJudge(model, None, GEN, compact=False).compact is True


# ---------------------------------------------------------------- every reply parses
def test_every_verdict_of_a_random_model_parses_greedy_and_sampled(tok):
  ms = judge_fakes.matches([(1, 8), (9, 2)])
  judge = FlaxJudge(make_model(ONE_LAYER, seed=3), tok, GEN)
  for temperature in (0.0, 1.5, 1.5):  # the temperature is traced: no recompile
    judge.config = dataclasses.replace(GEN, temperature=temperature)
    results = judge.judge(ms)
    assert all(r.ok for r in results), [r.error for r in results]
    for r in results:
      assert 0 <= r.score_p <= 20 and 0 <= r.score_q <= 20
  snap = judge.snapshot()
  assert snap["parse_failures"] == 0 and snap["rows"] == 12
  assert snap["generated_tokens"] >= 12 * len(judge.grammars["pairwise"].reply_tokens([0] * 14))
  assert judge.calls == 3  # sampled calls use fresh keys: fold_in(seed, call)


# ---------------------------------------------------------------- the scores are the model's choice
class ConstantLogits(Transformer):
  """The same logits at every position, whatever the input."""

  def __init__(self, cfg, logits_V):
    super().__init__(cfg, rngs=nnx.Rngs(params=0))
    self.fixed = nnx.Variable(jnp.asarray(logits_V, jnp.float32))

  def head(self, h_NTD):
    return jnp.broadcast_to(self.fixed[...], h_NTD.shape[:-1] + self.fixed[...].shape)


@pytest.mark.parametrize("case,expected", [("seven", 7.0), ("one", 1.0)])
def test_constant_logits_give_the_hand_worked_verdict(tok, case, expected):
  """Only the allowed tokens count: the text's tokens outrank every digit here, yet the scores are
  the best digit; after "1" the next text's first token outranks "0", so the score is 1, not 10
  (10 is read in the scripted test below)."""
  digits = [tok.encode(str(d))[0] for d in range(10)]
  logits = np.full(TINY.vocab_size, 9.0, np.float32)  # everything else (the fixed text) high
  logits[digits] = np.arange(10) * 0.1  # among digits alone "9" would win ...
  if case == "seven":
    logits[digits[7]] = 5.0
  else:
    logits[digits[1]] = 5.0
  judge = FlaxJudge(ConstantLogits(ONE_LAYER, logits), tok, GEN)
  (r,) = judge.judge([_match(traj(2), traj(8))])
  assert r.ok and r.detail["forward"] == (expected, expected) == r.detail["backward"]
  assert (r.score_p, r.score_q) == (2 * expected, 2 * expected)


class RowScripted(Transformer):
  """Row r writes ``scripts[r]`` from position ``starts[r]`` on, whatever it reads (the row is
  the head's leading axis, as in every call of the constrained program)."""

  def __init__(self, cfg, scripts, starts):
    super().__init__(cfg, rngs=nnx.Rngs(params=0))
    width = max(len(s) for s in scripts)
    table = np.array([list(s) + [s[-1]] * (width - len(s)) for s in scripts], np.int32)
    self.scripts = nnx.Variable(jnp.asarray(table))
    self.starts = nnx.Variable(jnp.asarray(starts, jnp.int32))

  def hidden(self, tokens_NT, positions_NT=None, *, cache=None, mask_NT=None):
    _, cache = super().hidden(tokens_NT, positions_NT, cache=cache, mask_NT=mask_NT)
    return positions_NT[..., None].astype(jnp.float32), cache

  def head(self, h_NTD):
    pos = h_NTD[..., 0].astype(jnp.int32)
    rows = jnp.arange(pos.shape[0]).reshape((-1,) + (1,) * (pos.ndim - 1))
    rows = jnp.broadcast_to(rows, pos.shape)
    scripts = self.scripts[...]
    k = jnp.clip(pos + 1 - self.starts[...][rows], 0, scripts.shape[1] - 1)
    return jax.nn.one_hot(scripts[rows, k], self.cfg.vocab_size) * 50.0


def test_scripted_replies_are_read_per_order(tok):
  """Each prompt's row writes the truthful verdict for ITS order (A = the agent shown first): the
  judge reads forward (10, 1) and backward (1, 10), so a P/Q swap anywhere would show (and "1"
  then "0" is read as 10, "1" then the text as 1)."""
  p, q = traj(10), traj(1)
  probe = FlaxJudge(make_model(ONE_LAYER), tok, GEN)
  prefix, _ = probe.prefix_state("pairwise")
  rows = sorted({probe.prompt_row("pairwise", lambda lim, a=a, b=b: render.render_pairwise(
      probe.rubric, p.query, a, b, lim, True)).ids for a, b in ((p, q), (q, p))},
      key=lambda ids: (len(ids), ids))
  scripts = [tok.encode(judge_fakes.truthful_reply({"messages": [{"content": tok.decode(
      list(ids))}]}, rubric_lib.TRAVEL, compact=True)) for ids in rows]
  starts = [len(prefix) + len(ids) for ids in rows]
  judge = FlaxJudge(RowScripted(ONE_LAYER, scripts, starts), tok, GEN)
  (r,) = judge.judge([_match(p, q)])
  assert r.ok and r.detail["forward"] == (10.0, 1.0) and r.detail["backward"] == (1.0, 10.0)
  assert (r.score_p, r.score_q) == (20.0, 2.0)
  assert judge.snapshot()["order_flips"] == 0


# ---------------------------------------------------------------- SmolLM2
def test_smollm2_constrained_verdicts_parse():
  judge = make_flax_judge({"rubric": "travel", "flax": {
      "model": "smollm2", "mode": "generative", "max_rows": 2, "max_user_tokens": 512}})
  (r,) = judge.judge([_match(traj(2, "no times given"), traj(9, "TGV 8:04, 35 EUR"))])
  assert r.ok, r.error
  assert 0 <= r.score_p <= 20 and 0 <= r.score_q <= 20
  assert judge.snapshot()["parse_failures"] == 0
