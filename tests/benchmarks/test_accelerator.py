"""benchmarks/accelerator.py --dry_run end to end on the CPU backend (tiny sizes): the pytest
step, the ceiling and every model's forward and sampler fractions in one RESULT line."""
from __future__ import annotations

import math

import pytest

# benchmarks/accelerator.py and benchmarks/accelerator_measure.py, importable by name: the suite's
# conftest.py puts benchmarks/ on sys.path.


def test_dry_run_end_to_end(capsys, monkeypatch, smollm2_cache_dir):
  monkeypatch.delenv("JAX_PLATFORMS", raising=False)  # the dry run sets it; restored after
  import accelerator  # pylint: disable=g-import-not-at-top
  # The train step's dry run (benchmarks/accelerator.py --dry_run --train=on) is left out of
  # the suite for time; the test budget covers the tests, forward and sampler.
  # So is the main job's RL step (a whole smoke run; its reading is tested below).
  result = accelerator.main(["--dry_run", "--train=off", "--rl_step=off",
                             f"--cache_dir={smollm2_cache_dir}"])
  out = capsys.readouterr().out
  lines = out.strip().splitlines()
  assert lines[-1].startswith("RESULT ")
  keys = dict(part.split("=", 1) for part in lines[-1].split()[1:])
  assert keys["backend"] == "cpu" and keys["dry_run"] == "1"
  assert result["tests_passed"] == 1 and result["tests_failed"] == 0, out
  for prefix in ("smollm2", "qwen3_06b"):
    for part in ("forward", "sampler"):
      frac = float(keys[f"{prefix}_{part}_frac"])
      assert 0 < frac < 10, (prefix, part, frac)  # a number, of a sane order
      assert float(keys[f"{prefix}_{part}_tok_s"]) > 0
    assert float(keys[f"{prefix}_decode_step_ms"]) > 0
    # No upper bound: the dry run times one decode step and one 1 MiB read once each, on a CPU
    # the other worker shares, so their ratio swings (25 was seen under load).
    hbm_frac = float(keys[f"{prefix}_decode_hbm_frac"])
    assert hbm_frac > 0 and math.isfinite(hbm_frac)
  assert float(keys["ceiling_tflops"]) > 0 and float(keys["bandwidth_gb_s"]) > 0


def test_rl_step_times_are_the_last_steps(tmp_path):
  import accelerator  # pylint: disable=g-import-not-at-top
  path = tmp_path / "metrics.jsonl"
  path.write_text('{"step": 0, "eval/met": 0.1}\n'
                  '{"step": 1, "time/step_s": 9.0, "time/sample_s": 4.0, "time/update_s": 5.0}\n'
                  '{"step": 2, "time/step_s": 2.5, "time/sample_s": 1.25, "time/update_s": 1.0}\n')
  assert accelerator.step_times(str(path)) == {"rl_step_s": 2.5, "rl_sample_s": 1.25,
                                                "rl_update_s": 1.0}
  path.write_text('{"step": 0, "eval/met": 0.1}\n')
  with pytest.raises(ValueError, match="no row with time/step_s"):
    accelerator.step_times(str(path))


def test_decode_bytes_by_hand():
  import accelerator_measure as measure  # pylint: disable=g-import-not-at-top
  from arenarl_jax.models.config import PRESETS
  cfg = PRESETS["tiny"]  # float32: 4 bytes; 2 layers, 2 KV heads of 16
  assert measure.decode_bytes(cfg, rows=3, cache_len=10) == (
      4 * cfg.num_params() + 3 * 10 * 2 * 2 * 2 * 16 * 4)


def test_flop_counts_by_hand():
  import accelerator_measure as measure  # pylint: disable=g-import-not-at-top
  from arenarl_jax.models.config import PRESETS
  cfg = PRESETS["qwen3_0_6b"]
  # Qwen3-0.6B: 28 x (1024*128*(2*16 + 2*8) + 3*1024*3072) + 151936*1024 weights in matmuls.
  assert measure.matmul_params(cfg) == 28 * (1024 * 128 * 48 + 3 * 1024 * 3072) + 151936 * 1024
  # Plus norms (2 per layer + final, 2 qk-norms per layer) the tied model has 596M parameters.
  assert cfg.num_params() == measure.matmul_params(cfg) + 28 * (2 * 1024 + 2 * 128) + 1024
  one = measure.forward_flops(cfg, 1, 1)
  assert one == 2 * measure.matmul_params(cfg) + 4 * 28 * 16 * 128
