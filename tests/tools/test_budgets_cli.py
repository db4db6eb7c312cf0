"""tools/budgets.py: a config's sampling limits beside the expert's measured needs."""
import os

from arenarl_jax.data import budgets
from arenarl_jax.tools import budgets as budgets_cli

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def test_main_prints_the_table_the_misfits_and_the_result(monkeypatch, capsys):
  measured = [budgets.Budget("search", 50, turn_p99=30, turn_max=31, max_tool_turns=1,
                             max_conversation=200),
              budgets.Budget("plan", 40, turn_p99=10**6, turn_max=10**6, max_tool_turns=1,
                             max_conversation=100)]
  monkeypatch.setattr(budgets_cli, "measure_config", lambda config, per_subtask: measured)
  budgets_cli.main([f"--config={os.path.join(ROOT, 'configs', 'quickstart.py')}"])
  out = capsys.readouterr().out.splitlines()
  assert out[0].startswith("| subtask | tasks |")
  assert out[2] == "| search | 50 | 30 (31) | 1 | 200 |"
  assert out[4].startswith("| limits | | max_new_tokens=")
  assert out[5].startswith("plan: the expert's 99th-percentile turn is 1000000 tokens")
  assert len(out) == 7  # the one misfit: search fits every limit
  assert out[-1] == "RESULT fits=0 turn_p99=1000000 tool_turns=1 conversation=200"
