"""The judge-agreement study (``arenarl_jax/experiments/agreement.py``): each metric on hand-built
verdicts, fake judges through the real driver, the smoke preset end to end, and resuming."""
import json
import pathlib

import numpy as np
import pytest

from arenarl_jax.experiments import agreement
from arenarl_jax.experiments import agreement_metrics as am
from arenarl_jax.experiments import claims, tables
from arenarl_jax.judges import local_server
from arenarl_jax.judges import verdict as verdict_lib
import study_folder  # tests/experiments/study_folder.py

ROOT = pathlib.Path(__file__).resolve().parents[2]
STUDY = ROOT / "experiments" / "judge_agreement"
SMALL = agreement.PairSet(per_bin=2, subtasks=("search", "compare"))


def _row(checker, forward=None, backward=None, point=None, length=(100, 100), bin_="small"):
  return {"pair": "t", "checker": list(checker), "forward": forward, "backward": backward,
          "point": point, "length": list(length), "bin": bin_}


def _first_shown(checker):
  """A judge that always prefers Agent_A, in both orders."""
  return _row(checker, forward=[7.0, 3.0], backward=[7.0, 3.0], point=[5.0, 5.0])


def _truthful(checker, length=(100, 100)):
  p, q = checker
  return _row(checker, forward=[p, q], backward=[q, p], point=[p, q], length=length)


# ------------------------------------------------------------------ metrics by hand
def test_a_judge_that_always_picks_the_first_shown():
  rows = [_first_shown((9.0, 6.0)), _first_shown((5.0, 8.0))]
  s = am.summary(rows, ["small"], samples=200)[-1]
  # Each order names its first-shown: P forward, Q backward. The sums tie (7 + 3 each side).
  assert s["agreement"].value == 0.5
  assert s["order_flip"].value == 1.0
  assert s["position_bias"].value == 0.5
  assert s["pairwise_tie"].value == 1.0
  assert s["pointwise_tie"].value == 1.0 and s["pointwise_agreement"].value == 0.5
  assert np.isnan(s["length_corr"].value)  # two pairs: no correlation


def test_a_truthful_judge_and_a_contrarian():
  rows = [_truthful((9.0, 6.0)), _truthful((5.0, 8.0)), _truthful((7.2, 7.0))]
  v = [am.pair_values(r) for r in rows]
  assert [x["agreement"] for x in v] == [1.0, 1.0, 1.0]
  assert [x["order_flip"] for x in v] == [0.0, 0.0, 0.0]
  # P better: P wins shown first (1) and Q loses shown first (0): (1 + 0) / 2 - 0.5 = 0.
  assert [x["position_bias"] for x in v] == [0.0, 0.0, 0.0]
  assert [x["won_p"] for x in v] == [1.0, 0.0, 1.0]
  contrarian = _row((9.0, 6.0), forward=[2.0, 8.0], backward=[8.0, 2.0], point=[1.0, 4.0])
  c = am.pair_values(contrarian)
  assert (c["agreement"], c["order_flip"], c["position_bias"], c["pointwise_agreement"]) == (
      0.0, 0.0, 0.0, 0.0)


def test_a_biased_judge_that_flips_only_small_gaps():
  # Agent_A gets +1: a 0.4 gap flips with the order, a 3.0 gap does not.
  def biased(checker):
    p, q = checker
    return _row(checker, forward=[p + 1, q], backward=[q + 1, p])
  small, large = am.pair_values(biased((7.0, 7.4))), am.pair_values(biased((9.0, 6.0)))
  assert small["order_flip"] == 1.0 and small["position_bias"] == 0.5
  assert small["agreement"] == 1.0  # the sums cancel the bias: 7 + 8 vs 7.4 + 8.4 -> Q, right
  assert large["order_flip"] == 0.0 and large["position_bias"] == 0.0


