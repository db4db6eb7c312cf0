"""The configs beyond the quickstart: their ``:smoke`` pipelines (in process, on the suite's 8 fake
devices), SmolLM2's real checkpoint through smollm2_travel.py, the research config's valid rates
before and after, and the Qwen3-8B pod config: abstract model, shardings on the pod's mesh and on
8 fake devices, its HF-directory loading path, its judge's key rule and its smoke on a
data x fsdp x tensor mesh; then benchmarks/rl_step.py from that smoke run's policy."""
import dataclasses
import json
import math
import os
import sys
import types

import jax
import numpy as np
import pytest
from flax import nnx
from jax.sharding import AbstractMesh

from arenarl_jax.models.settings import ModelSettings
from arenarl_jax.sft import policy as policy_lib
from arenarl_jax import sharding
from arenarl_jax import pipeline
from arenarl_jax.models import config as model_config
from arenarl_jax.models import gguf_io, loading
from arenarl_jax.models.safetensors_io import export_hf_dir, read_config
from arenarl_jax.models.transformer import make_model

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(ROOT, "configs"))
import qwen3_8b_pod  # noqa: E402  pylint: disable=g-import-not-at-top,wrong-import-position
import research_quickstart  # noqa: E402  pylint: disable=g-import-not-at-top,wrong-import-position
import smollm2_travel  # noqa: E402  pylint: disable=g-import-not-at-top,wrong-import-position


@pytest.fixture(scope="module")
def data_dir(dataset_dir):
  """The run's dataset cache (each environment's dataset is built once)."""
  return dataset_dir


def smoke(module, data, **overrides):
  config = module.get_config("smoke")
  with config.unlocked():
    config.data.dir = data
    config.metrics.tensorboard = False
    for dotted, value in overrides.items():
      section, key = dotted.split("__")
      config[section][key] = value
  return config


def result_of(out: str) -> dict[str, float]:
  line = out.strip().splitlines()[-1]
  assert line.startswith("RESULT "), line
  return {k: float(v) for k, v in (p.split("=") for p in line.split()[1:])}


def read_jsonl(path):
  return [json.loads(line) for line in open(path)]


def check_run_outputs(work, final_step):
  """Per-step metrics with the diagnostics, eval and rollout logs with match logs and scores."""
  rows = read_jsonl(os.path.join(work, "metrics.jsonl"))
  for key in ("time/judge_calls_s", "judge/order_flip_rate", "judge/cache_hits",
              "answer_chars_win_corr", "advantage/zero_groups",
              "rollout/tool_calls_per_trajectory"):
    assert key in rows[-1], key
  assert sorted(os.listdir(os.path.join(work, "eval"))) == [
      "eval_00000000.jsonl", f"eval_{final_step:08d}.jsonl", "summary.jsonl"]
  evals = read_jsonl(os.path.join(work, "eval", f"eval_{final_step:08d}.jsonl"))
  match = evals[1]["matches"][0]
  assert match["ok"] and set(match["detail"]["dimensions"]["p"]) == {"forward", "backward"}
  groups = read_jsonl(os.path.join(work, "rollouts", f"step_{final_step:08d}.jsonl"))
  assert groups and all(g["kind"] == "group" and g["matches"] for g in groups)
  assert "dimensions" in groups[0]["matches"][0]["detail"]
  assert len(groups[0]["trajectories"]) == len(groups[0]["ranks"])


def assert_on_run_mesh(model, config):
  """Every parameter of ``model`` in its partition rule's sharding on the run's mesh, and some of
  them split (not all replicated)."""
  mesh = sharding.make_mesh(**config.mesh)
  split = 0
  for path, var in nnx.to_flat_state(nnx.state(model)):
    array = var.get_value()
    assert array.sharding == sharding.sharding_for(path, array.shape, mesh), path
    split += not array.sharding.is_fully_replicated
  assert split > 0


