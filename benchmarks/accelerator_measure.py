"""The measurements of benchmarks/accelerator.py (imported after it has chosen the backend)."""
from __future__ import annotations

import dataclasses
import time

import jax
import jax.numpy as jnp
import numpy as np
import optax
from flax import nnx

from arenarl_jax.models import loading
from arenarl_jax.models.config import PRESETS, ModelConfig
from arenarl_jax.models.transformer import Transformer, abstract_model
from arenarl_jax.sampling.sampler import Sampler, SamplingSettings

import timing  # benchmarks/timing.py

# The dry run's stand-in for Qwen3-0.6B: same family and features, a few thousand times smaller.
QWEN3_DRY = dataclasses.replace(PRESETS["qwen3_0_6b"], n_layers=2, d_model=64, n_heads=4,
                                n_kv_heads=2, head_dim=16, ffn_dim=128, vocab_size=1024)


def matmul_ceiling(n: int, repeats: int) -> float:
  """FLOP/s of a bf16 [n, n] @ [n, n] matmul (float32 accumulation), median of ``repeats``."""
  a = jax.random.normal(jax.random.key(0), (n, n), jnp.bfloat16)
  b = jax.random.normal(jax.random.key(1), (n, n), jnp.bfloat16)
  run = jax.jit(lambda a, b: jnp.matmul(a, b, preferred_element_type=jnp.float32))
  run(a, b).block_until_ready()
  return 2 * n ** 3 / timing.median_time(lambda: run(a, b).block_until_ready(), max(repeats, 3))


def smollm2(cache_dir: str | None, dry_run: bool = False) -> tuple[ModelConfig, Transformer]:
  """SmolLM2-135M-Instruct from the embedded GGUF; the dry run keeps its first 2 of 30 layers
  (the real weights through the real loader, at a fifteenth of the compile time), and uses a
  converted-parameter cache only where ``cache_dir`` names one."""
  use_cache = not dry_run or cache_dir is not None
  cfg, model = loading.load_model("smollm2", cache_dir=cache_dir, use_cache=use_cache,
                                  compute_dtype="auto")
  if dry_run:
    cfg, model = first_layers(cfg, model, 2)
  return cfg, model


def first_layers(cfg: ModelConfig, model: Transformer, n: int) -> tuple[ModelConfig, Transformer]:
  """The model cut to its first ``n`` blocks (same embedding, final norm and head)."""
  cfg = dataclasses.replace(cfg, n_layers=n)
  graphdef, state = nnx.split(abstract_model(cfg))
  source = dict(nnx.to_flat_state(nnx.state(model)))
  for path, var in nnx.to_flat_state(state):
    var.set_value(source[path].get_value())
  return cfg, nnx.merge(graphdef, state)


def qwen3_06b(dry_run: bool) -> tuple[ModelConfig, Transformer]:
  """Random weights in the Qwen3-0.6B shape (float32 masters, compute "auto"); jitted init."""
  cfg = QWEN3_DRY if dry_run else PRESETS["qwen3_0_6b"]
  mesh = jax.sharding.Mesh(np.asarray(jax.devices()[:1]).reshape(1, 1, 1),
                           ("data", "fsdp", "tensor"))
  model = loading.init_sharded_model(cfg, mesh, seed=0)
  return loading.with_compute_dtype(cfg, model, "auto")


def matmul_params(cfg: ModelConfig) -> int:
  """Weights that take part in a matmul per token (all kernels and the head; not norms)."""
  d, hd = cfg.d_model, cfg.head_dim
  per_layer = d * hd * (2 * cfg.n_heads + 2 * cfg.n_kv_heads) + 3 * d * cfg.ffn_dim
  return cfg.n_layers * per_layer + cfg.vocab_size * d


def forward_flops(cfg: ModelConfig, rows: int, tokens: int) -> float:
  """Weight matmuls plus causal attention (q.k and p.v over the visible half) for rows x tokens."""
  attention = 2 * 2 * cfg.n_layers * cfg.n_heads * cfg.head_dim * tokens * (tokens + 1) / 2
  return rows * (2 * matmul_params(cfg) * tokens + attention)


def _tokens(cfg: ModelConfig, rows: int, tokens: int, seed: int = 0) -> jax.Array:
  return jax.random.randint(jax.random.key(seed), (rows, tokens), 3, min(cfg.vocab_size, 30_000))


