"""The README's main job: SFT -> ArenaRL -> evaluation of a small model trained from scratch.

  python -m arenarl_jax.main --config=configs/quickstart.py --workdir=runs/quickstart

On the travel environment: a 2-layer Llama-family model (``model.init.preset=quickstart``) with a
4,096-token BPE trained on the environment's text plus one id per city and place name
(``arenarl_jax/text/task_tokenizer.py`` says why), SFT on the expert's conversations, then
ArenaRL (seeded single elimination, groups of 4 with a greedy anchor, a KL penalty) trained
against the rubric judge under a stated noise model (below), then the policy's greedy rollouts of
all 250 held-out test tasks (50 per subtask) judged by the strict verifier and by the NOISE-FREE
checker against the references and against the SFT policy it started from. Prints the SFT
loss, the results table of the starting policy (step 0) and of the final one (per subtask: valid
rate, win rate vs reference and vs SFT with 95% bootstrap intervals over tasks, judged + failed
matches), the time per stage, and ends with
``RESULT win_rate_vs_sft=... ci_low=... ci_high=... win_rate_vs_reference=...``. Outputs in the
workdir: tokenizer/, sft/ (curve, checkpoint), metrics.jsonl + tb/ (RL), checkpoints/, eval/
(one jsonl of trajectories and match logs per evaluation, summary.jsonl), curves.png.

Training judge noise model (``judge.noise``): every dimension score gets N(0, 1.0) per request,
each pairwise request an extra N(0, 1.0) split between the two sides and a +0.5 position bias for
Agent A; pointwise scores saturate above 8 (a judge that calls every good answer 8); scores are
rounded to integers. The bidirectional pairwise play cancels the position bias; the rest is noise
the tournament has to live with.

The SFT start (``start=``, chosen on validation tasks: ``--config.eval.split=valid``, 100 tasks,
greedy; commands and the full table in benchmarks/README.md, Quickstart):
  - ``kinds`` (the default): each city and place one id (``model.init.whole_names``) whose
    embedding starts from a vector shared by its kind (``model.init.name_init=by_kind``,
    arenarl_jax/sft/name_init.py says why), no tool list in the prompt (``env.schemas=none``:
    the query ~20 tokens into a row, not ~560), 200 of the 800 SFT updates on 32 short rows
    cut after the first assistant turn (``sft.first_turn_steps``), and the answer turn trained
    without the expert's one-line ``<think>`` block (``sft.reasoning=calls``; the calling
    turns keep theirs), 8 conversations per whole-row update (``data.sft_batch_size=8``).
    Valid 0.82, limit stops 0.08, met 0.102. With 4 conversations per update: 0.75, 0.06,
    0.078; with every turn's reasoning also: 0.57, 0.10, 0.062, most invalid answers written
    inside a ``<think>`` never closed; with no reasoning at all: 0.50, 0.28, 0.047; ``calls``
    with 1,200 updates of 4: 0.74, 0.14, 0.114; SFT lr 6e-3 (4 per update): 0.43, 0.04, 0.037.
    With every turn's reasoning, 237 of its 239 first-turn calls that name a city name the
    query's, 3 of 91 that name a place the query's.
  - ``reading``: the same with random name embeddings and every turn's reasoning: valid 0.24,
    limit stops 0.11, met 0.031, 224 of 226 cities, 0 of 80 places (the start of the training
    studies in experiments/).
  - ``plain``: the task BPE without whole names, compact tool schemas, 240 SFT updates (a quarter
    of the time): valid 0.35, limit stops 0.60, met 0.030; its calls name a memorised city
    (4 of 245 the query's; ``python -m arenarl_jax.tools.query_reading`` gives its first turn the
    same score after another task's query), so the noise-free checker scores almost every
    training trajectory 0 (``reward/checker_mean``): its groups' rankings are the judge's noise.
Also tried: ``sft.context_weight`` (the query and tool results trained too) makes the policy
write tool results in its answers (85% invalid); two LR schedules for the two SFT phases gave
valid 0.56, met 0.049 on the ``reading`` start; with ``sft.reasoning=calls``, a third layer
gave valid 0.60, met 0.058, and a 192-wide model valid 0.57, met 0.057.

RL: the method's KL penalty, ``loss.kl_coef=0.02``, and ``optim.lr=5e-5``. On all 250 validation
tasks, 8 steps from the ``calls`` start with 4 conversations per update change met by +0.0002
[-0.0074, +0.0082] (valid 0.72 -> 0.75, limit stops 0.04); lr 3e-4 by -0.0140 [-0.0234, -0.0043]
(limit stops 0.20); 24 steps by -0.0058 [-0.0141, +0.0029]. From the 1,200-update start: -0.0126
[-0.0201, -0.0051] at 5e-5, -0.0096 at 3e-4, -0.0063 [-0.0139, +0.0011] with the judge's noise
removed, and -0.0009 [-0.0091, +0.0073] with advantages permuted within each group (no
information): the ranking does worse than none.
Before ``sft.reasoning=calls``, from the ``kinds`` start the tournament's rewards recovered the
noise-free checker's order within a group (Kendall tau about 0.7, ``reward/checker_tau``), yet
8 steps do not move the met rate on validation: -0.0038
[-0.0148, +0.0071] at lr 5e-5, +0.0009 [-0.0129, +0.0140] at 3e-4 (limit stops 0.18), and
lr 1e-3 collapses the policy (valid 0.07); 16 steps at 5e-5 give -0.0050 [-0.0169, +0.0079] with
limit stops rising to 0.14. On the ``reading`` start kl_coef 0.02 against 0
gave -0.0045 [-0.0146, +0.0058] and -0.0085 [-0.0176, +0.0009]: no sign that it hurts.
Why RL does not raise met: with the judge's noise removed, 60 steps lower it by 0.031 [0.015,
0.048]. The checker gives answer credit to 2 of this start's 100 validation answers, so every
ranking is by path alone, and RL trades answers for tool calls (benchmarks/README.md, "What RL
does with a perfect judge"). From the ``calls`` starts the verifier credits some requirement of
the answer on 34 (800 updates) and 75 (1,200) of the 250 validation answers, yet the checker
gives answer credit to 5 and 7: those answers state a median of 7 wrong figures, and every wrong
figure beyond the second costs answer credit (``envs/travel/checker.py``), so the tournament
still ranks by path alone. On groups of 8 from the default start (the greedy anchor and 7
samples, 250 validation tasks; ``python -m arenarl_jax.tools.reward_alignment``), the judge's first
choice meets 0.029 [0.018, 0.041] less than the anchor; with ``env.travel.wrong_fact_cost=1``
and ``sampling.temperature=0.5`` it meets 0.004 [-0.003, +0.012] more, yet 8 steps of that
signal, even with the judge's noise removed, change met by +0.0014 [-0.0047, +0.0073] (the
default: +0.0033 [-0.0030, +0.0103]); ``multi_day``, held out of SFT, loses valid answers in
every run (benchmarks/README.md, "Does the training signal pick what the verifier counts?").
No judge can do better at this scale: a judge of exactly what the verifier counts
(``judge.backend=verifier``, a ceiling diagnostic, never a method) changes met by -0.0019
[-0.0087, +0.0046] in 8 steps and +0.0012 [-0.0073, +0.0094] in 32 on validation, while the
reference's seed tie-break in single elimination, which spreads a tied group's advantages by
seed, took 32 steps of it to -0.0170 [-0.0259, -0.0084] (benchmarks/README.md, "The judge's
ceiling"). With no seed deciding a standing (tournament/single_elimination.py), the default's
RL on the 250 validation tasks: 8 steps +0.0007 [-0.0060, +0.0072] (valid 0.82 -> 0.804, limit
stops 0.09), 16 steps +0.0043 [-0.0027, +0.0110] (0.836, 0.06), 24 steps +0.0049 [-0.0029,
+0.0128] (0.808, 0.06): ``rl.steps=16``, the best valid rate and about the best met.

Args (after a colon, comma-separated): method=arenarl|grpo|gspo, topology=<tournament topology>,
group_size=<G>, start=kinds|reading|plain (above), long (the same model, judge, sampling and
evaluation with twice the SFT updates and 240 RL steps instead of 16; run once, 45 min, before
``sft.reasoning=calls`` and the cut SFT rows; its outcome is in benchmarks/README.md,
Quickstart), smoke (seconds: a tiny model and a handful of tasks, for the test suite), runlocal
(the old name of smoke), e.g.
  --config=configs/quickstart.py:smoke
  --config=configs/quickstart.py:long
"""
from arenarl_jax import config_tree