# ------------------------------------------------------------------------------- smollm2_travel
def test_smollm2_travel_loads_the_real_checkpoint_through_the_config(tmp_path, monkeypatch,
                                                                    smollm2):
  stores = []

  def counted(*args, **kwargs):
    stores.append(opened(*args, **kwargs))
    return stores[-1]

  opened = gguf_io.open_gguf
  monkeypatch.setattr(gguf_io, "open_gguf", counted)
  config = smollm2_travel.get_config()
  assert config.model.source == "smollm2" and not config.model.init.preset
  with config.unlocked():
    config.model.keep_layers = 2
    config.model.cache_dir = str(tmp_path / "params")
    # A mesh that splits the parameters (the config's own puts every fake device on 'data' and
    # would hold 8 replicas of all 30 layers before the cut).
    config.mesh.update(dict(data=1, fsdp=2, tensor=4))
  policy = pipeline.make_policy(config, str(tmp_path))
  assert policy.cfg.n_layers == 2 and policy.cfg.vocab_size == 49_152
  # Converted now (a fresh parameter cache): only the 2 kept blocks of 30 were read.
  assert len(stores) == 1 and stores[0].bytes_read == 4 * policy.cfg.num_params()
  assert policy.tokenizer.vocab_size == 49_152  # SmolLM2's own, from the GGUF
  assert policy.tokenizer.encode("<|im_end|>") == [policy.tokenizer.eos_id]
  _, full = smollm2  # the whole model, from the run's shared cache (never the user's)
  kept = nnx.to_pure_dict(nnx.state(policy.model))
  ref = nnx.to_pure_dict(nnx.state(full))
  assert sorted(kept["layers"]) == [0, 1]
  np.testing.assert_array_equal(np.asarray(kept["embed"]), np.asarray(ref["embed"]))
  np.testing.assert_array_equal(np.asarray(kept["layers"][1]["attn"]["q"]["kernel"]),
                                np.asarray(ref["layers"][1]["attn"]["q"]["kernel"]))
  # Loaded into the run's mesh, each parameter in its partition rule's sharding: what the
  # trainers place parameters in, so they take these as they are.
  assert_on_run_mesh(policy.model, config)
  with config.unlocked():
    config.model.keep_layers = 31
  with pytest.raises(ValueError, match="model.keep_layers=31"):
    pipeline.make_policy(config, str(tmp_path))


def test_smollm2_travel_smoke_pipeline(tmp_path, data_dir, capsys):
  config = smoke(smollm2_travel, data_dir)
  pipeline.pipeline(config, str(tmp_path))
  result = result_of(capsys.readouterr().out)
  assert {"win_rate_vs_sft", "win_rate_vs_reference", "valid_rate_start", "solved_rate",
          "solved_diff", "met_diff_ci_low", "limit_stop_rate"} <= set(result)
  assert result["test_tasks"] == 5
  tok = policy_lib.tokenizer_for(ModelSettings.from_config(config.model), str(tmp_path))
  assert tok.vocab_size == 49_152  # SmolLM2's tokenizer, saved with the run
  check_run_outputs(str(tmp_path), 1)


# -------------------------------------------------------------------------- research_quickstart
def test_research_smoke_reports_valid_rate_before_and_after(tmp_path, data_dir, capsys):
  config = smoke(research_quickstart, data_dir)
  assert config.env.name == "research" and config.judge.rubric == ""  # the environment's
  pipeline.pipeline(config, str(tmp_path))
  out = capsys.readouterr().out
  result = result_of(out)
  assert 0 <= result["valid_rate"] <= 1 and 0 <= result["valid_rate_start"] <= 1
  assert result["test_tasks"] == 3  # one per kind
  assert 0 <= result["solved_rate"] <= 1 and 0 <= result["met_rate_start"] <= 1
  assert result["wins_vs_sft"] + result["ties_vs_sft"] + result["losses_vs_sft"] <= 3
  assert "strict verifier" in out and "win_rate_vs_sft_conservative" in result
  summaries = read_jsonl(os.path.join(tmp_path, "eval", "summary.jsonl"))
  start = summaries[0]["generation"]["overall"]["valid_rate"]
  assert summaries[0]["step"] == 0 and result["valid_rate_start"] == pytest.approx(start, abs=1e-4)
  assert set(summaries[-1]["generation"]) == {"overall", "technical_writing", "ideation",
                                              "explanation"}
  check_run_outputs(str(tmp_path), 1)


