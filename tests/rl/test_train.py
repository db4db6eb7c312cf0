"""The RL loop on a fake rollout: clipping acts, checkpoints, kill -9 / SIGTERM resume, two hosts.

One uninterrupted 6-step run (2 epochs of 3 steps) is the reference for every other run.
"""
import os
import socket
import subprocess
import sys

import jax
import numpy as np
import pytest

import fake_run  # tests/rl/fake_run.py
from arenarl_jax import metrics as metrics_lib
from arenarl_jax.testing import xla_flags

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))


def _params(state):
  return {"/".join(str(getattr(k, "key", k)) for k in path): np.asarray(x)
          for path, x in jax.tree_util.tree_leaves_with_path(jax.device_get(state.params))}


def _run_in_process(workdir, **kill):
  state = fake_run.run(fake_run.make_config(), str(workdir), fake_run.make_rollout(**kill))
  return state


def _script(workdir, *args, devices=8):
  env = dict(os.environ, PYTHONPATH=ROOT, XLA_FLAGS=xla_flags.with_devices(devices))
  return subprocess.Popen([sys.executable, os.path.join(HERE, "fake_run.py"), str(workdir),
                           *map(str, args)], env=env, stdout=subprocess.PIPE,
                          stderr=subprocess.STDOUT, text=True)


@pytest.fixture(scope="module")
def reference(tmp_path_factory):
  workdir = tmp_path_factory.mktemp("uninterrupted")
  state = _run_in_process(workdir)
  return workdir, _params(state), metrics_lib.read_jsonl(str(workdir / "metrics.jsonl"))


def test_tiny_run_with_minibatches_clips_logs_and_keeps_n_checkpoints(reference):
  workdir, params, rows = reference
  assert [r["step"] for r in rows] == [1, 2, 3, 4, 5, 6]
  assert [r["epoch"] for r in rows] == [0, 0, 0, 1, 1, 1]
  assert [r["optimizer_step"] for r in rows] == [2, 4, 6, 8, 10, 12]  # 2 minibatches per rollout
  assert rows[0]["ratio_max"] == pytest.approx(1.0)  # the first update is on-policy
  assert max(r["ratio_max"] for r in rows[1:]) > 1.0
  assert max(r["clip_frac_low"] + r["clip_frac_high"] for r in rows) > 0.0
  assert all(np.isfinite(r["loss"]) and r["entropy"] > 0 for r in rows)
  assert sorted(os.listdir(workdir / "checkpoints")) == ["5", "6"]  # keep = 2
  assert any(name.startswith("events.out.tfevents") for name in os.listdir(workdir / "tb"))


def test_sigkill_at_an_epoch_boundary_then_sigterm_then_resume_match_an_uninterrupted_run(
    reference, tmp_path):
  _, want_params, want_rows = reference
  # Killed when asked for step index 3: right after the last step of epoch 0 was saved.
  proc = _script(tmp_path, "--kill_at", 3)
  out = proc.communicate(timeout=300)[0]
  assert proc.returncode == -9, out[-2000:]
  assert sorted(os.listdir(tmp_path / "checkpoints")) == ["2", "3"]
  # Resumed in epoch 1; SIGTERM during step index 4: that step finishes, is saved, run returns.
  state = _run_in_process(tmp_path, term_at=4)
  assert int(state.step) == 10 and sorted(os.listdir(tmp_path / "checkpoints")) == ["4", "5"]
  state = _run_in_process(tmp_path)
  got = _params(state)
  for key in want_params:
    np.testing.assert_array_equal(got[key], want_params[key], err_msg=key)
  rows = metrics_lib.read_jsonl(str(tmp_path / "metrics.jsonl"))
  assert metrics_lib.without_timings(rows) == metrics_lib.without_timings(want_rows)


def test_two_processes_joined_by_jax_distributed_equal_one_process(reference, tmp_path):
  _, want_params, _ = reference
  with socket.socket() as s:
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
  procs = [_script(tmp_path, "--procs", 2, "--proc", i, "--port", port, devices=4)
           for i in range(2)]
  outs = [p.communicate(timeout=300)[0] for p in procs]
  for p, out in zip(procs, outs):
    assert p.returncode == 0, out[-3000:]
  got = np.load(tmp_path / "params_12.npz")
  for key in want_params:
    np.testing.assert_allclose(got[key], want_params[key], atol=1e-6, err_msg=key)
