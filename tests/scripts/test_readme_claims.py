"""The README's claims tables (``scripts/readme_claims.py``): the committed block is what the
experiments' CSVs say, and the rendering follows the verdict rule on hand-built CSVs."""
import csv
import importlib.util
import json
import pathlib
import re

import pytest

from arenarl_jax.experiments import tables

ROOT = pathlib.Path(__file__).resolve().parents[2]
_spec = importlib.util.spec_from_file_location("readme_claims", ROOT / "scripts/readme_claims.py")
readme_claims = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(readme_claims)


def test_the_readme_block_matches_the_experiments_csvs(capsys):
  assert readme_claims.main(["--check"]) == 0, capsys.readouterr().out
  block, rows, found = readme_claims.render()
  assert readme_claims.BEGIN + "\n" + block + "\n" + readme_claims.END in (
      ROOT / "README.md").read_text(encoding="utf-8")
  assert found >= 1 and rows >= 1  # judge_agreement's summary.csv is committed
  assert capsys.readouterr().out.strip().endswith(f"RESULT readme_claims={rows} "
                                                  f"studies_run={found}")


def _write(path, header, rows):
  path.parent.mkdir(parents=True, exist_ok=True)
  with open(path, "w", encoding="utf-8", newline="") as f:
    writer = csv.DictWriter(f, fieldnames=header)
    writer.writeheader()
    writer.writerows(rows)


TOPOLOGY = {"study": "topologies", "outcome": "met", "arm": "round_robin", "versus": "anchor",
            "direction": 1, "paper": "arXiv 2601.06487, topology ablation: 32.9 vs 27.8",
            "command": "python -m arenarl_jax.experiments.run experiments/topologies"}


def _judge(root, name, kind, options=None):
  path = root / "experiments" / "judge_agreement" / "results" / f"{name}.json"
  path.parent.mkdir(parents=True, exist_ok=True)
  path.write_text(json.dumps({"judge": name, "kind": kind, "options": options or {}}))