def forward(model: Transformer, sizes) -> tuple[float, float]:
  """(FLOP/s, tokens/s) of a jitted teacher-forced pass: hidden states + head log-sum-exp."""
  cfg = model.cfg
  graphdef, state = nnx.split(model)
  tokens_NT = _tokens(cfg, sizes.forward_rows, sizes.forward_tokens)

  @jax.jit
  def run(state, tokens_NT):
    m = nnx.merge(graphdef, state)
    h_NTD, _ = m.hidden(tokens_NT)
    return jnp.sum(jax.nn.logsumexp(m.head(h_NTD), axis=-1))

  run(state, tokens_NT).block_until_ready()
  seconds = timing.median_time(lambda: run(state, tokens_NT).block_until_ready(), sizes.repeats)
  n_tokens = sizes.forward_rows * sizes.forward_tokens
  return forward_flops(cfg, sizes.forward_rows, sizes.forward_tokens) / seconds, n_tokens / seconds


def sampler(model: Transformer, sizes) -> tuple[float, float]:
  """(FLOP/s, generated tokens/s) of ``Sampler.sample``: prefill + decode, EOS ignored."""
  cfg = model.cfg
  prompts = np.asarray(_tokens(cfg, sizes.sampler_prompts, sizes.prompt_tokens, seed=1)).tolist()
  settings = SamplingSettings(temperature=1.0, max_new_tokens=sizes.new_tokens, eos_ids=())
  cache_len = sizes.prompt_tokens + sizes.new_tokens
  s = Sampler(model, cache_len=cache_len, cache_sizes=())

  def once(seed):
    out, _ = s.sample(prompts, group_size=sizes.sampler_group, settings=settings,
                      key=jax.random.key(seed))
    jax.block_until_ready(out.tokens_NT)

  once(0)  # compile
  seconds = timing.median_time(lambda: once(1), sizes.repeats)
  rows = sizes.sampler_prompts * sizes.sampler_group
  generated = rows * sizes.new_tokens
  flops = 2 * matmul_params(cfg) * (sizes.sampler_prompts * sizes.prompt_tokens + generated)
  return flops / seconds, generated / seconds


