"""Does the tournament's topology change what RL learns? The quickstart trained with each of the
five topologies from one shared SFT checkpoint, under its noisy rubric judge.

  python -m arenarl_jax.experiments.run experiments/topologies               # full (about 1 h)
  python -m arenarl_jax.experiments.run experiments/topologies --preset=smoke

Arms: ``tournament.topology`` = anchor | swiss | double_elimination | single_elimination |
round_robin, three seeds each (``configs/quickstart.py:start=reading``, groups of 4). Besides the outcomes, the
README block reports each topology's judge requests per group, how well its rewards recovered
the noise-free checker's order within its own training groups (``reward/checker_tau``), the
paper's win rate beside ours, and the correlation over runs between that recovery and the gain.
"""
from arenarl_jax.experiments import Claim, Run, run_stats

TOPOLOGIES = ("anchor", "swiss", "double_elimination", "single_elimination", "round_robin")
# arXiv 2601.06487, topology ablation: Open-Travel average win rate after RL, per topology.
PAPER_WIN = {"anchor": 27.8, "swiss": 28.3, "double_elimination": 30.2,
             "single_elimination": 32.5, "round_robin": 32.9}
SOURCE = "arXiv 2601.06487, topology ablation"
SEEDS = (0, 1, 2)
# The SFT start whose calls read the query: there the noise-free checker scores a group's
# trajectories apart, so a ranking can recover something (configs/quickstart.py says why).
CONFIG = "configs/quickstart.py:start=reading"


def _claims():
  out = []
  for arm in TOPOLOGIES[1:]:
    for metric in ("win_vs_reference", "met"):
      out.append(Claim(f"{arm} above anchor", metric, arm, "anchor",
                       source=f"{SOURCE}: {PAPER_WIN[arm]} vs {PAPER_WIN['anchor']}"))
  for versus in ("swiss", "double_elimination"):
    out.append(Claim(f"single_elimination above {versus}", "win_vs_reference",
                     "single_elimination", versus,
                     source=f"{SOURCE}: {PAPER_WIN['single_elimination']} vs "
                            f"{PAPER_WIN[versus]}"))
  return tuple(out)


CLAIMS = _claims()


def runs(preset):
  if preset == "full":
    return [Run(f"{t}_s{seed}", t, CONFIG, seed, {"tournament.topology": t})
            for t in TOPOLOGIES for seed in SEEDS]
  if preset == "smoke":  # seconds per run: two topologies, one group of 4, one step
    return [Run(f"{t}_s0", t, "configs/quickstart.py:smoke", 0,
                {"tournament.topology": t, "sampling.group_size": 4, "rl.prompts_per_step": 1,
                 "rl.steps": 1}) for t in ("anchor", "round_robin")]
  raise ValueError(f"unknown preset {preset!r}; known: full, smoke")


def report(results):
  """Judge cost and rank recovery per topology, the paper beside ours, and recovery vs gain."""
  lines = ["Per topology: judge requests per group and the rank recovery of its training groups "
           "(`reward/checker_tau`: Kendall's tau-b between a group's rewards and the noise-free "
           "checker's scores, mean over the groups where both vary, then over steps and seeds); "
           "the requirements-met gain is the mean per seed of end minus start.", "",
           "| topology | paper win rate (%) | requests / group | rank recovery (tau) | "
           "groups with a tau | met gain per seed |", "|---|---|---|---|---|---|"]
  for arm in TOPOLOGIES:
    runs_ = run_stats.arm_runs(results, arm)
    if not runs_:
      continue
    gains = ", ".join(run_stats.fmt(run_stats.gain(r, "met"), 4, True) for r in runs_)
    lines.append(f"| {arm} | {PAPER_WIN[arm]} | "
                 f"{run_stats.fmt(run_stats.arm_step_mean(results, arm, 'judge/requests_per_group'), 1)} | "
                 f"{run_stats.fmt(run_stats.arm_step_mean(results, arm, 'reward/checker_tau'))} | "
                 f"{run_stats.fmt(run_stats.arm_step_mean(results, arm, 'reward/checker_tau_groups'), 2)} | "
                 f"{gains} |")
  taus = [run_stats.step_mean(r, "reward/checker_tau") for r in results]
  lines.append("")
  for metric, label in (("met", "requirements-met gain"), ("win_vs_reference",
                                                            "win-vs-reference gain")):
    r, low, high, n = run_stats.correlation(taus, [run_stats.gain(x, metric) for x in results])
    lines.append(f"- Correlation over runs of rank recovery with the {label}: Pearson r = "
                 f"{run_stats.fmt(r, 2, True)} [{run_stats.fmt(low, 2, True)}, "
                 f"{run_stats.fmt(high, 2, True)}] (95% bootstrap over runs, n = {n}).")
  return lines
