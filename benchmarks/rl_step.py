"""One full RL step of the quickstart's shape, time per phase (the pipeline's own loop and rollout).

  .venv/bin/python benchmarks/rl_step.py                  # the quickstart's shape
  .venv/bin/python benchmarks/rl_step.py --arg=smoke      # seconds: the smoke config

Runs ``train.run`` with the agent rollout (``rl_rollout.AgentRollout``: sampler on the current
parameters, travel tools, the noisy rubric judge, seeded single elimination) for ``--steps`` RL
steps from a freshly initialised policy (no SFT: the step's shape, not its quality, is measured)
and reports the LAST step (the first one compiles). Phases, from the step's metrics:
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
import sys
import tempfile

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(ROOT, "configs"))


def main():
  parser = argparse.ArgumentParser()
  parser.add_argument("--arg", default="", help="configs/quickstart.py arg, e.g. smoke")
  parser.add_argument("--steps", type=int, default=2)
  args = parser.parse_args()
  import quickstart  # pylint: disable=import-outside-toplevel
  from arenarl_jax import evaluator, policy as policy_lib, rl_rollout, sft, train
  from arenarl_jax.data import builder
  from arenarl_jax.envs import base

  config = quickstart.get_config(args.arg or None)
  with config.unlocked():
    config.rl.steps = args.steps
    config.checkpoint.every = 10**6
    config.checkpoint.resume = False
    config.metrics.progress = False
    config.metrics.tensorboard = False
  workdir = tempfile.mkdtemp(prefix="rl_step_")
  env = base.make_environment_from_config(config.env)
  policy = policy_lib.make_policy(config, workdir, env)
  tasks = rl_rollout.tasks_from_records(builder.data_source(sft.dataset_path(config), "train"))
  rollout = rl_rollout.AgentRollout(config, env, policy, tasks,
                                    train.make_training_judge(config, env),
                                    truth=evaluator.checker_judge(env))
  train.run(config, workdir, rollout, model=policy.model)
  with open(os.path.join(workdir, "metrics.jsonl"), encoding="utf-8") as f:
    last = [json.loads(line) for line in f][-1]
  step = last["time/step_s"]
  sample, tools, judge = last["time/sample_s"], last["time/tools_s"], last["time/judge_s"]
  update = last["time/update_s"]
  host = max(step - sample - tools - judge - update, 0.0)
  print(f"rows={config.rl.prompts_per_step * config.sampling.group_size} "
        f"sampled_tokens_mean={last['rollout/sampled_tokens_mean']:.0f} "
        f"length_mean={last['rollout/length_mean']:.0f} tools_s={tools:.3f} "
        f"judge_requests={last['judge/requests']:.0f}")
  print(f"RESULT step_s={step:.3f} sample_frac={sample / step:.3f} judge_frac={judge / step:.3f} "
        f"update_frac={update / step:.3f} host_frac={host / step:.3f}")


if __name__ == "__main__":
  main()
