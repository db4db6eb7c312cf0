"""Can RL gain here? What the policy's own samples meet that its greedy answer does not.

RL moves the policy towards its better samples; the evaluation is greedy. If no sample of a task
meets more of the strict verifier's requirements than the greedy trajectory, there is nothing in
the groups for RL to pick, whatever the judge. So before RL is spent, each task gets a group of
k + 1 trajectories (row 0 greedy, the anchor; rows 1..k sampled at ``sampling.temperature``,
as the evaluation's ``eval.group_size=k+1 eval.greedy=False`` rolls them out) and every
trajectory is scored by ``env.verify``. Nothing here enters training or the evaluation.

Per task (means over tasks; 95% bootstrap intervals over tasks, paired: the same resamples for
every measure, ``eval/bootstrap.py``):
  greedy_met          row 0's met fraction (met / total); greedy_solved: row 0 solved
  sampled_met         the mean met fraction of rows 1..k
  best_of_k_met       the largest met fraction of rows 1..k (the verifier picks; greedy excluded)
  headroom            best_of_k_met - greedy_met, per task
  beat_greedy_groups  some sample meets more than greedy
  pass_at_k           some sample solves the task
Per requirement family (``a:b`` of ``a:b:<entity>``; a name with fewer parts, e.g. ``count``,
``budget``, ``fact:info``, is its own family): ``gained``, the share of tasks where some sample
meets a requirement of the family that greedy misses, and ``missed``, where greedy misses one.
A requirement is met when the trajectory finished and ``unmet`` does not name it. An unfinished
greedy row names only ``finished`` (which others it misses is unknown): it counts as missing
everything, under the one family ``any (greedy unfinished)``, gained when a sample finished.

  python -m arenarl_jax.tools.headroom --workdir=RUN [--config=configs/quickstart.py[:arg]]
      [--split=valid] [--k=8] [--tasks_per_subtask=50] [--set=KEY=VALUE ...] [--resume=FILE]

rolls out the run's newest RL checkpoint (else its SFT one) with the run's ``config.json`` (or
``--config``'s file; ``--set`` changes any config key, e.g. ``sampling.temperature=1.0``) and
writes the groups to ``RUN/headroom/eval_<split>_k<k>.jsonl`` (never overwritten: ``_1``, ...)
as each wave of ``eval.max_rows`` rows finishes; ``--resume=FILE`` continues a killed roll-out
from its last whole wave, with the same groups an unbroken one writes (a long roll-out on a CPU
may span several sittings);

  python -m arenarl_jax.tools.headroom [--workdir=RUN | --config=...] --file=GROUPS.jsonl

recomputes the report from such a file or an evaluation's (``eval.group_size > 1``), its
trajectories verified again by the config's environment (the default config's without either).
Prints a table per subtask and family, and ends with ``RESULT greedy_met=... sampled_met=...
best_of_k_met=... headroom=... headroom_ci_low=... headroom_ci_high=... beat_greedy_groups=...
greedy_solved=... pass_at_k=...``.
"""
from __future__ import annotations

from typing import Any, Mapping, Sequence

import numpy as np

from arenarl_jax import config_tree, run_config, types
from arenarl_jax.eval import bootstrap
from arenarl_jax.tools import reward_alignment

RESULT_KEYS = ("greedy_met", "sampled_met", "best_of_k_met", "headroom", "headroom_ci_low",
               "headroom_ci_high", "beat_greedy_groups", "greedy_solved", "pass_at_k")
PER_TASK = ("greedy_met", "sampled_met", "best_of_k_met", "headroom", "beat_greedy_groups",
            "greedy_solved", "pass_at_k")
GREEDY_UNFINISHED = "any (greedy unfinished)"


def family_of(requirement: str) -> str:
  """``a:b`` of ``a:b:<entity>``; a name of one or two parts is its own family."""
  return ":".join(requirement.split(":", 2)[:2])


