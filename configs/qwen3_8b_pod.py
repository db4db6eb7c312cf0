"""Qwen3-8B from an HF checkpoint directory on a TPU pod, judged by an OpenAI-compatible endpoint.

  python -m arenarl_jax.main --config=configs/qwen3_8b_pod.py:ckpt=/mnt/ckpt/Qwen3-8B,judge_url=http://judge:8000/v1 --workdir=gs://bucket/runs/qwen3_8b

The same command runs on every host of the pod (``distributed.initialize``: JAX finds the
coordinator and the process ids itself on Cloud TPU). The policy is the checkpoint at ``ckpt``
(``model.source``: an HF directory with config.json, *.safetensors and the tokenizer, on a disk
every host can read), float32 master parameters and bfloat16 compute (``model.compute_dtype``);
the trainers lay the parameters out over a data x fsdp x tensor mesh (``mesh.*``: tensor
parallel within a host's 4 chips, fsdp over 8, data over the rest; every parameter's layout
comes from ``sharding.py``'s partition rules). Each host rolls out, runs the travel tools for
and judges its own groups. The loader reads each host's slices of the checkpoint only, and the
sampler runs on each host's sampling mesh (``sampling/layout.py``: tensor-parallel over the
host's 4 chips, its rows over the rest), so no chip holds a full parameter copy.

Memory per chip (``benchmarks/pod_plan.py``: the train step, prefill and decode compiled ahead
of time for the TPU topology; numbers and method in benchmarks/README.md, "Pod plan"): a train
minibatch is 128 rows x 8,192 tokens, a host samples 64 rows with 8,192-slot caches after
prompts of up to 4,096 tokens (``sampling.prompt_buckets``). The parameters take 1.03 GB per chip
in the training layout and 4.10 GB in the sampling layout (the sampler's copy is bfloat16).
- v5p (95 GB HBM): fits as given: train 57.2 GB, sample 30.5 GB per chip (the targets: train
  <= 0.8 x HBM = 76 GB, sampling <= 40 GB). ``model.remat=full`` keeps only each block's input
  for the backward (about one more forward of compute): with the default ``dots_no_batch`` the
  train step needed 82.9 GB (temporaries 70.6); 8 micro-batches instead of 4 made the
  compiler's choices worse (152 GB of temporaries). Decode holds one KV cache plus 1.7 GB of
  temporaries: dot_product_attention's caches are [N, S, K, F] (``models/kv_cache.py``); in the
  CPU layout the compiler kept a second cache across the decode loop (23.2 GB of temporaries).
- v4 (32 GiB): the sampling side fits (30.5 of the 33.0 GB the compiler plans with); the train
  step does not at this workload (46.8 GiB of temporaries with 4 micro-batches and
  ``model.remat=full``). It fits (train 26.7 GB, sample 26.2 GB, with the earlier layout) with
  ``rl.accumulation_steps=16``, ``model.remat=full``, ``sampling.cache_len=4096`` and
  ``rl.prompts_per_step=32``: shorter conversations and half the rows per host.

The judge is an OpenAI-compatible server (vLLM, SGLang, llama.cpp, a hosted API) at
``judge_url`` serving ``judge_model``; the API key is read from the environment variable named
by ``judge.http.api_key_env`` (JUDGE_API_KEY) and never from the config. SFT on the expert's
travel conversations, ArenaRL (seeded single elimination, groups of 8), evaluation by the
noise-free checker every 50 steps and at the end.

This config cannot run on a CPU: tests/test_config_runs.py checks that it builds, that the model
initialises abstractly (no memory), that every parameter's sharding is valid on the pod's mesh
and on 8 fake devices, and that its loading path reads a (tiny) Qwen3 HF directory.

Args (after a colon, comma-separated): ckpt=<HF checkpoint dir>, judge_url=<base URL, .../v1>,
judge_model=<served model name>, method=arenarl|grpo|gspo, topology=<tournament topology>,
group_size=<G>, smoke (seconds on one CPU process: a tiny from-scratch model and the local rubric
judge in place of the checkpoint and the endpoint, fsdp = tensor = 1, no jax.distributed; the
test suite runs it on a 2 x 2 x 2 mesh of fake devices), e.g.
  --config=configs/qwen3_8b_pod.py:smoke
"""
from arenarl_jax import config_tree