ARGS = {"method": "arenarl", "topology": "single_elimination", "group_size": 4,
        "start": "kinds", "long": False, "smoke": False, "runlocal": False,
        "build_start": False}
STARTS = ("kinds", "reading", "plain")


def get_config(arg=None):
  args = config_tree.parse_arg(arg, ARGS)
  c = config_tree.make_base_config()
  config_tree.apply_preset(c, args.method)
  c.model.init.preset = "quickstart"
  c.model.init.tokenizer = "task_bpe"
  c.model.init.vocab_size = 4096
  c.env.name = "travel"
  c.env.schemas = "compact"  # names, argument names and types: ~600 fewer prompt tokens
  config_tree.use_noisy_rubric_judge(c)  # the stated noise model, on the environment's rubric
  c.tournament.topology = args.topology

  c.data.sft_seq_len = 1856
  c.data.sft_batch_size = 4
  c.sft.steps = 240
  c.sft.lr = 3e-3
  c.sft.warmup_steps = 10
  c.sft.log_every = 10

  c.sampling.group_size = args.group_size
  c.sampling.temperature = 0.8
  # Limits from the data (python -m arenarl_jax.tools.budgets, tests/data/test_budgets.py): the
  # expert's 99th-percentile turn is 288 tokens (multi_day), its most tool turns 2, its longest
  # conversation 2,147 tokens (multi_day), all on validation tasks in the default start's
  # tokenizer (whole names, no tool list); start=plain: 280, 2 and 2,876.
  c.sampling.max_new_tokens = 288
  c.sampling.max_turns = 2
  c.sampling.cache_len = 3072
  c.rl.prompts_per_step = 4
  c.rl.steps = 16  # chosen on validation (the docstring's RL paragraph)
  c.rl.minibatches_per_rollout = 2
  c.rl.bucket = 256
  c.optim.lr = 5e-5
  c.optim.weight_decay = 0.0
  c.loss.kl_coef = 0.02
  c.checkpoint.every = 4

  if args.start not in STARTS:
    raise ValueError(f"configs/quickstart.py: start={args.start!r}; known: {', '.join(STARTS)}")
  if args.start != "plain":  # chosen on validation tasks (above)
    c.model.init.whole_names = True
    c.model.init.name_init = "by_kind" if args.start == "kinds" else "random"
    c.env.schemas = "none"
    c.sft.steps = 800
    c.sft.first_turn_steps = 200
  if args.start == "kinds":
    c.sft.reasoning = "calls"  # the answer turn starts with the answer: no unclosed <think>
    c.data.sft_batch_size = 8  # chosen on validation (above): valid 0.75 -> 0.82

  if args.long:  # not tuned: the default run at scale, to see what more updates buy
    c.sft.steps *= 2
    c.sft.first_turn_steps *= 2
    c.rl.steps = 240
    c.checkpoint.every = 40

  c.eval.tasks_per_subtask = 50  # 5 subtasks x 50 = all 250 held-out test tasks
  c.eval.every_steps = 0
  c.eval.group_size = 1
  c.eval.greedy = True

  if args.build_start:  # the pinned start (arenarl_jax/sft/start.py): SFT, greedy validation
    c.start.name = "travel_quickstart"
    c.start.build = True
    c.eval.split = "valid"

  if args.smoke or args.runlocal:
    c.model.init.preset = "tiny"
    c.model.init.vocab_size = 1024
    c.model.init.corpus_tasks = 20
    c.env.travel.train_per_subtask = 4
    c.env.travel.test_per_subtask = 2
    c.data.sft_seq_len = 1536
    c.data.sft_batch_size = 8
    c.sft.steps = 2
    c.sft.first_turn_steps = 1  # the first-turn phase, exercised
    c.sft.first_turn_rows = 8
    c.sft.warmup_steps = 0
    c.sft.log_every = 1
    c.sampling.group_size = 2
    c.sampling.max_new_tokens = 8
    c.sampling.max_turns = 1
    c.sampling.cache_len = 2048
    c.rl.prompts_per_step = 2
    c.rl.steps = 2
    c.rl.minibatches_per_rollout = 1
    c.rl.bucket = 64
    c.eval.tasks_per_subtask = 1
    c.eval.bootstrap_samples = 100
    c.metrics.progress = False
  c.lock()
  return c