def compare_families(unmet_G: Sequence[Sequence[str]]) -> tuple[set[str], set[str]]:
  """(families greedy misses, families some sample meets where greedy misses) of one group."""
  greedy = set(unmet_G[0])
  if "finished" in greedy:
    missed, names = {GREEDY_UNFINISHED}, None
  else:
    missed, names = {family_of(n) for n in greedy}, greedy
  gained = set()
  for unmet in unmet_G[1:]:
    if "finished" in unmet:  # an unfinished sample meets nothing
      continue
    gained |= missed if names is None else {family_of(n) for n in names - set(unmet)}
  return missed, gained


def headroom(met_BG: np.ndarray, solved_BG: np.ndarray,
             unmet_BG: Sequence[Sequence[Sequence[str]]] | None = None, *,
             samples: int = 1000, seed: int = 0) -> dict[str, Any]:
  """The module doc's measures of B groups of G = k + 1 trajectories (row 0 greedy): met
  fractions, solved flags and (for the families) the names of the unmet requirements.

  Returns the per-task means, ``<measure>_ci_low|high`` for each, ``tasks``, ``k`` and, with
  ``unmet_BG``, ``families``: family -> {"missed": share, "gained": share}.
  """
  met_BG = np.asarray(met_BG, np.float64)
  solved_BG = np.asarray(solved_BG, bool)
  if met_BG.ndim != 2 or met_BG.shape[1] < 2 or solved_BG.shape != met_BG.shape:
    raise ValueError(f"headroom: met {met_BG.shape} and solved {solved_BG.shape} must both be "
                     "[tasks, G = k + 1 >= 2]")
  sampled_Bk = met_BG[:, 1:]
  per_task = {
      "greedy_met": met_BG[:, 0], "sampled_met": sampled_Bk.mean(axis=1),
      "best_of_k_met": sampled_Bk.max(axis=1),
      "headroom": sampled_Bk.max(axis=1) - met_BG[:, 0],
      "beat_greedy_groups": (sampled_Bk > met_BG[:, :1]).any(axis=1),
      "greedy_solved": solved_BG[:, 0], "pass_at_k": solved_BG[:, 1:].any(axis=1)}
  out: dict[str, Any] = {"tasks": len(met_BG), "k": met_BG.shape[1] - 1}
  for name in PER_TASK:
    values_B = np.asarray(per_task[name], np.float64)
    low, high = bootstrap.mean_interval(values_B, samples, seed)  # one seed: paired resamples
    out.update({name: float(values_B.mean()), f"{name}_ci_low": low, f"{name}_ci_high": high})
  if unmet_BG is not None:
    if len(unmet_BG) != len(met_BG):
      raise ValueError(f"headroom: {len(unmet_BG)} groups of unmet names, {len(met_BG)} tasks")
    counts: dict[str, list[int]] = {}
    for unmet_G in unmet_BG:
      missed, gained = compare_families(unmet_G)  # gained is a subset of missed
      for fam in missed:
        counts.setdefault(fam, [0, 0])
        counts[fam][0] += 1
        counts[fam][1] += fam in gained
    out["families"] = {fam: {"missed": m / len(met_BG), "gained": g / len(met_BG)}
                       for fam, (m, g) in sorted(counts.items())}
  return out


def verify_groups(env: Any, rows: Sequence[Mapping[str, Any]]
                  ) -> tuple[list[str], np.ndarray, np.ndarray, list[list[tuple[str, ...]]]]:
  """An evaluation file's trajectory rows grouped by task (``reward_alignment.groups``; tasks
  sorted by id, so that the bootstrap does not depend on the file's order) and verified by
  ``env``: (subtask per task, met fraction [B, G], solved [B, G], unmet names)."""
  grouped = sorted(reward_alignment.groups(rows), key=lambda g: str(g[0]["task_id"]))
  subtasks, met, solved, unmet = [], [], [], []
  for group in grouped:
    trajectories = [reward_alignment.trajectory(r) for r in group]
    verdicts = [env.verify(t) for t in trajectories]
    subtasks.append(group[0].get("subtask") or types.subtask_of(trajectories[0]))
    met.append([v.met_rate for v in verdicts])
    solved.append([v.solved for v in verdicts])
    unmet.append([tuple(v.unmet) for v in verdicts])
  return subtasks, np.array(met), np.array(solved), unmet