def test_rows_follow_the_csvs_and_the_verdict_rule(tmp_path):
  _write(tmp_path / "experiments" / "topologies" / "claims.csv", tables.CLAIM_KEYS, [
      {**TOPOLOGY, "claim": "round_robin above anchor", "gap": "0.0200", "low": "0.0050",
       "high": "0.0400", "seeds": 3, "tasks": 250, "verdict": "reproduced"},
      {**TOPOLOGY, "claim": "anchor below round_robin", "direction": -1, "gap": "0.0200",
       "low": "0.0050", "high": "0.0400", "seeds": 3, "tasks": 250, "verdict": "contradicted"},
      {**TOPOLOGY, "claim": "swiss above anchor", "verdict": "not run yet"},
      {**TOPOLOGY, "claim": "double_elimination above anchor", "gap": "0.0200", "low": "0.0050",
       "high": "0.0400", "seeds": 3, "tasks": 250, "verdict": "stale",
       "stale_runs": "anchor_s0 double_elimination_s0"}])
  header = ["judge", "bin", "pairs", "agreement", "agreement_low", "agreement_high"]
  _write(tmp_path / "experiments" / "judge_agreement" / "summary.csv", header, [
      {"judge": "exact", "bin": "all", "pairs": 18, "agreement": 1.0, "agreement_low": 1.0,
       "agreement_high": 1.0},
      {"judge": "good", "bin": "small", "pairs": 6, "agreement": 0.1, "agreement_low": 0.0,
       "agreement_high": 0.2},  # only the "all" bin makes a row
      {"judge": "good", "bin": "all", "pairs": 18, "agreement": 0.8, "agreement_low": 0.6,
       "agreement_high": 0.9},
      {"judge": "noisy", "bin": "all", "pairs": 18, "agreement": 0.9, "agreement_low": 0.8,
       "agreement_high": 1.0},
      {"judge": "bad", "bin": "all", "pairs": 18, "agreement": 0.3, "agreement_low": 0.1,
       "agreement_high": 0.45},
      {"judge": "even", "bin": "all", "pairs": 18, "agreement": 0.5, "agreement_low": 0.5,
       "agreement_high": 0.7}])
  _judge(tmp_path, "exact", "rubric")
  _judge(tmp_path, "noisy", "rubric", {"noise": {"pointwise_std": 1.0, "saturate_pairwise": False}})
  _judge(tmp_path, "good", "flax")
  block, rows, found = readme_claims.render(tmp_path)
  assert (rows, found) == (9, 2)
  lines = block.splitlines()
  assert ("| round_robin above anchor (met) | arXiv 2601.06487, topology ablation: 32.9 vs 27.8 | "
          "+0.020 [+0.005, +0.040] | 3 x 250 | **reproduced** | `python -m "
          "arenarl_jax.experiments.run experiments/topologies` |") in lines
  # The same interval against the paper's direction -1: the rule, not the CSV, says so.
  assert any(l.startswith("| anchor below round_robin (met) |") and "**contradicted**" in l
             for l in lines)
  assert any(l.startswith("| swiss above anchor (met) |") and "| - | - | **not run yet** |" in l
             for l in lines)
  assert any(l.startswith("| double_elimination above anchor (met) |") and "**stale**" in l
             for l in lines)
  verdicts = {l.split(" agrees")[0][2:]: l.split("**")[1] for l in lines if " agrees " in l}
  # Agreement minus chance: [+0.1, +0.4] above 0, [-0.4, -0.05] below, [0, +0.2] touches 0.
  assert verdicts == {"good": "reproduced", "bad": "contradicted", "even": "cannot tell"}
  # The rubric judges: the reference and the control, after the model judges, no verdict.
  judge_lines = [l for l in lines if l.startswith(("| exact", "| good", "| noisy", "| bad",
                                                   "| even"))]
  assert [l.split()[1].rstrip(",") for l in judge_lines] == [
      "good", "bad", "even", "exact", "noisy"]
  assert "| reference, no verdict |" in judge_lines[3] and "**" not in judge_lines[3]
  assert "| control, no verdict |" in judge_lines[4] and "**" not in judge_lines[4]
  assert "with the noise-free checker on 18 travel pairs" in block
  # The four studies without a CSV: one row each that names its command.
  assert block.count("| not run yet | - | - | - | - |") == 4
  assert "`python -m arenarl_jax.experiments.run experiments/group_size` |" in block


@pytest.mark.parametrize("edit, message", [
    ({"verdict": "reproduced"}, "reads 'reproduced', but its interval"),  # the interval holds 0
    ({"verdict": "stale"}, "'stale' names no stale run"),
    ({"verdict": "not run yet"}, "'not run yet' with a gap")])
def test_a_hand_edited_verdict_fails(tmp_path, monkeypatch, capsys, edit, message):
  row = {**TOPOLOGY, "claim": "swiss above anchor", "gap": "0.0010", "low": "-0.0050",
         "high": "0.0070", "seeds": 3, "tasks": 250, "verdict": "cannot tell"}
  path = tmp_path / "experiments" / "topologies" / "claims.csv"
  _write(path, tables.CLAIM_KEYS, [row])
  assert "**cannot tell**" in readme_claims.render(tmp_path)[0]
  _write(path, tables.CLAIM_KEYS, [{**row, **edit}])
  with pytest.raises(ValueError, match=re.escape(message)):
    readme_claims.render(tmp_path)
  (tmp_path / "README.md").write_text(f"{readme_claims.BEGIN}\n{readme_claims.END}\n")
  monkeypatch.setattr(readme_claims, "ROOT", tmp_path)
  assert readme_claims.main(["--check"]) == 1
  assert message in capsys.readouterr().out


def test_the_block_needs_its_markers_once():
  text = f"a\n{readme_claims.BEGIN}\nold\n{readme_claims.END}\nb\n"
  assert readme_claims.replace_block(text, "new") == (
      f"a\n{readme_claims.BEGIN}\nnew\n{readme_claims.END}\nb\n")
  with pytest.raises(ValueError, match="markers"):
    readme_claims.replace_block("no markers", "new")
