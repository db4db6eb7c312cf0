"""One full RL step of the quickstart's shape, time per phase (the pipeline's own loop and rollout).

  .venv/bin/python benchmarks/rl_step.py                  # the quickstart's shape
  .venv/bin/python benchmarks/rl_step.py --from_workdir=runs/quickstart   # its trained policy
  .venv/bin/python benchmarks/rl_step.py --arg=smoke      # seconds: the smoke config

Runs ``rl/loop.run`` with the agent rollout (``rl/experience.Experience``: sampler on the current
parameters, travel tools, the noisy rubric judge, seeded single elimination) for ``--steps`` RL
steps and reports the LAST step (the first one compiles). The policy is freshly initialised by
default (the step's shape; a random policy calls no tools, so its rollouts are not typical);
``--from_workdir`` starts from a quickstart run's policy instead (its saved tokenizer and its
newest RL checkpoint, else its SFT checkpoint): a typical step, with tool calls. The run itself
goes to a fresh temporary directory; the source workdir is only read. Phases, from the step's
metrics:
  sample  prefill + decode + extend calls (device compute, waited for)
  tools   the tool phases of the rollout
  judge   the tournament (all judge calls and its bookkeeping)
  update  make_batch, the teacher-forced old log-probs and the minibatch updates
  host    everything else: the rollout driver's own bookkeeping (parsing turns, building rows)
          and the loop's (prompt cursor, metrics, checkpoint decisions)
Ends with ``RESULT step_s=... sample_frac=... judge_frac=... update_frac=... host_frac=...``.
"""
from __future__ import annotations

import argparse
import json
import os
import shutil
import tempfile

import jax

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
QUICKSTART = os.path.join(ROOT, "configs", "quickstart.py")


def start_policy(config, workdir: str, env, from_workdir: str):
  """The policy the step starts from: fresh (``from_workdir`` empty), else the run's newest RL
  checkpoint or, without one, its SFT checkpoint (with the run's saved tokenizer)."""
  from arenarl_jax.sft import policy as policy_lib  # pylint: disable=import-outside-toplevel
  from arenarl_jax.sft import stage  # pylint: disable=import-outside-toplevel
  from arenarl_jax import pipeline  # pylint: disable=import-outside-toplevel
  if not from_workdir:
    return pipeline.make_policy(config, workdir, env), "init"
  saved = os.path.join(from_workdir, policy_lib.TOKENIZER_DIR)
  if not os.path.isfile(os.path.join(saved, "tokenizer.json")):
    raise FileNotFoundError(f"--from_workdir={from_workdir}: no {policy_lib.TOKENIZER_DIR}/"
                            "tokenizer.json (not a workdir of a run of this config)")
  shutil.copytree(saved, os.path.join(workdir, policy_lib.TOKENIZER_DIR))  # the run's ids
  # The run's parameters replace the fresh ones, so how names would start does not matter (and
  # the run's tokenizer need not keep whole names).
  fresh = config.copy_and_resolve_references()
  with fresh.unlocked():
    fresh.model.init.name_init = "random"
  policy = pipeline.make_policy(fresh, workdir, env)
  params, step = pipeline.rl_params(config, from_workdir, policy.model)
  source = f"rl_step_{step}"
  if params is None:
    if not stage.has_checkpoint(from_workdir):
      raise FileNotFoundError(f"--from_workdir={from_workdir}: neither checkpoints/ nor "
                              f"{stage.SFT_DIR}/checkpoints holds a policy")
    params = stage.restore_params(pipeline.sft_settings(config), from_workdir, policy,
                                  pipeline.make_mesh(config))
    source = "sft"
  policy.model = pipeline.with_params(policy.model, jax.device_get(params))
  return policy, source


def main(argv=None):
  parser = argparse.ArgumentParser()
  parser.add_argument("--arg", default="", help="configs/quickstart.py arg, e.g. smoke")
  parser.add_argument("--steps", type=int, default=2)
  parser.add_argument("--from_workdir", default="",
                      help="start from this quickstart run's policy (RL checkpoint, else SFT)")
  args = parser.parse_args(argv)
  from arenarl_jax import config_tree
  from arenarl_jax.eval import run
  from arenarl_jax.rl import experience
  from arenarl_jax.sft import stage
  from arenarl_jax import pipeline
  from arenarl_jax.rl import loop
  from arenarl_jax.data import builder
  from arenarl_jax.envs import base

  config = config_tree.load_config_file(f"{QUICKSTART}:{args.arg}")  # its get_config(arg or None)
  with config.unlocked():
    config.rl.steps = args.steps
    config.checkpoint.every = 10**6
    config.checkpoint.resume = False
    config.metrics.progress = False
    config.metrics.tensorboard = False
  workdir = tempfile.mkdtemp(prefix="rl_step_")
  env = base.make_environment_from_config(config.env)
  policy, source = start_policy(config, workdir, env, args.from_workdir)
  tasks = experience.tasks_of_subtasks(experience.tasks_from_records(
      builder.data_source(pipeline.dataset_path(config), "train")), config.rl.subtasks)
  mesh = pipeline.make_mesh(config)
  rollout = pipeline.make_experience(config, env, policy, tasks,
                                     pipeline.make_training_judge(config, env, mesh), mesh,
                                     truth=run.checker_judge(env))
  loop.run(pipeline.rl_settings(config), workdir, rollout, mesh=mesh, model=policy.model)
  with open(os.path.join(workdir, "metrics.jsonl"), encoding="utf-8") as f:
    last = [json.loads(line) for line in f][-1]
  step = last["time/step_s"]
  sample, tools, judge = last["time/sample_s"], last["time/tools_s"], last["time/judge_s"]
  update = last["time/update_s"]
  host = max(step - sample - tools - judge - update, 0.0)
  print(f"policy={source} rows={config.rl.prompts_per_step * config.sampling.group_size} "
        f"sampled_tokens_mean={last['rollout/sampled_tokens_mean']:.0f} "
        f"length_mean={last['rollout/length_mean']:.0f} tools_s={tools:.3f} "
        f"judge_requests={last['judge/requests']:.0f} "
        f"tool_calls_per_trajectory={last['rollout/tool_calls_per_trajectory']:.2f}")
  print(f"RESULT step_s={step:.3f} sample_frac={sample / step:.3f} judge_frac={judge / step:.3f} "
        f"update_frac={update / step:.3f} host_frac={host / step:.3f}")


if __name__ == "__main__":
  from arenarl_jax.models.cpu import allocator  # pylint: disable=g-import-not-at-top
  allocator.reexec_with_retained_heap()  # as the CLI does
  main()