def load_config(workdir: str, spec: str):
  """``--config``'s file (as ``main`` loads it), else the run's config (``run_config.read``:
  its ``config.json`` over today's defaults), else the defaults."""
  if spec:
    return run_config.load(spec)
  return run_config.read(workdir) if workdir else config_tree.make_base_config()


def set_key(config: Any, item: str) -> None:
  """Applies ``KEY=VALUE`` (``KEY`` a dotted config key of a scalar; the value cast to its type)."""
  key, sep, value = item.partition("=")
  current = config_tree.flat(config.to_dict())
  old = current.get(key)
  if not sep or not isinstance(old, (bool, int, float, str)):
    raise ValueError(f"--set {item!r}: expected KEY=VALUE with KEY a scalar config key")
  if isinstance(old, bool):
    if value.lower() not in ("true", "false", "1", "0"):
      raise ValueError(f"--set {item!r}: expected true or false")
    new = value.lower() in ("true", "1")
  else:
    new = type(old)(value)
  config.update_from_flattened_dict({key: new})


SUMMARY_KEYS = ("policy", "split", "k", "temperature", "top_p", "top_k", "seed",
                "tasks_per_subtask", "max_rows")
# Summaries written before truncation was recorded sampled without it.
_UNRECORDED = {"top_p": 1.0, "top_k": 0}


