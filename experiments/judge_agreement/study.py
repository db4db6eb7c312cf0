"""How far each judge can be trusted: travel pairs whose better member the noise-free checker
knows, judged by every judge available here (``arenarl_jax/experiments/agreement.py``).

  python -m arenarl_jax.experiments.agreement experiments/judge_agreement            # ~1 hour
  python -m arenarl_jax.experiments.agreement experiments/judge_agreement --preset=smoke

Judges (full preset), the model judges first:
  flax_logit       the local Flax judge on SmolLM2-135M, logit mode (score expectations)
  flax_generative  the same model writing the compact verdict, greedy, under its grammar
  http_llamacpp    the HTTP judge against llama-cpp-python's server (the one the test setup
                   installs) with SmolLM2-135M Q4_1, verdicts constrained by the same grammar
  rubric_exact     the rubric judge without noise: the checker itself (the reference: it agrees
                   with the checker by construction)
  rubric_noisy     the rubric judge at the quickstart's noise levels (``NOISY_RUBRIC_JUDGE``): the
                   checker plus stated noise (the control)
The three SmolLM2 judges read the same prompt text (``RENDER``; no prompt is refitted). Only the
model judges get checks (verdicts): the rubric judges are built from the checker, so a check of
their agreement with it would hold by construction.
"""
from arenarl_jax import config_tree
from arenarl_jax.experiments.agreement import BINS, JudgeSpec, PairSet
from arenarl_jax.experiments.agreement_metrics import Check

# Prompt budgets of the text judges: tool results and reasoning cut so that the longest pair
# (multi_day, ~6,000 tokens whole) fits 4,352 tokens of the Flax judge and the server's context.
RENDER = {"max_tool_result_chars": 700, "max_path_chars": 4000, "max_reasoning_chars": 300}
MAX_USER_TOKENS = 4352
PER_BIN = 6  # full preset: pairs per gap bin, spread over the five subtasks (18 pairs, ~1 hour)
PRESETS = ("full", "smoke", "smoke_flax")
# smoke_flax: the Flax judge's mechanics on a random 2-layer model, prompts cut to ~700 tokens
# (~25 s, mostly compiling; not in the test suite).
TINY_RENDER = {"max_tool_result_chars": 80, "max_path_chars": 500, "max_reasoning_chars": 60,
               "max_query_chars": 400, "max_answer_chars": 500}

CHECKS = (
    Check("SmolLM2 in logit mode agrees with the checker above chance", "flax_logit",
          "agreement", 0.5, source="configs with judge.backend=flax"),
    Check("SmolLM2 in generative mode agrees with the checker above chance", "flax_generative",
          "agreement", 0.5, source="configs with judge.backend=flax"),
    Check("SmolLM2 behind llama.cpp's server agrees with the checker above chance",
          "http_llamacpp", "agreement", 0.5, source="configs with judge.backend=http"),
)


def pair_set(preset):
  if preset == "full":  # every subtask, three gap bins
    return PairSet(per_bin=PER_BIN, bins=BINS)
  if preset == "smoke":  # seconds: two subtasks, one pair per bin each
    return PairSet(per_bin=2, subtasks=("search", "direction"), bins=BINS)
  if preset == "smoke_flax":  # one subtask
    return PairSet(per_bin=1, subtasks=("search",), bins=BINS)
  raise ValueError(f"unknown preset {preset!r}; known: {PRESETS}")


def judges(preset):
  rubric = [JudgeSpec("rubric_exact", "rubric", "rubric, no noise"),
            JudgeSpec("rubric_noisy", "rubric", "rubric, quickstart noise",
                      {"noise": dict(config_tree.NOISY_RUBRIC_JUDGE)})]
  if preset == "smoke":
    return rubric
  if preset == "smoke_flax":
    return rubric + [JudgeSpec("flax_tiny", "flax", "flax logit, tiny random model", {
        "model": "tiny", "render": TINY_RENDER, "flax": {
            "mode": "logit", "max_user_tokens": 768, "min_bucket": 768, "max_rows": 16,
            "min_shared_tokens": 0}})]
  if preset != "full":
    raise ValueError(f"unknown preset {preset!r}; known: {PRESETS}")
  # The model judges first, then the reference and the control.
  # Few compiled programs: 1,024-token buckets and blocks (the default 128-token blocks unroll
  # ~34 pieces for a 4,352-token prompt: minutes of compiling per program on 2 cores), all pairs
  # in one call so that rows of similar length share programs.
  flax = {"max_user_tokens": MAX_USER_TOKENS, "max_rows": 8, "min_bucket": 1024,
          "bucket_step": 1024, "block_tokens": 1024, "min_shared_tokens": 0}
  return [
      JudgeSpec("flax_logit", "flax", "SmolLM2 flax logit", {
          "model": "smollm2", "render": RENDER, "flax": {**flax, "mode": "logit"}}),
      JudgeSpec("flax_generative", "flax", "SmolLM2 flax generative", {
          "model": "smollm2", "render": RENDER,
          "flax": {**flax, "mode": "generative", "max_new_tokens": 192}}),
      JudgeSpec("http_llamacpp", "http", "SmolLM2 llama.cpp HTTP", {
          "server": "python", "n_threads": 2, "n_ctx": 6144, "render": RENDER, "chunk": 4}),
  ] + rubric
