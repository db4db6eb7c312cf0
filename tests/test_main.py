"""The CLI and the end-to-end pipeline it runs, on a tiny random model (fast) with the real tokenizer."""
import json
import os
import subprocess
import sys

import numpy as np
import pytest

from arenarl_jax import pipeline
from arenarl_jax.models import config as model_config
from arenarl_jax.models.embedded import find_smollm2_gguf
from arenarl_jax.models.safetensors_io import export_hf_dir
from arenarl_jax.models.transformer import make_model
from arenarl_jax.text.tokenizer import Tokenizer

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


def test_run_mode_rejects_an_unknown_mode(tmp_path):
  with pytest.raises(ValueError, match="unknown mode 'demo'"):
    pipeline.run_mode("demo", quickstart.get_config("smoke"), str(tmp_path))


def test_cli_rejects_a_config_typo(tmp_path):
  proc = subprocess.run(
      [sys.executable, "-m", "arenarl_jax.main", "--config=configs/quickstart.py",
       f"--workdir={tmp_path}", "--config.sampling.group_sise=8"],
      cwd=ROOT, capture_output=True, text=True, timeout=300, check=False)
  assert proc.returncode != 0 and "group_sise" in proc.stderr
