"""The CLI's own checks (the pipeline it runs is tested end to end in test_pipeline_smoke.py)."""
import os
import subprocess
import sys

import pytest

from arenarl_jax import main, pipeline

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(ROOT, "configs"))
import quickstart  # noqa: E402  pylint: disable=g-import-not-at-top,wrong-import-position


def test_run_mode_rejects_an_unknown_mode(tmp_path):
  with pytest.raises(ValueError, match="unknown mode 'demo'"):
    pipeline.run_mode("demo", quickstart.get_config("smoke"), str(tmp_path))


def test_cli_rejects_a_config_typo(tmp_path):
  proc = subprocess.run(
      [sys.executable, "-m", "arenarl_jax.main", "--config=configs/quickstart.py",
       f"--workdir={tmp_path}", "--config.sampling.group_sise=8"],
      cwd=ROOT, capture_output=True, text=True, timeout=300, check=False)
  assert proc.returncode != 0 and "group_sise" in proc.stderr


def test_the_flags_parse_to_a_locked_config_workdir_mode_and_verbosity(tmp_path):
  config = os.path.join(ROOT, "configs", "quickstart.py")
  args = main.parse_args([f"--config={config}:smoke", f"--workdir={tmp_path}", "--mode=eval",
                          "--config.sampling.group_size=8", "-v", "1"])
  assert args.config.is_locked and args.config.sampling.group_size == 8
  assert (args.workdir, args.mode, args.verbosity) == (str(tmp_path), "eval", 1)
  args = main.parse_args(["--config", config, "--workdir", str(tmp_path)])
  assert (args.mode, args.verbosity) == ("pipeline", None)
  for argv in ([f"--config={config}", f"--workdir={tmp_path}", "--mode=demo"],
               [f"--config={config}", f"--workdir={tmp_path}", "--workdri=x"],
               [f"--config={config}"]):
    with pytest.raises(SystemExit):
      main.parse_args(argv)
