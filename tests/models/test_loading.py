"""load_model: source resolution and the orbax parameter cache for converted GGUF files."""
import logging
import os

import numpy as np
import pytest
from hf_reference import build_hf_model
from flax import nnx
from test_gguf_io import gguf_tensors, write_gguf

from arenarl_jax.models import loading, param_cache
from arenarl_jax.models.loading import load_model


@pytest.fixture(scope="module")
def tiny_gguf(tmp_path_factory):
  hf_model = build_hf_model("llama")
  path = tmp_path_factory.mktemp("gguf") / "tiny.gguf"
  return write_gguf(path, hf_model, gguf_tensors(hf_model))


def flat_params(model):
  return {p: np.asarray(v.get_value()) for p, v in nnx.to_flat_state(nnx.state(model, nnx.Param))}


def test_second_load_comes_from_the_cache_bit_exact(tiny_gguf, tmp_path, monkeypatch):
  cfg, first = load_model(tiny_gguf, cache_dir=str(tmp_path))
  (folder,) = os.listdir(tmp_path)
  assert folder.startswith("tiny-")

  def no_conversion(*_, **__):
    raise AssertionError("converted again instead of using the cache")

  monkeypatch.setattr(loading, "load_gguf", no_conversion)
  cfg_again, second = load_model(tiny_gguf, cache_dir=str(tmp_path))
  assert cfg_again == cfg
  a, b = flat_params(first), flat_params(second)
  assert a.keys() == b.keys()
  for key in a:
    np.testing.assert_array_equal(a[key], b[key])


def test_changed_file_or_dtype_gets_a_new_key(tiny_gguf, tmp_path):
  key = param_cache.cache_key(tiny_gguf, dtype="float32")
  assert param_cache.cache_key(tiny_gguf, dtype="bfloat16") != key
  copy = tmp_path / "tiny.gguf"
  copy.write_bytes(open(tiny_gguf, "rb").read())
  before = param_cache.cache_key(str(copy), dtype="float32")
  os.utime(copy, ns=(1, 1))
  assert param_cache.cache_key(str(copy), dtype="float32") != before


def test_damaged_cache_is_rebuilt(tiny_gguf, tmp_path, caplog):
  load_model(tiny_gguf, cache_dir=str(tmp_path))
  (folder,) = os.listdir(tmp_path)
  params = tmp_path / folder / "params"
  for root, _, files in os.walk(params):
    for name in files:
      open(os.path.join(root, name), "wb").close()
  with caplog.at_level(logging.WARNING, logger=param_cache.__name__):
    cfg, model = load_model(tiny_gguf, cache_dir=str(tmp_path))
  assert "unreadable parameter cache" in caplog.text
  assert model.embed[...].shape == (cfg.vocab_size, cfg.d_model)
  assert param_cache.restore(str(tmp_path / folder)) is not None  # rewritten


def test_use_cache_false_writes_nothing(tiny_gguf, tmp_path):
  load_model(tiny_gguf, cache_dir=str(tmp_path), use_cache=False)
  assert not os.listdir(tmp_path)


def test_bfloat16_from_gguf(tiny_gguf, tmp_path):
  cfg, model = load_model(tiny_gguf, cache_dir=str(tmp_path), dtype="bfloat16")
  assert cfg.param_dtype == "bfloat16" and model.embed[...].dtype.name == "bfloat16"


def test_hf_directory_source(hf_dirs):
  _, path = hf_dirs("qwen3")
  cfg, _ = load_model(path)
  assert cfg.family == "qwen3" and cfg.qk_norm


def test_bad_sources(tmp_path):
  with pytest.raises(FileNotFoundError, match="'nope': not 'smollm2'"):
    load_model("nope")
  other = tmp_path / "weights.bin"
  other.write_bytes(b"x")
  with pytest.raises(ValueError, match="a file must be a .gguf"):
    load_model(str(other))


def test_config_json_round_trip():
  from arenarl_jax.models.config import PRESETS
  for cfg in PRESETS.values():
    assert param_cache.config_from_json(param_cache.config_to_json(cfg)) == cfg
