"""The pipeline: SFT -> RL -> evaluation, each stage resumable from the workdir, and export.

This is the only module that wires the stages together (``main.py`` dispatches ``--mode`` here).
Every host runs it: process 0 builds the dataset and the tokenizer first, SFT feeds each host its
share of the global batch, the RL loop (``rl/loop.py``) rolls out each host's share of every step's
groups, and every host evaluates the same test tasks while process 0 writes and prints.
"""
from __future__ import annotations

import os
import time

import jax
import ml_collections
from flax import nnx

from arenarl_jax import checkpoint as ckpt_lib
from arenarl_jax import curves, hosts, sharding
from arenarl_jax.data import builder
from arenarl_jax.envs import base
from arenarl_jax.eval import run
from arenarl_jax.eval.compare import EvalSettings
from arenarl_jax.judges import make_judge
from arenarl_jax.models.safetensors_io import export_hf_dir
from arenarl_jax.rl import experience
from arenarl_jax.rl import loop
from arenarl_jax.sampling.layout import sampling_mesh
from arenarl_jax.sft import policy as policy_lib
from arenarl_jax.sft import stage
from arenarl_jax.sft import start as start_lib

STAGES = ("sft", "rl", "eval")
# --mode -> the stages it runs ("export" is ``export``).
MODES = {"pipeline": STAGES, "sft": ("sft",), "train": ("rl",), "eval": ("eval",)}


def with_params(model, params):
  """``model`` (nnx) with its weights replaced by ``params`` (a pure dict; arrays kept as is)."""
  graphdef, state = nnx.split(model)
  nnx.replace_by_pure_dict(state, params)
  return nnx.merge(graphdef, state)


def rl_params(config, workdir: str, model):
  """The newest RL checkpoint's parameters (pure dict), or None when there is none."""
  checkpointer = ckpt_lib.Checkpointer(os.path.join(workdir, "checkpoints"),
                                       every=config.checkpoint.every, keep=config.checkpoint.keep)
  try:
    latest = checkpointer.latest_step()
    if latest is None:
      return None, 0
    mesh = sharding.make_mesh(**config.mesh)
    graphdef, params = nnx.split(model)
    params = nnx.to_pure_dict(params)
    trainer = loop.make_trainer(config, graphdef, params, mesh)
    state, loop_state = checkpointer.restore(latest, trainer.init_state(params))
    return state.params, int(loop_state["step"])
  finally:
    checkpointer.close()


def make_training_judge(config, env):
  """``judge.*``'s judge on the environment's rubric (``judge.rubric=""``, or checked against it);
  the rubric backend reads the environment's checker, the local Flax judge runs on this host's
  sampling mesh (each host judges its own groups, as it samples them)."""
  extra = {}
  if config.judge.backend == "rubric":
    extra["checker"] = env.checker
  elif config.judge.backend == "verifier":
    extra["verify"] = env.verify
  elif config.judge.backend == "flax":
    extra["mesh"] = sampling_mesh(sharding.make_mesh(**config.mesh))
  return make_judge(config.judge, env_rubric=env.rubric, **extra)


def pipeline(config: ml_collections.ConfigDict, workdir: str,
             stages: tuple[str, ...] = STAGES):
  """SFT (when ``sft.steps`` > 0) -> RL with the agent rollout -> evaluation, each resumable.

  ``stages`` picks what runs (``--mode=sft|train|eval`` run one): a stage that is not run reads
  its result from ``workdir`` (the SFT checkpoint, the newest RL checkpoint). Evaluations (the
  noise-free checker, ``eval/run.py``) run at RL step 0, every ``eval.every_steps`` and at the
  end; the final one is printed as a table and a ``RESULT`` line and returned.
  """
  unknown = set(stages) - set(STAGES)
  if unknown:
    raise ValueError(f"pipeline: unknown stage(s) {sorted(unknown)}; known: {STAGES}")
  hosts.initialize_distributed(config.distributed)
  main_process = jax.process_index() == 0
  env = base.make_environment_from_config(config.env)
  t_build = time.perf_counter()
  # Process 0 builds the dataset and trains and saves the tokenizer before the others look.
  data_path = hosts.process_0_first(lambda: stage.dataset_path(config), "dataset")
  policy = hosts.process_0_first(lambda: policy_lib.make_policy(config, workdir, env), "policy")
  times = {}

  t0 = time.perf_counter()
  if start_lib.in_job(config):
    if "sft" in stages:
      sft_params, last = stage.run(config, workdir, policy, env, data_path=data_path)
      if main_process and last:
        print(f"sft: {int(config.sft.steps)} steps, final loss {last['loss']:.4f}")
    else:
      sft_params = stage.restore_params(config, workdir, policy)
    policy.model = with_params(policy.model, sft_params)
  times["sft_s"] = time.perf_counter() - t0
  if stages == ("sft",):
    if main_process:
      print(f"RESULT stage=sft steps={int(config.sft.steps)}")
    return None
  start_params = nnx.to_pure_dict(nnx.split(policy.model)[1])
  if config.start.build:
    return build_start(config, workdir, env, policy, start_params, data_path, t_build)

  evaluator = run.Evaluator(config, env, policy, workdir) if "eval" in stages else None
  sft_rows = None
  if evaluator is not None:
    t0 = time.perf_counter()
    sft_rows = evaluator.rollouts(start_params)
    if not (config.checkpoint.resume and _has_rl_checkpoint(workdir)):
      report = evaluator.evaluate(start_params, 0, trajectories=sft_rows)
      if main_process:
        print(f"evaluation at step 0 (the starting policy):\n{report.table()}")
    times["eval_start_s"] = time.perf_counter() - t0

  if "rl" in stages and config.rl.steps > 0:
    t0 = time.perf_counter()
    tasks = experience.tasks_from_records(builder.data_source(data_path, "train"))
    truth = (run.checker_judge(env) if config.judge.backend in ("rubric", "verifier")
             else None)
    eval_settings = EvalSettings.from_config(config.eval)
    source = experience.Experience(
        config, env, policy, tasks, make_training_judge(config, env), truth=truth,
        workdir=workdir, log_due=lambda step: eval_settings.is_due(step, int(config.rl.steps)))

    def on_step(step, state, writer):
      every = int(config.eval.every_steps)
      if evaluator is not None and every and step % every == 0 and step < config.rl.steps:
        rep = evaluator.evaluate(state.params, step, second=sft_rows)
        writer.write(step, rep.scalars())

    state = loop.run(config, workdir, source, model=policy.model, on_step=on_step)
    final_params, final_step = state.params, int(config.rl.steps)
    times["rl_s"] = time.perf_counter() - t0
  else:
    final_params, final_step = rl_params(config, workdir, policy.model)
    if final_params is None:
      final_params, final_step = start_params, 0
  if evaluator is None:
    if main_process:
      print(f"RESULT stage=train steps={final_step}")
    return None
  t0 = time.perf_counter()
  report = evaluator.evaluate(final_params, final_step, second=sft_rows)
  times["eval_final_s"] = time.perf_counter() - t0
  if main_process:
    print(f"\nfinal evaluation at RL step {final_step} (noise-free checker, "
          f"{len(evaluator.tasks)} test tasks):\n{report.table()}")
    print("time: " + " ".join(f"{k}={v:.1f}" for k, v in times.items()))
    curves.plot(workdir)
    if config.judge.backend == "verifier" and final_step > 0:
      print("note: judge.backend=verifier trained on the verifier this evaluation counts: the "
            "judge's ceiling (judges/verifier_judge.py), not evidence of learning")
    print(run.result_line(report, config.eval.opponent or "sft"))
  return report


