"""Does a larger group help at equal compute? ArenaRL with groups of 4, 8 and 16 trajectories
and the same 16 trajectories per RL step, from one shared SFT checkpoint.

  python -m arenarl_jax.experiments.run experiments/group_size               # full (about 40 min)
  python -m arenarl_jax.experiments.run experiments/group_size --preset=smoke

Arms ``n4``, ``n8``, ``n16``: ``sampling.group_size`` = N and ``rl.prompts_per_step`` = 16 / N
(4, 2, 1 prompts), so every step samples, scores and trains on 16 trajectories; three seeds each
of ``configs/quickstart.py:start=reading`` (seeded single elimination). The paper (arXiv
2601.06487, main results and analysis) reports that a larger N helps monotonically, N = 16 best.
What a step costs in judge requests is not equal: seeded single elimination plays 2(N - 1)
matches per group, so 4(N - 1) requests, 48 / 56 / 60 per step for the three arms.
"""
from arenarl_jax.experiments import Claim, Run, run_stats

SIZES = (4, 8, 16)
TRAJECTORIES_PER_STEP = 16
SEEDS = (0, 1, 2)
CONFIG = "configs/quickstart.py:start=reading"  # the topologies study says why
SOURCE = ("arXiv 2601.06487, main results and analysis: larger N helps monotonically, "
          "N = 16 best")

CLAIMS = tuple(Claim(f"N = {big} above N = {small}", metric, f"n{big}", f"n{small}", source=SOURCE)
               for big, small in ((8, 4), (16, 8), (16, 4))
               for metric in ("win_vs_reference", "met"))


def _overrides(n, per_step):
  return {"sampling.group_size": n, "rl.prompts_per_step": per_step // n}


def runs(preset):
  if preset == "full":
    return [Run(f"n{n}_s{seed}", f"n{n}", CONFIG, seed,
                _overrides(n, TRAJECTORIES_PER_STEP)) for n in SIZES for seed in SEEDS]
  if preset == "smoke":  # seconds per run: 4 trajectories per step as 2 x 2 and 1 x 4, one step
    return [Run(f"n{n}_s0", f"n{n}", "configs/quickstart.py:smoke", 0,
                {**_overrides(n, 4), "rl.steps": 1}) for n in (2, 4)]
  raise ValueError(f"unknown preset {preset!r}; known: full, smoke")


def report(results):
  """Judge requests per step and per group, and rank recovery, per group size."""
  lines = ["Per group size: judge requests per step and per group (measured), and the rank "
           "recovery of its training groups (`reward/checker_tau`, as in the topologies study); "
           "the requirements-met gain is the mean per seed of end minus start.", "",
           "| arm | requests / step | requests / group | rank recovery (tau) | met gain per seed |",
           "|---|---|---|---|---|"]
  arms = list(dict.fromkeys(r["arm"] for r in results))
  for arm in arms:
    runs_ = run_stats.arm_runs(results, arm)
    gains = ", ".join(run_stats.fmt(run_stats.gain(r, "met"), 4, True) for r in runs_)
    lines.append(f"| {arm} | "
                 f"{run_stats.fmt(run_stats.arm_step_mean(results, arm, 'judge/requests'), 1)} | "
                 f"{run_stats.fmt(run_stats.arm_step_mean(results, arm, 'judge/requests_per_group'), 1)} | "
                 f"{run_stats.fmt(run_stats.arm_step_mean(results, arm, 'reward/checker_tau'))} | "
                 f"{gains} |")
  return lines