def test_length_correlation_by_hand():
  # won_p = 1, 0, 1, 0 (truthful), length differences 10, -10, 20, -20: centred products sum to
  # 0.5 * (10 + 10 + 20 + 20) = 30, norms 1 and sqrt(1000): r = 30 / sqrt(1000).
  rows = [_truthful((9.0, 6.0), (110, 100)), _truthful((5.0, 8.0), (100, 110)),
          _truthful((9.0, 6.0), (120, 100)), _truthful((5.0, 8.0), (100, 120))]
  iv = am.length_corr(rows, samples=300, seed=0)
  assert iv.value == pytest.approx(30 / np.sqrt(1000)) and iv.tasks == 4
  assert -1.0 <= iv.low <= iv.value <= iv.high <= 1.0
  # Swapping P and Q in every pair changes nothing.
  swapped = [_truthful(r["checker"][::-1], r["length"][::-1]) for r in rows]
  assert am.length_corr(swapped, 300, 0).value == pytest.approx(iv.value)


def test_failures_are_counted_and_left_out():
  rows = [_truthful((9.0, 6.0)), _row((9.0, 6.0), point=[4.0, None]),
          _row((5.0, 8.0), forward=[1.0, 9.0], backward=[9.0, 1.0], point=None)]
  s = am.summary(rows, ["small"], samples=200)[-1]
  assert (s["pairs"], s["failed_pairwise"], s["failed_pointwise"]) == (3, 1, 2)
  assert s["agreement"].value == 1.0 and s["agreement"].tasks == 2
  assert s["pointwise_tie"].tasks == 1


def test_bins_and_checks_follow_the_verdict_rule():
  rows = ([_truthful((9.0, 6.0), (110, 100)) | {"bin": "large"} for _ in range(8)]
          + [_first_shown((7.0, 7.4)) for _ in range(8)])
  stats = {s["bin"]: s for s in am.summary(rows, ["small", "medium", "large"], samples=300)}
  assert list(stats) == ["small", "large", "all"]  # medium holds no pair
  assert stats["large"]["agreement"].value == 1.0 and stats["small"]["agreement"].value == 0.5
  assert stats["all"]["agreement"].value == 0.75
  by_judge = {"j": rows}
  above = am.Check("above chance", "j", "agreement", 0.5, gap_bin="large")
  assert am.check(above, by_judge, 300)[1] == claims.REPRODUCED
  assert am.check(am.Check("x", "j", "agreement", 0.5, gap_bin="small"), by_judge,
                  300)[1] == claims.CANNOT_TELL  # a gap of exactly 0
  collapse = am.Check("ties", "j", "pointwise_tie", "pairwise_tie", direction=-1)
  gap, word = am.check(collapse, by_judge, 300)
  assert gap.value == 0.0 and word == claims.CANNOT_TELL
  with pytest.raises(KeyError):
    am.check(am.Check("x", "missing", "agreement"), by_judge)
  with pytest.raises(ValueError, match="metric"):
    am.Check("x", "j", "length_corr")


# ------------------------------------------------------------------ pairs and fake judges
@pytest.fixture(scope="module")
def pairs():
  return agreement.build_pairs(SMALL)


def test_the_pair_set_is_fixed_and_its_truth_known(pairs):
  assert len(pairs) == 6 and len({p.task_id for p in pairs}) == 6
  assert [(p.subtask, p.bin) for p in pairs] == [
      (s, b) for s in ("search", "compare") for b in ("small", "medium", "large")]
  for p in pairs:
    assert p.task_id.startswith(f"travel/{p.subtask}/8")  # validation ids, not test (9...)
    assert p.rates[0] != p.rates[1] and p.checker[0] != p.checker[1]
    assert p.gap == pytest.approx(abs(p.checker[0] - p.checker[1]))
    # Nested errors: the lower rate is the better trajectory.
    assert (p.checker[0] > p.checker[1]) == (p.rates[0] < p.rates[1])
  assert agreement.pairs_hash(agreement.build_pairs(SMALL)) == agreement.pairs_hash(pairs)
  assert any(p.rates[0] > p.rates[1] for p in pairs)  # the better one is not always shown first


def test_a_bins_pairs_are_spread_over_the_subtasks():
  # 3 per bin over 2 subtasks: one each, and the third goes to the next subtask in turn.
  got = agreement.build_pairs(agreement.PairSet(per_bin=3, subtasks=("search", "compare")))
  counts = {}
  for p in got:
    counts[p.subtask, p.bin] = counts.get((p.subtask, p.bin), 0) + 1
  assert counts == {("search", "small"): 2, ("search", "medium"): 1, ("search", "large"): 2,
                    ("compare", "small"): 1, ("compare", "medium"): 2, ("compare", "large"): 1}


