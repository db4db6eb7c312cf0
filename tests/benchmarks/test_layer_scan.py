"""benchmarks/layer_scan.py's smoke mode: the scanned prototype compiles from abstract shapes and,
on random weights, gives the unrolled model's loss and gradients; one RESULT line."""
from __future__ import annotations


def test_smoke_mode_matches_the_unrolled_model(capsys):
  # benchmarks/layer_scan.py (tests/conftest.py puts benchmarks/ on sys.path)
  import layer_scan  # pylint: disable=g-import-not-at-top
  out = layer_scan.main(["--preset", "tiny", "--tokens", "16"])
  lines = capsys.readouterr().out.strip().splitlines()
  assert lines[-1].startswith("RESULT ")
  keys = dict(part.split("=", 1) for part in lines[-1].split()[1:])
  assert float(keys["unrolled_compile_s"]) > 0 and float(keys["scan_compile_s"]) > 0
  assert out["max_diff"] < 1e-5
