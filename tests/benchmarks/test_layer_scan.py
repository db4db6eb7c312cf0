"""benchmarks/layer_scan.py's smoke mode: the scanned prototype compiles from abstract shapes and,
on random weights, gives the unrolled model's loss and gradients; one RESULT line."""
from __future__ import annotations

import os
import sys

BENCH = os.path.join(os.path.dirname(os.path.dirname(os.path.dirname(__file__))), "benchmarks")


def test_smoke_mode_matches_the_unrolled_model(capsys):
  sys.path.insert(0, BENCH)
  try:
    import layer_scan  # pylint: disable=g-import-not-at-top
    out = layer_scan.main(["--preset", "tiny", "--tokens", "16"])
  finally:
    sys.path.remove(BENCH)
  lines = capsys.readouterr().out.strip().splitlines()
  assert lines[-1].startswith("RESULT ")
  keys = dict(part.split("=", 1) for part in lines[-1].split()[1:])
  assert float(keys["unrolled_compile_s"]) > 0 and float(keys["scan_compile_s"]) > 0
  assert out["max_diff"] < 1e-5
