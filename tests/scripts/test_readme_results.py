"""scripts/readme_results.py: the README's quickstart block comes from a run's output."""
from __future__ import annotations

import importlib.util
import pathlib

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[2]
_spec = importlib.util.spec_from_file_location("readme_results", ROOT / "scripts/readme_results.py")
readme_results = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(readme_results)

OUTPUT = """sft: 240 steps, final loss 1.2345
evaluation at step 0 (the starting policy):
table 0
RESULT stage=train steps=8

final evaluation at RL step 8 (noise-free checker, 100 test tasks):
subtask  valid  vs_ref
direction 0.10 0.00
time: sft=1.0 rl=2.0
RESULT win_rate_vs_sft=0.6100 ci_low=0.5200 ci_high=0.7000 win_rate_vs_reference=0.0000
"""


def test_final_section_is_the_last_evaluation_through_its_result_line():
  section = readme_results.final_section(OUTPUT)
  lines = section.splitlines()
  assert lines[0].startswith("final evaluation at RL step 8")
  assert lines[-1] == ("RESULT win_rate_vs_sft=0.6100 ci_low=0.5200 ci_high=0.7000 "
                       "win_rate_vs_reference=0.0000")
  assert "table 0" not in section and "time: sft=1.0 rl=2.0" in section


def test_an_incomplete_run_is_refused():
  with pytest.raises(ValueError, match="no final evaluation"):
    readme_results.final_section(OUTPUT.split("final evaluation")[0])


def test_replace_block_is_idempotent_and_keeps_the_rest(tmp_path):
  readme = tmp_path / "README.md"
  readme.write_text(f"# top\n{readme_results.BEGIN}\nold\n{readme_results.END}\nrest\n")
  readme_results.main(["--log", str(_write(tmp_path, OUTPUT)), "--readme", str(readme)])
  once = readme.read_text()
  readme_results.main(["--log", str(_write(tmp_path, OUTPUT)), "--readme", str(readme)])
  twice = readme.read_text()
  assert once.startswith("# top\n") and once.endswith("\nrest\n") and "old" not in once
  assert "win_rate_vs_sft=0.6100" in once
  # A saved log's run was not timed here: its header claims no load average or wall time.
  assert "its saved output" in once.splitlines()[2] and "load average" not in once
  assert once.splitlines()[3:] == twice.splitlines()[3:]  # all but the date line


def test_missing_markers_name_them():
  with pytest.raises(ValueError, match="quickstart-output:begin"):
    readme_results.replace_block("# no markers\n", "x")


def test_the_readme_shows_a_quickstart_result_on_its_first_screen():
  text = (ROOT / "README.md").read_text()
  lines = text.splitlines()
  begin = lines.index(readme_results.BEGIN)
  end = lines.index(readme_results.END)
  assert begin < 60, "the quickstart output must be on the README's first screen"
  block = "\n".join(lines[begin:end])
  assert "RESULT win_rate_vs_sft=" in block and "final evaluation at RL step" in block
  assert "scripts/readme_results.py" in text


def _write(tmp_path, text):
  path = tmp_path / "out.txt"
  path.write_text(text)
  return path


def test_run_refuses_a_workdir_that_holds_a_run(tmp_path):
  """--run in a used workdir would resume and print a resumed run's times: refused, nothing
  deleted, README untouched."""
  used = tmp_path / "quickstart"
  used.mkdir()
  (used / "checkpoint").write_text("x")
  readme = tmp_path / "README.md"
  readme.write_text("unchanged")
  with pytest.raises(SystemExit, match="already holds a run"):
    readme_results.main(["--run", f"--workdir={used}", f"--readme={readme}"])
  assert (used / "checkpoint").read_text() == "x" and readme.read_text() == "unchanged"
