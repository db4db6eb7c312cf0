"""The sampler on the embedded SmolLM2-135M: greedy rows vs transformers' `generate`; log-probs vs
a teacher-forced pass."""
import jax
import jax.numpy as jnp
import numpy as np
import pytest
import torch
from flax import nnx

from arenarl_jax.models.embedded import find_smollm2_gguf
from arenarl_jax.models.logprobs import token_logprobs
from arenarl_jax.sampling.sampler import Sampler, SamplingSettings, token_lists
from arenarl_jax.text.tokenizer import Tokenizer

QUESTIONS = [
    "What is the capital of France?",
    "Name three rivers in Europe and say which countries each one flows through, briefly.",
    "Write a short, friendly note to a neighbour asking them to water my plants on Saturday and "
    "Sunday while I am away visiting my family in the mountains.",
]
NEW = 48
TEMPERATURE = 0.8


def chat(question):
  return f"<|im_start|>user\n{question}<|im_end|>\n<|im_start|>assistant\n"


@pytest.fixture(scope="module")
def prompts():
  tokenizer = Tokenizer.from_gguf(find_smollm2_gguf())
  ids = [tokenizer.encode(chat(q)) for q in QUESTIONS]
  assert len({len(p) for p in ids}) == 3  # three different lengths, one batch
  return ids


@pytest.fixture(scope="module")
def model(smollm2):
  return smollm2[1]


@pytest.fixture(scope="module")
def sampled(model, prompts):
  """Rows 0, 2, 4 greedy (anchors), 1, 3, 5 at TEMPERATURE; EOS ignored: exactly NEW tokens."""
  settings = SamplingSettings(temperature=TEMPERATURE, max_new_tokens=NEW)
  out, _ = Sampler(model, cache_len=128).sample(prompts, group_size=2, settings=settings,
                                                key=jax.random.key(0))
  return out


def test_greedy_rows_equal_transformers_generate(sampled, prompts, hf_smollm2):
  reference = hf_smollm2[0]
  # Like ours without eos_ids, EOS is a token. The model is shared: its setting is put back.
  eos = reference.generation_config.eos_token_id
  reference.generation_config.eos_token_id = None
  ours = token_lists(sampled)
  try:
    wants = []
    for prompt in prompts:
      ids = torch.tensor([prompt])
      with torch.inference_mode():
        wants.append(reference.generate(ids, attention_mask=torch.ones_like(ids), do_sample=False,
                                        max_new_tokens=NEW, pad_token_id=2)[0, len(prompt):])
  finally:
    reference.generation_config.eos_token_id = eos
  for b, want in enumerate(wants):
    assert ours[2 * b] == want.tolist(), f"prompt {b}"


def test_sampled_rows_are_real_samples(sampled):
  tokens = token_lists(sampled)
  assert all(len(t) == NEW for t in tokens)
  assert all(tokens[2 * b] != tokens[2 * b + 1] for b in range(3))


def test_logprobs_equal_a_teacher_forced_pass(sampled, model, prompts):
  """logp of greedy rows = log softmax(logits); of sampled rows = log softmax(logits / T)."""
  rows = [prompts[r // 2] + t for r, t in enumerate(token_lists(sampled))]
  width = max(map(len, rows))
  tokens = np.zeros((len(rows), width), np.int32)
  for r, row in enumerate(rows):
    tokens[r, : len(row)] = row  # right padding: invisible to the causal pass before it
  graphdef, state = nnx.split(model)
  logprobs = jax.jit(lambda state, tokens, t: token_logprobs(
      nnx.merge(graphdef, state), tokens, temperature=t))
  at_one = np.asarray(logprobs(state, jnp.asarray(tokens), 1.0))
  at_t = np.asarray(logprobs(state, jnp.asarray(tokens), TEMPERATURE))
  got = np.asarray(sampled.logp_NT)
  for r, row in enumerate(rows):
    want = (at_one if r % 2 == 0 else at_t)[r, len(row) - NEW: len(row)]
    assert np.abs(got[r] - want).max() < 1e-4, (r, np.abs(got[r] - want).max())
  assert got.min() < -1.0  # sampled tokens are not all near-certain
