"""benchmarks/logprobs_memory.py's smoke mode end to end (tiny model; the default and baseline
variants in fresh processes) and its one-chunk check: with the per-chunk checkpoint, extra chunks
add no vocabulary-sized memory; without it, each keeps its logits."""
from __future__ import annotations


def test_smoke_mode_and_one_chunk_check(capsys):
  # benchmarks/logprobs_memory.py (tests/conftest.py puts benchmarks/ on sys.path)
  import logprobs_memory  # pylint: disable=g-import-not-at-top
  out = logprobs_memory.main(["--model", "tiny", "--batch", "2", "--tokens", "64",
                              "--variants", ""])
  lines = capsys.readouterr().out.strip().splitlines()
  assert lines[-1].startswith("RESULT ")
  keys = dict(part.split("=", 1) for part in lines[-1].split()[1:])
  assert set(out["results"]) == {logprobs_memory.DEFAULT, logprobs_memory.BASELINE}
  for key in ("peak_rss_gb", "baseline_peak_rss_gb", "xla_gb", "baseline_xla_gb"):
    assert 0 < float(keys[key]) < 4, (key, keys[key])
  # One chunk's [2, 64, 24576] float32 logits; the checkpointed pass adds none per extra chunk.
  assert out["one_chunk"] == 2 * 64 * 24576 * 4
  assert out["growth"] < out["one_chunk"] / 4
  assert out["growth_off"] >= 2 * out["one_chunk"]
