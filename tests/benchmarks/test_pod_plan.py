"""benchmarks/pod_plan.py --smoke: the tiny model's plan on 8 fake CPU devices (2 hosts of 4,
mesh fsdp 4 x tensor 2), its RESULT line, and the parameter bytes per device checked against the
partition rules by hand."""
from __future__ import annotations

import os
import subprocess
import sys

from arenarl_jax.testing import xla_flags

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def _keys(line: str) -> dict[str, str]:
  return dict(part.split("=", 1) for part in line.split()[1:])


def test_smoke_plan_result_line_and_parameter_bytes():
  env = dict(os.environ, XLA_FLAGS=xla_flags.with_devices(8), JAX_PLATFORMS="cpu")
  proc = subprocess.run([sys.executable, os.path.join(ROOT, "benchmarks", "pod_plan.py"),
                         "--smoke"], cwd=ROOT, env=env, capture_output=True, text=True,
                        timeout=600, check=False)
  assert proc.returncode == 0, proc.stderr[-3000:]
  lines = proc.stdout.strip().splitlines()
  assert lines[-1].startswith("RESULT "), proc.stdout[-2000:]
  result = _keys(lines[-1])
  assert list(result) == ["chip", "train_gb", "sample_gb", "param_gb_per_device", "hbm_gb",
                          "target", "train_rows", "train_len", "cache_len",
                          "sample_rows_per_host", "decode_temp_gb", "decode_temp_per_cache"]
  # The smoke workload (pod_plan.SMOKE): 16 rows x 128 tokens per minibatch (8 prompts x G = 2),
  # 128-slot caches, 4 prompts x G = 2 sampling rows per host.
  assert [int(result[k]) for k in ("train_rows", "train_len", "cache_len",
                                   "sample_rows_per_host")] == [16, 128, 128, 8]
  assert float(result["decode_temp_per_cache"]) > 0
  assert result["chip"] == "v5p" and result["target"] == "cpu_estimate"
  for key in ("train_gb", "sample_gb", "param_gb_per_device", "hbm_gb"):
    assert float(result[key]) > 0, (key, result)
  assert float(result["hbm_gb"]) == 95

  params = _keys(next(line for line in lines if line.startswith("PARAMS ")))
  total, replicated = int(params["total_bytes"]), int(params["replicated_bytes"])
  tensor, fsdp = int(params["tensor"]), int(params["fsdp"])
  assert (tensor, fsdp) == (2, 4)
  # The tiny preset (float32): embedding 49152 x 64, 2 blocks of q/k/v/o, the MLP and 2 norms,
  # the final norm; the norms (5 x 64 floats) are the only replicated parameters.
  blocks = 2 * (64 * 4 * 16 + 2 * 64 * 2 * 16 + 4 * 16 * 64 + 3 * 64 * 128 + 2 * 64)
  assert total == 4 * (49152 * 64 + blocks + 64)
  assert replicated == 4 * 5 * 64
  # Sampling layout: every split parameter over 'tensor' only, the norms whole on each device,
  # in bfloat16 (the config computes in bfloat16: the sampler's copy is narrowed, 2 bytes each).
  assert int(params["sample_bytes_per_device"]) == ((total - replicated) // tensor + replicated) // 2
  # Training layout: at least total / (fsdp x tensor), and less than the sampling layout's.
  train = int(params["train_bytes_per_device"])
  assert total // (fsdp * tensor) <= train < int(params["sample_bytes_per_device"])
  assert abs(float(result["param_gb_per_device"]) - train / 1e9) < 1e-5
  assert float(result["sample_gb"]) * 1e9 > int(params["sample_bytes_per_device"])
