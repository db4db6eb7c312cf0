"""Does ArenaRL raise valid generations on deep research? The research quickstart's SFT start
against the same start after ArenaRL, three seeds, and what the invalid outputs are.

  python -m arenarl_jax.experiments.run experiments/valid_generation               # full
  python -m arenarl_jax.experiments.run experiments/valid_generation --preset=smoke

Every run is ``configs/research_quickstart.py`` (SFT, then ArenaRL against the noisy rubric
judge, then greedy rollouts of the 60 held-out research tasks) from ONE shared SFT checkpoint;
the seed moves the RL stage only, so "before" is the shared start's evaluation and "after" each
run's final one. The paper (arXiv 2601.06487, main results and analysis) reports valid
generations rising from the SFT model's 32% to 99% on Open-DeepResearch, with a 64.3% win rate.
"""
from arenarl_jax.experiments import Claim, Run, run_stats

SEEDS = (0, 1, 2)
CONFIG = "configs/research_quickstart.py"
CLAIMS = (
    Claim("ArenaRL raises valid generations over its SFT start", "valid", "arena", "start",
          source="arXiv 2601.06487, analysis: valid generations SFT 32% -> ArenaRL 99%"),
    Claim("ArenaRL wins more often against the references than its SFT start",
          "win_vs_reference", "arena", "start",
          source="arXiv 2601.06487, main results: 64.3 win rate"),
    Claim("ArenaRL solves more tasks than its SFT start", "solved", "arena", "start",
          source="arXiv 2601.06487, main results"),
)


def runs(preset):
  if preset == "full":
    return [Run(f"arena_s{seed}", "arena", CONFIG, seed) for seed in SEEDS]
  if preset == "smoke":  # seconds: the research smoke, one RL step
    return [Run("arena_s0", "arena", CONFIG + ":smoke", 0, {"rl.steps": 1})]
  raise ValueError(f"unknown preset {preset!r}; known: full, smoke")


def report(results):
  """How the evaluated trajectories ended, before (the shared SFT start) and after each run."""
  runs_ = run_stats.arm_runs(results, "arena")
  if not runs_:
    return []
  start = runs_[0].get("finish", {}).get("start", {})
  ends = [r.get("finish", {}).get("end", {}) for r in runs_]
  reasons = sorted(set(start).union(*ends), key=lambda k: (k != "answer", k))
  head = ["how a trajectory ended", "SFT start"] + [f"after RL, seed {r['seed']}" for r in runs_]
  lines = ["How the evaluated trajectories ended (counts over the test tasks; `answer` is a valid "
           "generation, `invalid: ...` the environment's reason, numbers written N):", "",
           "| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
  for reason in reasons:
    lines.append(f"| {reason} | {start.get(reason, 0)} | "
                 + " | ".join(str(e.get(reason, 0)) for e in ends) + " |")
  return lines
