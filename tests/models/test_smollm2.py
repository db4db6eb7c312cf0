"""The embedded SmolLM2-135M-Instruct: logits vs transformers' own GGUF loader; greedy answer."""
import functools

import jax
import jax.numpy as jnp
import numpy as np
import pytest
import torch
from flax import nnx

from arenarl_jax.models.config import PRESETS
from arenarl_jax.models.kv_cache import KVCache

PROMPT = "<|im_start|>user\nWhat is the capital of France?<|im_end|>\n<|im_start|>assistant\n"


@pytest.fixture(scope="module")
def reference(hf_smollm2):
  """transformers' model and tokenizer, read from the GGUF by transformers itself."""
  return hf_smollm2


@pytest.fixture(scope="module")
def ours(smollm2):
  return smollm2


@pytest.fixture(scope="module")
def prompt_ids(reference):
  ids = reference[1](PROMPT, add_special_tokens=False)["input_ids"]
  assert ids[0] == 1 and ids.count(1) == 2  # <|im_start|> parsed as the special token
  return np.asarray(ids, np.int32)[None]


def test_config_is_the_preset(ours):
  assert ours[0] == PRESETS["smollm2_135m"]


def test_logits_match_transformers(ours, reference, prompt_ids):
  _, model = ours
  with torch.no_grad():
    want = reference[0](input_ids=torch.tensor(prompt_ids, dtype=torch.long)).logits.numpy()
  graphdef, state = nnx.split(model)
  forward = jax.jit(lambda state, tokens: nnx.merge(graphdef, state)(tokens)[0])
  got = np.asarray(forward(state, jnp.asarray(prompt_ids)))
  assert np.abs(got - want).max() < 5e-4
  np.testing.assert_array_equal(got.argmax(-1), want.argmax(-1))


@functools.partial(jax.jit, static_argnames=("graphdef", "n_new"))
def greedy(graphdef, state, prompt_1T, n_new):
  """Prefill the prompt into a KV cache, then decode ``n_new`` tokens by argmax."""
  model = nnx.merge(graphdef, state)
  t = prompt_1T.shape[1]
  cache = KVCache.init(model.cfg, n_rows=1, n_slots=t + n_new)
  logits, cache = model(prompt_1T, jnp.arange(t, dtype=jnp.int32)[None], cache=cache)
  first = jnp.argmax(logits[:, -1], axis=-1).astype(jnp.int32)

  def step(i, carry):
    out_1N, cache = carry
    token = jax.lax.dynamic_slice_in_dim(out_1N, i, 1, axis=1)
    logits, cache = model(token, jnp.full((1, 1), t + i, jnp.int32), cache=cache)
    out_1N = jax.lax.dynamic_update_slice_in_dim(
        out_1N, jnp.argmax(logits[:, -1], axis=-1).astype(jnp.int32)[:, None], i + 1, axis=1)
    return out_1N, cache

  out_1N = jnp.zeros((1, n_new), jnp.int32).at[:, 0].set(first)
  out_1N, _ = jax.lax.fori_loop(0, n_new - 1, step, (out_1N, cache))
  return out_1N


def test_greedy_answer_names_paris(ours, reference, prompt_ids):
  _, model = ours
  graphdef, state = nnx.split(model)
  out = np.asarray(greedy(graphdef, state, jnp.asarray(prompt_ids), 10))[0].tolist()
  text = reference[1].decode(out)
  assert "Paris" in text, text