def test_without_rl_the_final_evaluation_reads_the_starts_rollouts(tmp_path, data_dir, capsys,
                                                                    monkeypatch):
  from arenarl_jax.eval import run as eval_run  # pylint: disable=import-outside-toplevel
  calls = []
  rollouts = eval_run.Evaluator.rollouts
  monkeypatch.setattr(eval_run.Evaluator, "rollouts",
                      lambda self, params: calls.append(1) or rollouts(self, params))
  config = smoke(research_quickstart, data_dir, rl__steps=0)
  pipeline.pipeline(config, str(tmp_path))
  result = result_of(capsys.readouterr().out)
  assert len(calls) == 1  # the step-0 rollouts serve the final evaluation as well
  assert result["valid_rate"] == result["valid_rate_start"]
  assert result["met_diff"] == 0.0 and result["met_rate"] == result["met_rate_start"]
  summaries = read_jsonl(os.path.join(tmp_path, "eval", "summary.jsonl"))
  assert [s["step"] for s in summaries] == [0, 0]
  assert summaries[0]["generation"] == summaries[1]["generation"]


# --------------------------------------------------------------------------------- qwen3_8b_pod
def pod_mesh_on(devices: int, config) -> dict[str, int]:
  """The pod config's mesh fitted to ``devices``: its tensor axis, fsdp what is left, data 1."""
  tensor = config.mesh.tensor
  return {"data": 1, "fsdp": devices // tensor, "tensor": tensor}


def test_qwen3_pod_config_builds_with_its_pod_settings():
  c = qwen3_8b_pod.get_config("ckpt=/ckpt/q8b,judge_url=https://judge.example/v1")
  assert c.model.source == "/ckpt/q8b" and not c.model.init.preset
  assert c.model.compute_dtype == "bfloat16" and c.distributed.initialize
  assert (c.mesh.data, c.mesh.fsdp, c.mesh.tensor) == (-1, 8, 4)
  assert c.judge.backend == "http" and c.judge.http.base_url == "https://judge.example/v1"
  # The key comes only from the environment variable the config names; nothing key-like is set.
  assert c.judge.http.api_key_env == qwen3_8b_pod.API_KEY_ENV
  flat = json.dumps(c.to_dict())
  assert "api_key\"" not in flat and "sk-" not in flat


def test_qwen3_8b_initialises_abstractly_with_valid_shardings(tmp_path):
  config = qwen3_8b_pod.get_config()
  # The checkpoint's config.json (Qwen3-8B's shape) read as the loader reads it.
  with open(tmp_path / "config.json", "w") as f:
    json.dump(model_config.to_hf_config(model_config.get_preset("qwen3_8b")), f)
  cfg = dataclasses.replace(read_config(str(tmp_path)),
                            compute_dtype=config.model.compute_dtype)
  assert cfg.family == "qwen3" and cfg.compute_dtype == "bfloat16"
  mesh = sharding.make_mesh(**pod_mesh_on(8, config))
  model = loading.abstract_sharded_model(cfg, mesh)
  leaves = nnx.to_flat_state(nnx.state(model))
  total = 0
  for path, var in leaves:
    x = var.get_value()
    assert isinstance(x, jax.ShapeDtypeStruct), path  # nothing allocated
    shard = x.sharding.shard_shape(x.shape)  # raises if a sharded dim does not divide
    assert all(d % s == 0 for d, s in zip(x.shape, shard)), path
    total += math.prod(x.shape)
    if math.prod(x.shape) >= 4_000_000:  # every big matrix is split 8 ways
      assert math.prod(x.shape) // math.prod(shard) == 8, (sharding.path_str(path), x.sharding)
  assert 8.1e9 < total < 8.3e9  # Qwen3-8B: 8.19 B parameters
  # On the pod itself (4 x 8 x 4 = 128 chips): every rule's axes divide their dimensions.
  pod = AbstractMesh((4, config.mesh.fsdp, config.mesh.tensor), sharding.AXES)
  for path, var in leaves:
    x = var.get_value()
    spec = sharding.spec_for(sharding.path_str(path), x.shape, pod)
    if math.prod(x.shape) >= 4_000_000:
      assert tuple(spec) in (("fsdp", "tensor"), ("tensor", "fsdp")), (path, spec)


def test_qwen3_pod_loading_path_reads_an_hf_dir_and_names_what_is_missing(tmp_path, monkeypatch):
  tiny = model_config.ModelConfig(
      family="qwen3", vocab_size=49_152, d_model=64, n_layers=2, n_heads=4, n_kv_heads=2,
      head_dim=16, ffn_dim=128, rope_theta=10_000.0, norm_eps=1e-6, qk_norm=True,
      tie_embeddings=True, max_seq_len=512)
  ckpt = str(tmp_path / "ckpt")
  export_hf_dir(make_model(tiny, seed=1), tiny, ckpt)
  loading.load_tokenizer("smollm2").save(ckpt)
  config = qwen3_8b_pod.get_config(f"ckpt={ckpt}")
  with config.unlocked():
    config.mesh.update(pod_mesh_on(8, config))  # the pod's tensor axis, fsdp over the rest
  policy = pipeline.make_policy(config, str(tmp_path / "run"))
  assert policy.cfg.family == "qwen3" and policy.cfg.qk_norm
  assert policy.cfg.compute_dtype == "bfloat16" and policy.cfg.n_layers == 2
  assert_on_run_mesh(policy.model, config)
  missing = qwen3_8b_pod.get_config(f"ckpt={tmp_path / 'nowhere'}")
  with missing.unlocked():
    missing.mesh.update(pod_mesh_on(8, missing))  # the door builds the mesh before the model
  with pytest.raises(FileNotFoundError, match="nowhere"):
    pipeline.make_policy(missing, str(tmp_path / "run2"))
  monkeypatch.delenv(qwen3_8b_pod.API_KEY_ENV, raising=False)
  with pytest.raises(Exception, match=qwen3_8b_pod.API_KEY_ENV):
    pipeline.make_training_judge(config, types.SimpleNamespace(rubric="travel"))


def test_qwen3_pod_smoke_on_a_three_axis_mesh_then_rl_step_from_it(tmp_path, data_dir, capsys):
  config = smoke(qwen3_8b_pod, data_dir, mesh__data=2, mesh__fsdp=2, mesh__tensor=2)
  work = str(tmp_path / "run")
  pipeline.pipeline(config, work)
  result = result_of(capsys.readouterr().out)
  assert result["test_tasks"] == 5 and "win_rate_vs_sft" in result
  check_run_outputs(work, 1)
  # benchmarks/rl_step.py from that run's policy (its smoke shape is the quickstart smoke's;
  # tests/conftest.py puts benchmarks/ on sys.path).
  import rl_step  # pylint: disable=import-outside-toplevel
  rl_step.main(["--arg=smoke", "--steps=1", f"--from_workdir={work}"])
  out = capsys.readouterr().out.strip().splitlines()
  assert out[-2].startswith("policy=rl_step_1 ")
  assert out[-1].startswith("RESULT step_s=") and "host_frac=" in out[-1]
  with pytest.raises(FileNotFoundError, match="tokenizer"):
    rl_step.main(["--arg=smoke", f"--from_workdir={tmp_path / 'empty'}"])