def build_start(config: ml_collections.ConfigDict, workdir: str, env, policy, params,
                data_path: str, t_build: float):
  """``start.build``: the SFT policy's greedy evaluation on ``eval.split``, then the pinned
  start's folder (``sft/start.py``) with its record; prints the table and a RESULT line."""
  repo = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
  commit, dirty = start_lib.git_state(repo)  # before the build writes into the package
  report = run.Evaluator(config, env, policy, workdir).evaluate(params, 0)
  if jax.process_index() != 0:
    return report
  settings = start_lib.build_settings(config)
  record = {"commit": commit, "dirty": dirty, "settings": settings,
            "settings_hash": start_lib.settings_hash(settings),
            "dataset": {"name": start_lib.dataset_name(data_path),
                        "sha256": start_lib.dataset_digest(data_path)},
            "sft": start_lib.curve_summary(os.path.join(workdir, stage.SFT_DIR)),
            "validation": start_lib.validation(report), "cpu": start_lib.cpu_kind(),
            "wall_s": round(time.perf_counter() - t_build, 1)}
  directory = start_lib.write(start_lib.start_dir(config),
                              model=with_params(policy.model, hosts.host_copy(params)),
                              cfg=policy.cfg, tokenizer=policy.tokenizer, record=record)
  v = record["validation"]["overall"]
  print(f"start {config.start.name!r} written to {directory} (greedy, {v['tasks']} "
        f"{config.eval.split} tasks):\n{report.table()}")
  keys = ("valid", "limit_stops", "met", "content_met", "first_call_place", "solved")
  print("RESULT stage=start " + " ".join(
      f"{k}={v[k]:.4f}" for k in keys if k in v) + f" tasks={v['tasks']} dirty={int(dirty)} "
        f"wall_s={record['wall_s']:.1f}")
  return report


def export(config: ml_collections.ConfigDict, workdir: str, path: str = "") -> str:
  """``--mode=export``: the newest RL checkpoint's policy (else the SFT one) as an HF safetensors
  directory with the run's tokenizer (default ``<workdir>/export``); returns the directory."""
  hosts.initialize_distributed(config.distributed)  # every host joins the checkpoint restore
  env = base.make_environment_from_config(config.env)
  policy = policy_lib.make_policy(config, workdir, env)
  if start_lib.in_job(config):
    policy.model = with_params(policy.model, stage.restore_params(config, workdir, policy))
  params, step = rl_params(config, workdir, policy.model)
  if params is None:
    params = nnx.to_pure_dict(nnx.split(policy.model)[1])
  # On several hosts the parameters are spread over them: every host gathers its own copy.
  policy.model = with_params(policy.model, hosts.host_copy(params))
  path = path or os.path.join(workdir, "export")
  if jax.process_index() == 0:
    export_hf_dir(policy.model, policy.cfg, path)
    policy.tokenizer.save(path)
    print(f"RESULT stage=export rl_step={step} path={path}")
  return path


def _has_rl_checkpoint(workdir: str) -> bool:
  path = os.path.join(workdir, "checkpoints")
  return os.path.isdir(path) and any(name.isdigit() for name in os.listdir(path))


def run_mode(mode: str, config: ml_collections.ConfigDict, workdir: str):
  """What ``--mode=<mode>`` runs: a subset of the stages (``MODES``) or ``export``."""
  if mode == "export":
    return export(config, workdir)
  if mode not in MODES:
    raise ValueError(f"--mode: unknown mode {mode!r}; known: {sorted(MODES) + ['export']}")
  return pipeline(config, workdir, stages=MODES[mode])
