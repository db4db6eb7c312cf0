"""A start stored as a low-rank delta (sft/delta.py): the factorisation's error is the SVD's tail
(Eckart-Young), what the build evaluates is what a load reconstructs, and a changed base is
refused."""
import os
import sys

import jax
import numpy as np
import pytest
from flax import nnx

from arenarl_jax import pipeline
from arenarl_jax.sft import delta, start as start_lib
from arenarl_jax.sft.settings import StartSettings

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def _base_and_tuned(seed=0):
  rng = np.random.default_rng(seed)
  base = {"w": rng.normal(size=(12, 9)).astype(np.float32),
          "narrow": rng.normal(size=(12, 2)).astype(np.float32),
          "scale": np.ones((9,), np.float32), "frozen": np.zeros((3,), np.float32)}
  tuned = {"w": base["w"] + 0.1 * rng.normal(size=(12, 9)).astype(np.float32),
           "narrow": base["narrow"] + 0.1, "scale": base["scale"] * 1.5,
           "frozen": base["frozen"]}
  return base, tuned


def test_factorize_keeps_the_best_rank_r_delta():
  base, tuned = _base_and_tuned()
  tensors = delta.factorize(base, tuned, rank=3, dtype="float32")
  # Unchanged parameters are not stored; a matrix no wider than the rank keeps its whole delta.
  assert sorted(tensors) == ["narrow.delta", "scale.delta", "w.a", "w.b"]
  assert tensors["w.a"].shape == (12, 3) and tensors["w.b"].shape == (3, 9)
  out = {k: np.asarray(v) for k, v in delta.apply(base, tensors).items()}
  s = np.linalg.svd(tuned["w"] - base["w"], compute_uv=False)
  # Eckart-Young: the residual's norm is the norm of the dropped singular values.
  np.testing.assert_allclose(np.linalg.norm(tuned["w"] - out["w"]), np.sqrt(np.sum(s[3:] ** 2)),
                             rtol=1e-4)
  np.testing.assert_allclose(out["narrow"], tuned["narrow"], atol=1e-6)
  np.testing.assert_allclose(out["scale"], tuned["scale"], atol=1e-6)
  np.testing.assert_array_equal(out["frozen"], base["frozen"])
  # Full rank restores the tuned matrix; bfloat16 factors halve the bytes at a small error.
  full = delta.apply(base, delta.factorize(base, tuned, rank=9, dtype="float32"))
  np.testing.assert_allclose(np.asarray(full["w"]), tuned["w"], atol=1e-5)
  bf16 = delta.factorize(base, tuned, rank=3)
  assert bf16["w.a"].dtype.name == "bfloat16" and bf16["scale.delta"].dtype == np.float32
  assert delta.nbytes(bf16) < delta.nbytes(tensors)
  got = np.asarray(delta.apply(base, bf16)["w"])
  assert np.max(np.abs(got - out["w"])) < 0.01 * np.max(np.abs(tuned["w"] - base["w"]))


def test_bad_input_is_named():
  base, tuned = _base_and_tuned()
  with pytest.raises(ValueError, match="rank must be >= 1"):
    delta.factorize(base, tuned, rank=0)
  with pytest.raises(ValueError, match="dtype"):
    delta.factorize(base, tuned, rank=2, dtype="float16")
  with pytest.raises(ValueError, match="shape"):
    delta.factorize(base, {**tuned, "w": tuned["w"][:, :4]}, rank=2)
  with pytest.raises(ValueError, match="names"):
    delta.factorize(base, {**tuned, "extra": tuned["w"]}, rank=2)
  with pytest.raises(ValueError, match="does not have: \\['gone'\\]"):
    delta.apply(base, {"gone.delta": np.zeros(3, np.float32)})


def test_a_delta_start_loads_as_the_build_evaluated_it(tmp_path):
  """The build's parameters (``pin``) and a later load (``start_policy``) are the same arrays;
  the folder holds only the delta; a different base is refused by its digest."""
  sys.path.insert(0, os.path.join(ROOT, "configs"))
  import quickstart  # pylint: disable=import-outside-toplevel
  config = quickstart.get_config("smoke")
  with config.unlocked():
    config.model.init.tokenizer = "smollm2"
  mesh = pipeline.make_mesh(config)
  build = pipeline.make_policy(config, str(tmp_path / "build"), mesh=mesh)
  base = nnx.to_pure_dict(nnx.state(build.model))
  rng = np.random.default_rng(1)
  tuned = jax.tree.map(lambda x: np.asarray(x) + 0.01 * rng.normal(size=x.shape).astype(
      np.float32), base)
  cut = delta.factorize(delta.flat_params(base), delta.flat_params(tuned), 4)
  params, tensors, info = delta.pin(base, cut, rank=4, dtype="bfloat16", base_name="tiny",
                                    tuned=tuned)
  assert info["rank"] == 4 and info["bytes"] == delta.nbytes(tensors)
  assert 0 < info["kept"] < 1 and len(info["base_sha256"]) == 64
  out = tmp_path / "start"
  start_lib.write(str(out), model=None, cfg=build.cfg, tokenizer=build.tokenizer,
                  record={"settings": {}, "delta": info}, delta_tensors=tensors)
  assert sorted(os.listdir(out)) == ["START.json", "config.json", "delta.safetensors",
                                     "tokenizer.json", "tokenizer_config.json"]
  whole = sum(np.asarray(x).nbytes for x in jax.tree.leaves(base))
  assert os.path.getsize(out / "delta.safetensors") < whole / 2
  with config.unlocked():
    config.start.name, config.start.dir = "t", str(out)
  loaded = pipeline.make_policy(config, str(tmp_path / "run"), mesh=mesh)
  got = delta.flat_params(nnx.to_pure_dict(nnx.state(loaded.model)))
  for name, want in delta.flat_params(params).items():
    np.testing.assert_array_equal(np.asarray(got[name]), np.asarray(want), err_msg=name)
  with config.unlocked():
    config.model.init.seed = 1  # another base
  with pytest.raises(ValueError, match="not the ones this delta was built on"):
    pipeline.make_policy(config, str(tmp_path / "run2"), mesh=mesh)
  assert StartSettings.from_config(config.start).loads
