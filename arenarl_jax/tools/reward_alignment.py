"""Does the training judge's truth point where the strict verifier counts? Measured on groups.

RL moves the policy towards what wins its groups. With a rubric judge, what wins (noise aside) is
the environment's checker: its dimension scores combined by the rubric's weights. Evaluation counts
something else, the strict verifier's requirements met. This asks, on groups like the training
ones (the greedy anchor in row 0, the other rows sampled), whether the checker's order agrees with
the verifier's and whether the trajectory the checker puts first meets more than the greedy one.
The evaluation is greedy, so only a choice that beats the anchor can move it. Nothing here enters
training or the evaluation's metrics.

Per task (a group of G trajectories, row 0 the anchor):
  tau             Kendall's tau-b between the checker's combined score and the met fraction
                  (over the groups where both vary; ``groups_ordered`` is their share)
  pick_gain       met of the checker's first choice (the mean over tied first places) minus the
                  group's mean met: what selecting by the checker buys over a random pick
  pick_vs_anchor  the same minus the anchor's met, with a 95% bootstrap interval over tasks

The groups come from an evaluation of several trajectories per task, e.g.

  python -m arenarl_jax.main --config=configs/quickstart.py --workdir=W --mode=eval \\
      --config.eval.split=valid --config.eval.group_size=8 --config.eval.greedy=False

on a run's checkpoint; then

  python -m arenarl_jax.tools.reward_alignment --workdir=W [--file=W/eval/eval_00000000.jsonl]
      [--set=travel.wrong_fact_cost=1 ...] [--judge]

scores them with the run's environment (``config.json``; ``--set`` changes ``env.*`` keys, e.g.
to compare checker settings on the same trajectories), or with ``--judge`` by the base rewards
one training step gives them (the run's training judge, its noise included, and its advantage
source, e.g. the tournament), and ends with
``RESULT tasks=... groups_ordered=... tau=... pick_gain=... pick_vs_anchor=...
pick_vs_anchor_ci_low=... pick_vs_anchor_ci_high=...``.
"""
from __future__ import annotations

import collections
from typing import Any, Callable, Mapping, Sequence

import numpy as np

from arenarl_jax import config_tree, run_config
from arenarl_jax.eval import bootstrap
from arenarl_jax.eval import run as eval_run
from arenarl_jax.rl import stats
from arenarl_jax.text import messages as messages_lib


def alignment(score_BG: np.ndarray, met_BG: np.ndarray, *, samples: int = 1000,
              seed: int = 0) -> dict[str, float]:
  """The module doc's measures from each group's checker scores and met fractions (row 0 = the
  anchor); B tasks of G trajectories."""
  score_BG, met_BG = np.asarray(score_BG, np.float64), np.asarray(met_BG, np.float64)
  if score_BG.shape != met_BG.shape or score_BG.ndim != 2 or score_BG.shape[1] < 2:
    raise ValueError(f"alignment: scores {score_BG.shape} and met {met_BG.shape} must both be "
                     "[tasks, G >= 2]")
  top_BG = score_BG == score_BG.max(axis=1, keepdims=True)
  pick_B = (met_BG * top_BG).sum(axis=1) / top_BG.sum(axis=1)
  vs_anchor_B = pick_B - met_BG[:, 0]
  low, high = bootstrap.mean_interval(vs_anchor_B, samples, seed)
  agree = stats.checker_agreement(score_BG, met_BG)
  return {"tasks": len(score_BG), "groups_ordered": agree["reward/checker_tau_groups"],
          "tau": agree.get("reward/checker_tau", float("nan")),
          "pick_gain": float((pick_B - met_BG.mean(axis=1)).mean()),
          "pick_vs_anchor": float(vs_anchor_B.mean()), "pick_vs_anchor_ci_low": low,
          "pick_vs_anchor_ci_high": high}


def groups(rows: Sequence[Mapping[str, Any]]) -> list[list[Mapping[str, Any]]]:
  """An evaluation file's trajectory rows grouped by task, in file order (row 0 = the anchor);
  every task must have the same number of rows."""
  by_task: dict[str, list[Mapping[str, Any]]] = collections.defaultdict(list)
  for row in rows:
    if row.get("kind") == "trajectory":
      by_task[row["task_id"]].append(row)
  sizes = {len(g) for g in by_task.values()}
  if not by_task or len(sizes) != 1 or sizes == {1}:
    raise ValueError(f"reward_alignment: need the same number (>= 2) of trajectories per task, "
                     f"got group sizes {sorted(sizes)} (evaluate with eval.group_size > 1)")
  return [sorted(g, key=lambda r: r["index"]) for g in by_task.values()]


