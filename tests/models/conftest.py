"""Fixtures for the model tests: tiny transformers checkpoints saved once per session."""
import pytest
from hf_reference import build_hf_model


@pytest.fixture(scope="session")
def hf_dirs(tmp_path_factory):
  """variant -> (torch model, directory with its save_pretrained safetensors checkpoint)."""
  cache = {}

  def get(variant):
    if variant not in cache:
      model = build_hf_model(variant)
      path = tmp_path_factory.mktemp(variant)
      model.save_pretrained(path)
      cache[variant] = (model, str(path))
    return cache[variant]

  return get
