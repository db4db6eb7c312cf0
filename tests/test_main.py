"""The CLI and the end-to-end pipeline it runs, on a tiny random model (fast) with the real tokenizer."""
import json
import os
import subprocess
import sys

import numpy as np
import pytest

from arenarl_jax import demo
from arenarl_jax.models import config as model_config
from arenarl_jax.models.embedded import find_smollm2_gguf
from arenarl_jax.models.safetensors_io import export_hf_dir
from arenarl_jax.models.transformer import make_model
from arenarl_jax.tokenizer import Tokenizer

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(ROOT, "configs"))
import quickstart  # noqa: E402  pylint: disable=g-import-not-at-top,wrong-import-position


@pytest.fixture(scope="module")
def tiny_dir(tmp_path_factory):
  """An HF checkpoint directory: a tiny random model with SmolLM2's tokenizer (vocab 49,152)."""
  path = str(tmp_path_factory.mktemp("tiny_hf"))
  cfg = model_config.PRESETS["tiny"]
  export_hf_dir(make_model(cfg, seed=0), cfg, path)
  Tokenizer.from_gguf(find_smollm2_gguf()).save(path)
  return path


def test_pipeline_runs_end_to_end(tiny_dir, tmp_path, capsys):
  config = quickstart.get_config("group_size=4,topology=round_robin")
  with config.unlocked():
    config.model.source = tiny_dir
    config.sampling.max_new_tokens = 8
    config.sampling.cache_len = 512
    config.rl.prompts_per_step = 2
  metrics = demo.run(config, str(tmp_path))
  rows = [json.loads(line) for line in open(tmp_path / "demo.jsonl")]
  b, g = config.rl.prompts_per_step, config.sampling.group_size
  assert len(rows) == b * g
  for p in range(b):
    adv = np.array([r["advantage"] for r in rows if r["prompt"] == p])
    ranks = sorted(r["rank"] for r in rows if r["prompt"] == p)
    assert abs(adv.sum()) < 1e-4 and ranks[0] == 1  # advantages are centred; someone is first
  # Round robin: G(G-1)/2 matches per group, two judge requests each.
  assert metrics["judge_requests"] == b * g * (g - 1)
  assert capsys.readouterr().out.strip().splitlines()[-1].startswith("RESULT stage=demo ")


def test_cli_refuses_a_mode_without_the_agent_pipeline(tmp_path):
  proc = subprocess.run(
      [sys.executable, "-m", "arenarl_jax.main", "--config=configs/quickstart.py",
       f"--workdir={tmp_path}", "--mode=eval", "--config.rl.rollout=fake",
       "--config.sft.steps=0"],
      cwd=ROOT, capture_output=True, text=True, timeout=300, check=False)
  assert proc.returncode != 0
  assert "needs the agent pipeline" in proc.stderr
  # The resolved config is written before anything runs, for reproducibility.
  assert json.load(open(tmp_path / "config.json"))["tournament"]["topology"] == "single_elimination"


def test_cli_rejects_a_config_typo(tmp_path):
  proc = subprocess.run(
      [sys.executable, "-m", "arenarl_jax.main", "--config=configs/quickstart.py",
       f"--workdir={tmp_path}", "--config.sampling.group_sise=8"],
      cwd=ROOT, capture_output=True, text=True, timeout=300, check=False)
  assert proc.returncode != 0 and "group_sise" in proc.stderr