def trajectory(row: Mapping[str, Any]) -> Any:
  return messages_lib.trajectory_from_messages(
      row["messages"], metadata=row.get("metadata") or {"task_id": row["task_id"]},
      finish_reason=row.get("finish_reason"))


def measure(env: Any, rows: Sequence[Mapping[str, Any]], *, judged: Callable | None = None,
            **kwargs) -> dict[str, float]:
  """:func:`alignment` of an evaluation file's rows, scored by ``env``'s checker, or with
  ``judged`` (groups of trajectories -> rewards [B, G]) by a training judge's rewards."""
  grouped = groups(rows)
  trajectories = [[trajectory(r) for r in g] for g in grouped]
  if judged is None:
    # The noise-free rubric judge's pointwise score: the checker's, combined by the rubric.
    flat = eval_run.checker_judge(env).score([t for g in trajectories for t in g]).scores
    score_BG = np.asarray(flat, np.float64).reshape(len(grouped), -1)
  else:
    score_BG = np.asarray(judged(trajectories))
  met_BG = [[r["met"] / r["total"] for r in g] for g in grouped]
  return alignment(score_BG, np.array(met_BG), **kwargs)


def training_rewards(config: Any, env: Any) -> Callable:
  """Groups -> the base rewards one training step gives them: the run's judge (its noise
  included) and advantage source (``advantage.source``, e.g. the tournament), at step 0."""
  from arenarl_jax import pipeline  # pylint: disable=g-import-not-at-top  (pulls in jax)
  from arenarl_jax.rl import advantages  # pylint: disable=g-import-not-at-top
  judge = pipeline.make_training_judge(config, env)
  source = advantages.get_source(config.advantage.source)
  return lambda grouped: source(grouped, judge, config, step=0).rewards_BG


def set_env_key(config: Any, item: str) -> None:
  """Applies ``KEY=VALUE`` to ``config.env`` (``KEY`` dotted below ``env``, the value cast to the
  key's type)."""
  key, sep, value = item.partition("=")
  current = config_tree.flat(config.env.to_dict())
  if not sep or key not in current:
    raise ValueError(f"--set {item!r}: expected KEY=VALUE with env.KEY a config key")
  config.update_from_flattened_dict({f"env.{key}": type(current[key])(value)})


def main(argv: Sequence[str] | None = None) -> dict[str, float]:
  import argparse  # pylint: disable=g-import-not-at-top
  import os  # pylint: disable=g-import-not-at-top

  from arenarl_jax import jsonl  # pylint: disable=g-import-not-at-top
  from arenarl_jax.envs import base  # pylint: disable=g-import-not-at-top
  parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
  parser.add_argument("--workdir", required=True, help="a run's workdir (with config.json)")
  parser.add_argument("--file", default="", help="an evaluation jsonl; default: the workdir's "
                      "step-0 evaluation (eval/eval_00000000.jsonl)")
  parser.add_argument("--set", action="append", default=[], metavar="KEY=VALUE",
                      help="an env.* config key for scoring, e.g. travel.wrong_fact_cost=1")
  parser.add_argument("--judge", action="store_true",
                      help="score by one training step's rewards (the run's judge, noise "
                      "included, and its tournament) instead of the noise-free checker")
  args = parser.parse_args(argv)
  config = run_config.read(args.workdir)  # today's defaults under the run's keys
  for item in args.set:
    set_env_key(config, item)
  path = args.file or os.path.join(args.workdir, "eval", "eval_00000000.jsonl")
  env = base.make_environment_from_config(config.env)
  judged = training_rewards(config, env) if args.judge else None
  out = measure(env, jsonl.read_jsonl(path), judged=judged)
  what = "the training judge's rewards" if args.judge else "the checker's order"
  print(f"{path}: {out['tasks']} tasks; {what} vs met: tau {out['tau']:.3f} over "
        f"{out['groups_ordered']:.0%} of the groups; their pick meets "
        f"{out['pick_gain']:+.4f} over the group mean and {out['pick_vs_anchor']:+.4f} "
        f"[{out['pick_vs_anchor_ci_low']:+.4f}, {out['pick_vs_anchor_ci_high']:+.4f}] over the "
        "greedy anchor")
  print("RESULT " + " ".join(f"{k}={v:.4f}" if isinstance(v, float) else f"{k}={v}"
                             for k, v in out.items()))
  return out


if __name__ == "__main__":
  main()