ARGS = {"ckpt": "/mnt/ckpt/Qwen3-8B", "judge_url": "http://127.0.0.1:8000/v1",
        "judge_model": "judge", "method": "arenarl", "topology": "single_elimination",
        "group_size": 8, "smoke": False}

API_KEY_ENV = "JUDGE_API_KEY"  # the NAME of the variable; the key itself never enters a config


def get_config(arg=None):
  args = config_tree.parse_arg(arg, ARGS)
  c = config_tree.make_base_config()
  config_tree.apply_preset(c, args.method)
  c.model.source = args.ckpt
  c.model.init.preset = ""  # weights and tokenizer from the checkpoint directory
  c.model.compute_dtype = "bfloat16"
  c.model.attention = "auto"  # dot_product_attention on TPU
  c.model.remat = "full"  # the train step within 0.8 x a v5p chip's HBM (the docstring)
  c.mesh.data = -1
  c.mesh.fsdp = 8
  c.mesh.tensor = 4
  c.distributed.initialize = True

  c.env.name = "travel"
  c.env.schemas = "full"
  c.judge.backend = "http"
  c.judge.http.base_url = args.judge_url
  c.judge.http.model = args.judge_model
  c.judge.http.api_key_env = API_KEY_ENV
  c.judge.http.max_concurrency = 64
  c.judge.http.timeout_s = 300.0
  c.tournament.topology = args.topology
  c.tournament.failure_threshold = 0.1

  c.data.sft_seq_len = 4096
  c.data.sft_batch_size = 64
  c.sft.steps = 200
  c.sft.lr = 1e-5
  c.sft.warmup_steps = 20
  c.sft.accumulation_steps = 2

  c.sampling.group_size = args.group_size
  c.sampling.temperature = 1.0
  c.sampling.max_new_tokens = 1024
  c.sampling.max_turns = 6
  c.sampling.cache_len = 8192
  # A travel prompt with full schemas is ~1k tokens and a tool result at most
  # rollout.max_observation_tokens (512): prompts and chunks pad to these (prefill is planned at
  # the largest, benchmarks/pod_plan.py).
  c.sampling.prompt_buckets = (256, 512, 1024, 2048, 4096)
  c.rl.prompts_per_step = 64
  c.rl.steps = 300
  c.rl.minibatches_per_rollout = 4
  c.rl.accumulation_steps = 4  # fits a v5p chip (benchmarks/pod_plan.py); 2 does not
  c.rl.bucket = 512
  c.rl.logprob_chunk = 128
  c.optim.lr = 1e-6
  c.optim.weight_decay = 0.1
  c.optim.warmup_steps = 10
  c.checkpoint.every = 25

  c.eval.tasks_per_subtask = 50  # the paper's test set: 5 x 50
  c.eval.every_steps = 50

  if args.smoke:
    c.model.init.preset = "tiny"  # a from-scratch model in place of the checkpoint
    c.model.init.tokenizer = "task_bpe"
    c.model.init.vocab_size = 1024
    c.model.init.corpus_tasks = 20
    c.model.compute_dtype = "float32"
    c.mesh.fsdp = 1
    c.mesh.tensor = 1
    c.distributed.initialize = False
    c.judge.backend = "rubric"  # the local programmatic judge in place of the endpoint
    c.env.schemas = "compact"
    c.env.travel.train_per_subtask = 4
    c.env.travel.test_per_subtask = 2
    c.data.sft_seq_len = 1536
    c.data.sft_batch_size = 8
    c.sft.steps = 1  # one update shows the path (the suite runs it on 8 slow fake devices)
    c.sft.warmup_steps = 0
    c.sft.accumulation_steps = 1
    c.sft.log_every = 1
    c.sampling.group_size = 2
    c.sampling.max_new_tokens = 8
    c.sampling.max_turns = 1
    c.sampling.cache_len = 2048
    c.sampling.prompt_buckets = (256, 512, 1024, 2048)
    c.rl.prompts_per_step = 2
    c.rl.steps = 1
    c.rl.minibatches_per_rollout = 1
    c.rl.accumulation_steps = 1
    c.rl.bucket = 64
    c.rl.logprob_chunk = 64
    c.checkpoint.every = 1
    c.eval.tasks_per_subtask = 1
    c.eval.every_steps = 0
    c.eval.bootstrap_samples = 100
    c.metrics.progress = False
  c.lock()
  return c