class FirstShownJudge:
  """Prefers Agent_A in every request; scores every trajectory 5 alone."""

  def __init__(self, fail_pointwise=False):
    self.fail_pointwise = fail_pointwise
    self.calls = 0

  def judge(self, matches):
    self.calls += 1
    return [verdict_lib.combine_scores((8.0, 2.0), (8.0, 2.0)) for _ in matches]

  def score(self, trajectories):
    if self.fail_pointwise:
      raise RuntimeError("server went away")
    n = len(trajectories)
    return verdict_lib.PointwiseScores(np.full(n, 5.0, np.float32), np.ones(n, bool),
                                       (None,) * n)


def test_a_fake_first_shown_judge_through_the_driver(pairs):
  judge = FirstShownJudge(fail_pointwise=True)
  rows, times = agreement.judge_rows(judge, pairs, chunk=4, say=lambda _: None)
  assert judge.calls == 2 and set(times) == {"pairwise_s", "pointwise_s"}
  s = am.summary(rows, ["small", "medium", "large"], samples=200)[-1]
  assert (s["agreement"].value, s["order_flip"].value, s["position_bias"].value) == (
      0.5, 1.0, 0.5)
  assert s["failed_pointwise"] == 6 and np.isnan(s["pointwise_tie"].value)
  assert rows[0]["point_error"] == "RuntimeError: server went away"


def test_a_judge_that_raises_fails_its_pairs_without_stopping(pairs):
  class Broken(FirstShownJudge):
    def judge(self, matches):
      raise ConnectionError("refused")
  rows, _ = agreement.judge_rows(Broken(), pairs, chunk=0, say=lambda _: None)
  assert all(r["forward"] is None and r["error"] == "ConnectionError: refused" for r in rows)
  assert am.summary(rows, [], samples=50)[-1]["failed_pairwise"] == 6


# ------------------------------------------------------------------ the smoke preset, resumed
def _main(capsys, *argv):
  assert agreement.main([str(a) for a in argv]) == 0
  return capsys.readouterr().out


@pytest.fixture(scope="module")
def smoke_folder(tmp_path_factory):
  return study_folder.copy_study(tmp_path_factory, STUDY)


