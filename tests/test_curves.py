"""The run's curves (curves.py): the series each panel draws, read from a run's files."""
import json

from arenarl_jax import curves


def _write(path, rows):
  path.parent.mkdir(parents=True, exist_ok=True)
  path.write_text("".join(json.dumps(r) + "\n" for r in rows))


def test_series_and_plot(tmp_path):
  _write(tmp_path / "metrics.jsonl", [
      {"step": 1, "verifier/met_rate_greedy": 0.2, "verifier/met_rate_sampled": 0.1},
      {"step": 2, "verifier/met_rate_greedy": 0.3}])
  est = lambda v: {"value": v, "low": v - 0.1, "high": v + 0.05}
  _write(tmp_path / "eval" / "summary.jsonl", [
      {"step": 0, "success": {"overall": {"met": est(0.4), "content_met": est(0.2)}}},
      {"step": 2, "success": {"overall": {"met": est(0.5), "content_met": None}}}])
  assert curves.series(str(tmp_path), "metrics.jsonl", "verifier/met_rate_greedy") == (
      [1.0, 2.0], [0.2, 0.3], [0.2, 0.3], [0.2, 0.3])
  assert curves.series(str(tmp_path), "metrics.jsonl", "verifier/met_rate_sampled")[:2] == (
      [1.0], [0.1])
  xs, ys, lo, hi = curves.series(str(tmp_path), "eval/summary.jsonl", "met")
  assert (xs, ys) == ([0.0, 2.0], [0.4, 0.5])
  assert [round(v, 3) for v in lo] == [0.3, 0.4] and [round(v, 3) for v in hi] == [0.45, 0.55]
  assert curves.series(str(tmp_path), "eval/summary.jsonl", "content_met")[0] == [0.0]
  assert curves.series(str(tmp_path), "missing.jsonl", "x") == ([], [], [], [])
  path = curves.plot(str(tmp_path))
  assert path and open(path, "rb").read(8) == b"\x89PNG\r\n\x1a\n"
  assert curves.plot(str(tmp_path / "empty")) is None