def train(model: Transformer, sizes) -> tuple[float, float]:
  """(FLOP/s, tokens/s) of one RL update: ``trainer.Trainer.step`` (clipped objective with
  the k3 KL, AdamW) where that module exists, else ``generic_train``; 3 x the forward's FLOPs
  (the reference log-probs' extra forward is not counted)."""
  try:
    from arenarl_jax import trainer as trainer_lib  # pylint: disable=g-import-not-at-top
    from arenarl_jax.rl import losses
    from arenarl_jax.rl.settings import LossSettings
  except ImportError:
    return generic_train(model, sizes)
  cfg = model.cfg
  n, t = sizes.forward_rows, sizes.forward_tokens
  graphdef, state = nnx.split(model)
  params = nnx.to_pure_dict(state)
  mesh = jax.sharding.Mesh(np.asarray(jax.devices()[:1]).reshape(1, 1, 1),
                           ("data", "fsdp", "tensor"))
  loss_cfg = LossSettings(ratio="token", kl="k3", kl_coef=0.02, clip_low=0.2,
                               clip_high=0.28, aggregation="seq_mean_token_mean")
  optim = dict(lr=1e-6, weight_decay=0.1, b1=0.9, b2=0.98, grad_clip=1.0, schedule="constant",
               warmup_steps=0)
  trainer = trainer_lib.Trainer(graphdef, params, mesh, losses.make_rl_loss(loss_cfg),
                                trainer_lib.make_optimizer(optim, 100))
  holder = {"state": trainer.init_state(params)}
  ref = trainer.place_params(params)
  rng = np.random.default_rng(0)
  mask = np.ones((n, t), np.float32)
  mask[:, : t // 8] = 0.0  # a prompt
  batch = trainer.put_batch({
      "tokens_NT": np.asarray(_tokens(cfg, n, t, seed=2), np.int32), "loss_mask_NT": mask,
      "advantages_N": rng.normal(size=n).astype(np.float32),
      "temperature_N": np.ones(n, np.float32), "sampler_logp_NT": np.zeros((n, t), np.float32),
      "policy_step_N": np.zeros(n, np.int32)})
  batch["old_logp_NT"] = trainer.logprobs(holder["state"].params, batch)

  def once():
    holder["state"], metrics = trainer.step(holder["state"], ref, batch)
    jax.block_until_ready(metrics)

  once()  # compile
  seconds = timing.median_time(once, sizes.repeats)
  return 3 * forward_flops(cfg, n, t) / seconds, n * t / seconds


def generic_train(model: Transformer, sizes) -> tuple[float, float]:
  """(FLOP/s, tokens/s) of value-and-grad of the mean token log-prob + an AdamW update."""
  cfg = model.cfg
  graphdef, params = nnx.split(model)
  tokens_NT = _tokens(cfg, sizes.forward_rows, sizes.forward_tokens, seed=2)
  optimizer = optax.adamw(1e-6)
  opt_state = optimizer.init(params)

  def loss(params, tokens_NT):
    m = nnx.merge(graphdef, params)
    h_NTD, _ = m.hidden(tokens_NT[:, :-1])
    logits_NTV = m.head(h_NTD)
    logp_NTV = jax.nn.log_softmax(logits_NTV, axis=-1)
    return -jnp.mean(jnp.take_along_axis(logp_NTV, tokens_NT[:, 1:, None], axis=-1))

  @jax.jit
  def step(params, opt_state, tokens_NT):
    value, grads = jax.value_and_grad(loss)(params, tokens_NT)
    updates, opt_state = optimizer.update(grads, opt_state, params)
    return optax.apply_updates(params, updates), opt_state, value

  params, opt_state, value = step(params, opt_state, tokens_NT)
  value.block_until_ready()
  state = {"p": params, "o": opt_state}

  def once():
    state["p"], state["o"], v = step(state["p"], state["o"], tokens_NT)
    v.block_until_ready()

  once()  # the first step's outputs may carry other shardings than the inputs: compile again
  seconds = timing.median_time(once, sizes.repeats)
  n_tokens = sizes.forward_rows * sizes.forward_tokens
  flops = 3 * forward_flops(cfg, sizes.forward_rows, sizes.forward_tokens)
  return flops / seconds, n_tokens / seconds


def bandwidth_ceiling(n_bytes: int, repeats: int) -> float:
  """Bytes/s of reading a bf16 array of ``n_bytes`` once (a float32-accumulated sum), median of
  ``repeats``: the memory bandwidth a decode step can reach on this device."""
  x = jax.random.normal(jax.random.key(2), (n_bytes // 2,), jnp.bfloat16)
  run = jax.jit(lambda x: jnp.sum(x, dtype=jnp.float32))
  run(x).block_until_ready()
  return x.nbytes / timing.median_time(lambda: run(x).block_until_ready(), max(repeats, 3))


def decode_bytes(cfg: ModelConfig, rows: int, cache_len: int) -> int:
  """Bytes one decode step must read at least: every weight in the compute dtype, and the K and
  V of every layer's cache (the reference attention reads every slot)."""
  item = np.dtype(cfg.act_dtype).itemsize
  cache = rows * cache_len * cfg.n_layers * 2 * cfg.n_kv_heads * cfg.head_dim * item
  return cfg.num_params() * item + cache


def decode_step(model: Transformer, sizes) -> float:
  """Seconds per decode step: ``Sampler.decode`` of ``sizes.new_tokens`` tokens per row after an
  untimed prefill of the same prompts (a fresh state each repeat: decode donates it), divided by
  the tokens. Only the decode loop and its per-call host work are timed."""
  cfg = model.cfg
  prompts = np.asarray(_tokens(cfg, sizes.sampler_prompts, sizes.prompt_tokens, seed=3)).tolist()
  s = Sampler(model, cache_len=sizes.prompt_tokens + 2 * sizes.new_tokens, cache_sizes=())
  settings = SamplingSettings(temperature=1.0, max_new_tokens=sizes.new_tokens, eos_ids=())
  times = []
  for repeat in range(max(sizes.repeats, 1) + 1):  # the first compiles
    state = s.prefill(prompts, sizes.sampler_group)
    jax.block_until_ready(state.hidden_ND)
    start = time.perf_counter()
    out, _ = s.decode(state, settings, jax.random.key(repeat))
    jax.block_until_ready(out.tokens_NT)
    times.append(time.perf_counter() - start)
  return float(np.median(times[1:])) / sizes.new_tokens