def test_the_smoke_preset_end_to_end(smoke_folder, capsys):
  out = _main(capsys, smoke_folder, "--preset=smoke", f"--out={smoke_folder}")
  assert "ran 2 judge(s), found 0" in out
  result = out.strip().splitlines()[-1]
  assert result.startswith("RESULT pairs=6 judges=2 agreement_rubric_exact=1 flips_rubric_exact=0")
  assert "agreement_rubric_noisy=" in result and "wall_s=" in result
  for name in ("rubric_exact", "rubric_noisy"):
    rec = json.loads((smoke_folder / "results" / f"{name}.json").read_text())
    assert len(rec["rows"]) == 6 and rec["skipped"] is None
    assert {"commit", "dirty", "jax", "numpy", "load_start", "load_end", "wall_s",
            "pairwise_s", "pointwise_s"} <= set(rec["provenance"])
  text = (smoke_folder / "README.md").read_text()
  assert text.startswith("# Judge agreement")  # the study's own README, its block replaced
  block = text.split(tables.START)[1].split(tables.END)[0]
  assert "**6 pairs** (search: 1 small, 1 medium, 1 large; direction:" in block
  assert "| rubric, no noise | all | 6 | 0 / 0 | 1.000 [1.000, 1.000] | 0.000" in block
  assert block.count("| rubric, quickstart noise |") == 4  # three bins and all
  assert "not run yet" in block and "![agreement](agreement.png)" in block
  assert (smoke_folder / "agreement.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
  assert (smoke_folder / "summary.csv").read_text().count("\nrubric_noisy,") == 4


def test_a_second_run_skips_finished_judges(smoke_folder, capsys):
  outputs = ("README.md", "summary.csv", "agreement.png", "results/rubric_exact.json")
  before = {n: (smoke_folder / n).read_bytes() for n in outputs}
  mtimes = sorted(p.stat().st_mtime_ns for p in (smoke_folder / "results").iterdir())
  out = _main(capsys, smoke_folder, "--preset=smoke", f"--out={smoke_folder}")
  assert "ran 0 judge(s), found 2" in out and out.count("result file found, skipped") == 2
  assert mtimes == sorted(p.stat().st_mtime_ns for p in (smoke_folder / "results").iterdir())
  assert {n: (smoke_folder / n).read_bytes() for n in outputs} == before


def test_a_judge_that_cannot_run_is_recorded_and_tried_again(tmp_path, capsys, monkeypatch):
  (tmp_path / "study.py").write_text(
      "from arenarl_jax.experiments.agreement import JudgeSpec, PairSet\n"
      "def pair_set(preset):\n  return PairSet(per_bin=1, subtasks=('search',))\n"
      "def judges(preset):\n  return [JudgeSpec('exact', 'rubric'),\n"
      "          JudgeSpec('native', 'http', options={'server': 'native'})]\n")
  monkeypatch.setattr(local_server, "find_native_server", lambda *a: None)
  out = _main(capsys, tmp_path, "--preset=smoke", f"--out={tmp_path}")
  assert "judge native: skipped, no llama-server binary" in out
  assert out.strip().splitlines()[-1].startswith("RESULT pairs=3 judges=1 agreement_exact=1 ")
  assert "skipped_native=1" in out
  rec = json.loads((tmp_path / "results" / "native.json").read_text())
  assert rec["skipped"].startswith("no llama-server binary") and rec["rows"] == []
  assert "| native | - | - | - | skipped: no llama-server binary" in (
      tmp_path / "README.md").read_text()
  out = _main(capsys, tmp_path, "--preset=smoke", f"--out={tmp_path}")
  assert "ran 1 judge(s), found 1" in out  # the rubric judge kept, the skipped one retried
  # A result file made on another pair set is an error naming it, not a silent mix.
  (tmp_path / "study.py").write_text((tmp_path / "study.py").read_text().replace(
      "('search',)", "('compare',)"))
  with pytest.raises(ValueError, match=r"exact\.json: made on pair set"):
    agreement.main([str(tmp_path), "--preset=smoke", f"--out={tmp_path}"])


def test_check_says_whether_every_judge_is_current(tmp_path, capsys):
  # ``python -m arenarl_jax.experiments.run <agreement study> --check``: a judge whose options
  # changed since its result file is stale (named by key), judged again by the command, and
  # ``--tables-only`` refuses to table it.
  from arenarl_jax.experiments import run as run_cli  # pylint: disable=import-outside-toplevel
  study = ("from arenarl_jax.experiments.agreement import JudgeSpec, PairSet\n"
           "from arenarl_jax.experiments.agreement_metrics import Check\n"
           "CHECKS = (Check('noisy above chance', 'noisy', 'agreement', 0.5),)\n"
           "def pair_set(preset):\n  return PairSet(per_bin=1, subtasks=('search',))\n"
           "def judges(preset):\n  return [JudgeSpec('noisy', 'rubric', options={'noise': "
           "{'pointwise_std': STD}})]\n")
  (tmp_path / "study.py").write_text(study.replace("STD", "1.0"))
  args = ["--preset=smoke", f"--out={tmp_path}"]
  assert run_cli.main([str(tmp_path), "--check", *args]) == 1
  assert "missing noisy: no result file" in capsys.readouterr().out
  _main(capsys, tmp_path, *args)
  assert run_cli.main([str(tmp_path), "--check", *args]) == 0
  assert capsys.readouterr().out.strip().endswith("0 missing, 0 stale; 1 checks, 0 not run yet: "
                                                  "current")
  (tmp_path / "study.py").write_text(study.replace("STD", "2.0"))
  assert run_cli.main([str(tmp_path), "--check", *args]) == 1
  assert "stale noisy: options.noise.pointwise_std: 1.0 -> 2.0" in capsys.readouterr().out
  with pytest.raises(SystemExit, match="made with other settings"):
    agreement.main([str(tmp_path), *args, "--tables-only"])
  out = _main(capsys, tmp_path, *args)
  assert "judge noisy: its result file is stale" in out and "ran 1 judge(s)" in out
  assert run_cli.main([str(tmp_path), "--check", *args]) == 0