def resume_point(path: str, header: Mapping[str, Any], task_ids: Sequence[str],
                 tasks_per_wave: int) -> int:
  """How many tasks a killed roll-out's file ``path`` holds in whole waves; the file is cut back
  to them (a half-written last line and an unfinished wave go). Its summary must match
  ``header`` and its groups the first of ``task_ids`` in order, or it belongs to another
  roll-out: a ValueError naming the file and what differs."""
  import json  # pylint: disable=g-import-not-at-top
  with open(path, encoding="utf-8") as f:
    whole, _, _ = f.read().rpartition("\n")  # what follows the last newline was cut mid-line
  records = []
  for n, line in enumerate(whole.split("\n"), 1):
    if not line.strip():
      continue
    try:
      records.append((line, json.loads(line)))
    except json.JSONDecodeError as e:
      raise ValueError(f"{path}:{n}: not valid JSON ({e.msg} at column {e.colno})") from None
  if not records or records[0][1].get("kind") != "summary":
    raise ValueError(f"{path}: no summary line first; not a headroom roll-out")
  summary = records[0][1]
  recorded = {key: summary.get(key, _UNRECORDED.get(key)) for key in SUMMARY_KEYS}
  differ = [f"{key} {recorded[key]!r} != {header[key]!r}" for key in SUMMARY_KEYS
            if recorded[key] != header[key]]
  if differ:
    raise ValueError(f"{path}: another roll-out's file ({'; '.join(differ)})")
  group = int(header["k"]) + 1
  rows = [r for _, r in records[1:]]
  done = len(rows) // group // tasks_per_wave * tasks_per_wave
  for i, row in enumerate(rows[:done * group]):
    want = task_ids[i // group] if i // group < len(task_ids) else None
    if row.get("task_id") != want or row.get("index") != i:
      raise ValueError(f"{path}: trajectory {i} is task {row.get('task_id')!r} at index "
                       f"{row.get('index')!r}; this roll-out's is {want!r} at {i}")
  with open(path, "w", encoding="utf-8") as f:
    f.writelines(line + "\n" for line, _ in records[:1 + done * group])
  return done


def roll_out(config: Any, env: Any, workdir: str, split: str, k: int,
             tasks_per_subtask: int, resume: str = "") -> str:
  """Groups of k + 1 trajectories of the split's tasks by the run's newest RL (else SFT)
  policy, written with their verdicts to ``<workdir>/headroom/`` as each wave of
  ``eval.max_rows`` rows finishes; returns the file's path. ``resume``: a killed roll-out's
  file, continued from its last whole wave (the groups come out as unbroken ones would)."""
  import json  # pylint: disable=g-import-not-at-top
  import os  # pylint: disable=g-import-not-at-top
  from flax import nnx  # pylint: disable=g-import-not-at-top
  from arenarl_jax import jsonl, pipeline  # pylint: disable=g-import-not-at-top
  from arenarl_jax.sft.settings import StartSettings  # pylint: disable=g-import-not-at-top
  config.update_from_flattened_dict({"eval.split": split, "eval.group_size": k + 1,
                                     "eval.greedy": False,
                                     "eval.tasks_per_subtask": tasks_per_subtask})
  mesh = pipeline.make_mesh(config)
  policy = pipeline.starting_policy(config, workdir, env, mesh)
  params, step = pipeline.rl_params(config, workdir, policy.model, mesh)
  if params is None:
    params = nnx.to_pure_dict(nnx.state(policy.model))
  name = f"RL step {step}" if step else (
      "SFT" if pipeline.sft_in_job(config) else
      "pinned start" if StartSettings.from_config(config.start).loads else "initial")
  evaluator = pipeline.make_evaluator(config, env, policy, workdir, mesh)
  header = {"kind": "summary", "policy": name, "split": split, "k": k,
            "temperature": float(config.sampling.temperature),
            "top_p": float(config.sampling.top_p), "top_k": int(config.sampling.top_k),
            "seed": int(config.eval.seed),
            "tasks_per_subtask": tasks_per_subtask, "max_rows": int(config.eval.max_rows)}
  if resume:
    path = resume
    first = resume_point(path, header, [t.id for t in evaluator.tasks],
                         evaluator.tasks_per_wave())
    f = open(path, "a", encoding="utf-8")  # pylint: disable=consider-using-with
  else:
    first = 0
    f, path = jsonl.create_jsonl(os.path.join(workdir, "headroom"), f"eval_{split}_k{k}")
    f.write(json.dumps(header) + "\n")
  index = first * (k + 1)

  def write(wave: Sequence[types.Trajectory]) -> None:
    nonlocal index
    for t in wave:
      f.write(json.dumps(jsonl.jsonable({
          "kind": "trajectory", "index": index, "task_id": t.metadata.get("task_id"),
          "subtask": types.subtask_of(t), "query": t.query, "finish_reason": t.finish_reason,
          **env.verify(t).as_dict(), "messages": list(t.messages),
          "metadata": dict(t.metadata)}), ensure_ascii=False) + "\n")
      index += 1
    f.flush()

  with f:
    evaluator.rollouts(params, first_task=first, on_wave=write)
  print(f"{path}: {index} trajectories of the {name} policy ({first} tasks resumed), row 0 "
        f"greedy, the others at temperature {header['temperature']:g}, top-p "
        f"{header['top_p']:g}, top-k {header['top_k']}")
  return path


def format_interval(s: Mapping[str, Any]) -> str:
  """`` [low,high]`` of the headroom (``[n/a]`` with fewer than two tasks)."""
  if np.isnan(s["headroom_ci_low"]):
    return " [n/a]"
  return f" [{s['headroom_ci_low']:+.3f},{s['headroom_ci_high']:+.3f}]"


def format_table(subtasks: Sequence[str], met_BG: np.ndarray, solved_BG: np.ndarray,
          out: Mapping[str, Any], **kwargs) -> str:
  """Per subtask and overall: greedy, sampled and best-of-k met, headroom, beat share, n."""
  lines = [f"{'subtask':<12}{'n':>5}{'greedy':>8}{'sampled':>9}{'best-of-k':>11}"
           f"{'headroom [95%]':>28}{'beat':>7}{'pass@k':>8}"]
  subtask_B = np.asarray(subtasks)
  for where in [*dict.fromkeys(subtasks), "overall"]:
    s = out if where == "overall" else headroom(
        met_BG[subtask_B == where], solved_BG[subtask_B == where], **kwargs)
    lines.append(f"{where:<12}{s['tasks']:>5}{s['greedy_met']:>8.3f}{s['sampled_met']:>9.3f}"
                 f"{s['best_of_k_met']:>11.3f}{s['headroom']:>+10.3f}{format_interval(s):>18}"
                 f"{s['beat_greedy_groups']:>7.3f}{s['pass_at_k']:>8.3f}")
  lines += ["", f"{'requirement family':<28}{'greedy misses':>15}{'a sample meets':>16}"]
  lines += [f"{fam:<28}{v['missed']:>15.3f}{v['gained']:>16.3f}"
            for fam, v in out.get("families", {}).items()]
  return "\n".join(lines)


def main(argv: Sequence[str] | None = None) -> dict[str, Any]:
  import argparse  # pylint: disable=g-import-not-at-top
  from arenarl_jax import jsonl  # pylint: disable=g-import-not-at-top
  from arenarl_jax.envs import base  # pylint: disable=g-import-not-at-top
  parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
  parser.add_argument("--workdir", default="", help="a run's workdir (config.json, checkpoints)")
  parser.add_argument("--config", default="", help="a config file (path[:arg]) instead of the "
                      "run's config.json")
  parser.add_argument("--split", default="valid", choices=("valid", "test"))
  parser.add_argument("--k", type=int, default=8, help="sampled trajectories per task (a "
                      "--file's groups have their own)")
  parser.add_argument("--tasks_per_subtask", type=int, default=50, help="0 = all")
  parser.add_argument("--file", default="", help="groups to report on instead of rolling out")
  parser.add_argument("--resume", default="", help="a killed roll-out's file to continue")
  parser.add_argument("--set", action="append", default=[], metavar="KEY=VALUE",
                      help="a config key, e.g. sampling.temperature=1.0")
  args = parser.parse_args(argv)
  if not args.file and not args.workdir:
    parser.error("give --workdir (to roll out its policy) or --file")
  if args.resume and (args.file or not args.workdir):
    parser.error("--resume continues a roll-out: give it with --workdir, without --file")
  if args.k < 1:
    parser.error(f"--k must be >= 1, got {args.k}")
  config = load_config(args.workdir, args.config)
  for item in args.set:
    set_key(config, item)
  env = base.make_environment_from_config(config.env)
  path = args.file or roll_out(config, env, args.workdir, args.split, args.k,
                               args.tasks_per_subtask, args.resume)
  subtasks, met_BG, solved_BG, unmet_BG = verify_groups(env, jsonl.read_jsonl(path))
  kwargs = {"samples": int(config.eval.bootstrap_samples), "seed": int(config.eval.seed)}
  out = headroom(met_BG, solved_BG, unmet_BG, **kwargs)
  print(f"{path}: {out['tasks']} tasks, greedy + {out['k']} samples each, verified by "
        f"{env.name}'s verifier; met fractions, shares of tasks, 95% bootstrap over tasks")
  print(format_table(subtasks, met_BG, solved_BG, out, **kwargs))
  print("RESULT " + " ".join(f"{key}={out[key]:.4f}" for key in RESULT_KEYS))
  return out


if __name__ == "__main__":
  from arenarl_jax.models import backend  # pylint: disable=g-import-not-at-top
  backend.prepare_process()  # as the CLI does, before anything starts JAX
  main()
