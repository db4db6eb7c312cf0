"""The pipeline: SFT -> RL -> evaluation, each stage resumable from the workdir, and export.

This is the only module that wires the stages together (``main.py`` dispatches ``--mode`` here),
and the door between the config and the library: it turns the config's sections into the frozen
settings objects the stages take (``<pkg>/settings.py``) and builds the run's mesh once; no module
below it reads the whole config. Every host runs it: process 0 builds the dataset and the
tokenizer first, SFT feeds each host its share of the global batch, the RL loop (``rl/loop.py``)
rolls out each host's share of every step's groups, and every host evaluates the same test tasks
while process 0 writes and prints.
"""
from __future__ import annotations

import os
import time

import jax
import ml_collections
from flax import nnx
from jax.sharding import Mesh

from arenarl_jax import config_tree, curves, hosts, sharding
from arenarl_jax.data import builder
from arenarl_jax.data.settings import DataSettings
from arenarl_jax.envs import base
from arenarl_jax.eval import run
from arenarl_jax.eval.settings import EvalSettings
from arenarl_jax.judges import make_judge
from arenarl_jax.models import backend
from arenarl_jax.models.safetensors_io import export_hf_dir
from arenarl_jax.models.settings import ModelSettings
from arenarl_jax.rl import experience
from arenarl_jax.rl import loop
from arenarl_jax.rl.settings import (AdvantageSettings, LossSettings, OptimSettings, RlSettings,
                                     TournamentSettings)
from arenarl_jax.rollout.settings import PolicySamplingSettings, RolloutSettings
from arenarl_jax.sampling.layout import sampling_mesh
from arenarl_jax.settings import CheckpointSettings, MetricsSettings
from arenarl_jax.sft import delta
from arenarl_jax.sft import policy as policy_lib
from arenarl_jax.sft.policy import with_params
from arenarl_jax.sft import stage
from arenarl_jax.sft import start as start_lib
from arenarl_jax.sft.settings import SftSettings, StartSettings

STAGES = ("sft", "rl", "eval")
# --mode -> the stages it runs ("export" is ``export``).
MODES = {"pipeline": STAGES, "sft": ("sft",), "train": ("rl",), "eval": ("eval",)}


# ----------------------------------------------------------- the door: config -> settings
def make_mesh(config: ml_collections.ConfigDict) -> Mesh:
  """The run's mesh (``mesh.*``), built once and passed to every stage."""
  return sharding.make_mesh(**config.mesh)


def sft_settings(config: ml_collections.ConfigDict) -> SftSettings:
  """``sft.*`` with the keys of other sections the SFT stage reads."""
  return SftSettings.from_config(
      config.sft, data=DataSettings.from_config(config.data),
      logprob_chunk=config.rl.logprob_chunk, remat=config.model.remat,
      metrics=MetricsSettings.from_config(config.metrics))


def rl_settings(config: ml_collections.ConfigDict) -> RlSettings:
  """``rl.*`` with the run's seed, ``model.remat``, the loss, optimizer, checkpoints, metrics."""
  return RlSettings.from_config(
      config.rl, seed=config.seed, remat=config.model.remat,
      loss=LossSettings.from_config(config.loss), optim=OptimSettings.from_config(config.optim),
      checkpoint=CheckpointSettings.from_config(config.checkpoint),
      metrics=MetricsSettings.from_config(config.metrics))


def advantage_settings(config: ml_collections.ConfigDict) -> AdvantageSettings:
  """``advantage.*`` with the tournament, the control and the run's seed."""
  return AdvantageSettings.from_config(
      config.advantage, control=config.rl.advantage_control, seed=config.seed,
      tournament=TournamentSettings.from_config(config.tournament))


def rollout_settings(config: ml_collections.ConfigDict
                     ) -> tuple[PolicySamplingSettings, RolloutSettings]:
  """``sampling.*`` and ``rollout.*`` (whose tool turns are ``sampling.max_turns``)."""
  sampling = PolicySamplingSettings.from_config(config.sampling)
  return sampling, RolloutSettings.from_config(config.rollout, max_turns=sampling.max_turns)


def dataset_path(config: ml_collections.ConfigDict) -> str:
  """The run's built dataset (``data.*``, ``env.*``), built on first use."""
  return stage.dataset_path(DataSettings.from_config(config.data), config.env)


def sft_in_job(config: ml_collections.ConfigDict) -> bool:
  """Whether this run trains its own SFT stage (not when it loads a pinned start)."""
  return StartSettings.from_config(config.start).in_job(config.sft.steps)


def make_policy(config: ml_collections.ConfigDict, workdir: str, env=None,
                mesh: Mesh | None = None):
  """The run's starting policy (``sft/policy.py``) on ``mesh`` (the config's when not given),
  before any SFT."""
  return policy_lib.make_policy(ModelSettings.from_config(config.model), workdir, env,
                                mesh=mesh or make_mesh(config), schemas=config.env.schemas,
                                start=StartSettings.from_config(config.start))


def starting_policy(config: ml_collections.ConfigDict, workdir: str, env, mesh: Mesh):
  """``make_policy`` with the finished SFT stage's weights when this run trains its own."""
  policy = make_policy(config, workdir, env, mesh)
  if sft_in_job(config):
    params = stage.restore_params(sft_settings(config), workdir, policy, mesh)
    policy.model = with_params(policy.model, params)
  return policy


def make_evaluator(config: ml_collections.ConfigDict, env, policy, workdir: str,
                   mesh: Mesh) -> run.Evaluator:
  """The evaluation (``eval/run.py``) as ``eval.*``, ``sampling.*`` and ``rollout.*`` say."""
  sampling, rollout = rollout_settings(config)
  return run.Evaluator(env, policy, workdir, settings=EvalSettings.from_config(config.eval),
                       sampling=sampling, rollout=rollout, mesh=mesh,
                       schemas=config.env.schemas)


def make_experience(config: ml_collections.ConfigDict, env, policy, tasks, judge, mesh: Mesh,
                    **kwargs) -> experience.Experience:
  """The RL experience source (``rl/experience.py``); ``kwargs``: ``truth``, ``workdir``,
  ``log_due``."""
  sampling, rollout = rollout_settings(config)
  return experience.Experience(env, policy, tasks, judge, sampling=sampling, rollout=rollout,
                               advantage=advantage_settings(config), mesh=mesh,
                               schemas=config.env.schemas, **kwargs)


# ------------------------------------------------------------------------------ the stages
def rl_params(config: ml_collections.ConfigDict, workdir: str, model, mesh: Mesh | None = None):
  """The newest RL checkpoint's parameters (pure dict) and its step, or (None, 0) when there is
  none; restored onto ``mesh`` (the config's when not given)."""
  settings = rl_settings(config)
  checkpointer = loop.make_checkpointer(settings, workdir)
  try:
    latest = checkpointer.latest_step()
    if latest is None:
      return None, 0
    graphdef, params = nnx.split(model)
    params = nnx.to_pure_dict(params)
    trainer = loop.make_trainer(settings, graphdef, params, mesh or make_mesh(config))
    state, loop_state = checkpointer.restore(latest, trainer.init_state(params))
    return state.params, int(loop_state["step"])
  finally:
    checkpointer.close()


def make_training_judge(config: ml_collections.ConfigDict, env, mesh: Mesh | None = None):
  """``judge.*``'s judge on the environment's rubric (``judge.rubric=""``, or checked against it);
  the rubric backend reads the environment's checker, the local Flax judge runs on this host's
  sampling mesh of ``mesh`` (the config's when not given; each host judges its own groups, as
  it samples them)."""
  extra = {}
  if config.judge.backend == "rubric":
    extra["checker"] = env.checker
  elif config.judge.backend == "verifier":
    extra["verify"] = env.verify
  elif config.judge.backend == "flax":
    extra["mesh"] = sampling_mesh(mesh or make_mesh(config))
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
  mesh = make_mesh(config)
  env = base.make_environment_from_config(config.env)
  experience.chosen_subtasks(config.rl.subtasks, env.subtasks)  # a typo fails before SFT
  t_build = time.perf_counter()
  # Process 0 builds the dataset and trains and saves the tokenizer before the others look.
  data_path = hosts.process_0_first(lambda: dataset_path(config), "dataset")
  policy = hosts.process_0_first(lambda: make_policy(config, workdir, env, mesh), "policy")
  times = {}

  t0 = time.perf_counter()
  if sft_in_job(config):
    sft = sft_settings(config)
    if "sft" in stages:
      sft_params, last = stage.run(sft, workdir, policy, env, mesh=mesh, data_path=data_path,
                                   schemas=config.env.schemas)
      if main_process and last:
        print(f"sft: {int(config.sft.steps)} steps, final loss {last['loss']:.4f}")
    else:
      sft_params = stage.restore_params(sft, workdir, policy, mesh)
    policy.model = with_params(policy.model, sft_params)
  times["sft_s"] = time.perf_counter() - t0
  if stages == ("sft",):
    if main_process:
      print(f"RESULT stage=sft steps={int(config.sft.steps)}")
    return None
  start_params = nnx.to_pure_dict(nnx.split(policy.model)[1])
  if config.start.build:
    return build_start(config, workdir, env, policy, start_params, data_path, t_build, mesh)

  evaluator = make_evaluator(config, env, policy, workdir, mesh) if "eval" in stages else None
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
    tasks = experience.tasks_of_subtasks(
        experience.tasks_from_records(builder.data_source(data_path, "train")),
        config.rl.subtasks)
    truth = (run.checker_judge(env) if config.judge.backend in ("rubric", "verifier")
             else None)
    eval_settings = EvalSettings.from_config(config.eval)
    source = make_experience(
        config, env, policy, tasks, make_training_judge(config, env, mesh), mesh, truth=truth,
        workdir=workdir, log_due=lambda step: eval_settings.is_due(step, int(config.rl.steps)))

    def on_step(step, state, writer):
      every = int(config.eval.every_steps)
      if evaluator is not None and every and step % every == 0 and step < config.rl.steps:
        rep = evaluator.evaluate(state.params, step, second=sft_rows)
        writer.write(step, rep.scalars())

    state = loop.run(rl_settings(config), workdir, source, mesh=mesh, model=policy.model,
                     on_step=on_step)
    final_params, final_step = state.params, int(config.rl.steps)
    times["rl_s"] = time.perf_counter() - t0
  else:
    final_params, final_step = rl_params(config, workdir, policy.model, mesh)
    if final_params is None:
      final_params, final_step = start_params, 0
  if evaluator is None:
    if main_process:
      print(f"RESULT stage=train steps={final_step}")
    return None
  t0 = time.perf_counter()
  # No RL update since the start's rollouts: they are the final policy's too (the evaluation's
  # key is fixed), so the final evaluation reads them instead of rolling out again.
  same = final_step == 0 and final_params is start_params and sft_rows is not None
  report = evaluator.evaluate(final_params, final_step, second=sft_rows,
                              trajectories=sft_rows if same else None)
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
                data_path: str, t_build: float, mesh: Mesh):
  """``start.build``: the SFT policy's greedy evaluation on ``eval.split``, then the pinned
  start's folder (``sft/start.py``) with its record; prints the table and a RESULT line."""
  repo = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
  commit, dirty = start_lib.git_state(repo)  # before the build writes into the package
  start, sft = StartSettings.from_config(config.start), sft_settings(config)
  tensors, delta_info = None, None
  if start.delta_rank > 0 or sft.adapter_rank > 0:  # evaluate what a later load reconstructs
    params, tensors, delta_info = _delta_start(config, workdir, env, mesh, params)
  report = make_evaluator(config, env, policy, workdir, mesh).evaluate(params, 0)
  if jax.process_index() != 0:
    return report
  settings = start_lib.build_settings(config_tree.flat(config))
  record = {"commit": commit, "dirty": dirty, "settings": settings,
            "settings_hash": start_lib.settings_hash(settings),
            "dataset": {"name": start_lib.dataset_name(data_path),
                        "sha256": start_lib.dataset_digest(data_path)},
            "sft": start_lib.curve_summary(os.path.join(workdir, stage.SFT_DIR)),
            "validation": start_lib.validation(report), "cpu": backend.cpu_kind(amx=True),
            "wall_s": round(time.perf_counter() - t_build, 1),
            **({"delta": delta_info} if delta_info else {})}
  directory = start_lib.write(start_lib.start_dir(start),
                              model=with_params(policy.model, hosts.host_copy(params)),
                              cfg=policy.cfg, tokenizer=policy.tokenizer, record=record,
                              delta_tensors=tensors)
  v = record["validation"]["overall"]
  print(f"start {config.start.name!r} written to {directory} (greedy, {v['tasks']} "
        f"{config.eval.split} tasks):\n{report.table()}")
  keys = ("valid", "limit_stops", "met", "content_met", "first_call_place", "solved")
  print("RESULT stage=start " + " ".join(
      f"{k}={v[k]:.4f}" for k in keys if k in v) + f" tasks={v['tasks']} dirty={int(dirty)} "
        f"wall_s={record['wall_s']:.1f}")
  return report


def _delta_start(config: ml_collections.ConfigDict, workdir: str, env, mesh: Mesh, params):
  """(the delta start's parameters as a load rebuilds them, the stored tensors, the record's
  ``delta`` block): an adapter's tensors as trained, else the fine-tune's delta cut to
  ``start.delta_rank`` (``sft/delta.py``)."""
  start, sft = StartSettings.from_config(config.start), sft_settings(config)
  rank = int(sft.adapter_rank) or int(start.delta_rank)
  if sft.adapter_rank > 0 and start.delta_rank not in (0, sft.adapter_rank):
    raise ValueError(f"start.delta_rank={start.delta_rank} with sft.adapter_rank="
                     f"{sft.adapter_rank}: an adapter's start is stored at the adapter's rank "
                     "(leave start.delta_rank at 0 or equal)")
  base_policy = make_policy(config, workdir, env, mesh)
  base = nnx.to_pure_dict(nnx.state(base_policy.model))
  name = config.model.init.preset or config.model.source
  if sft.adapter_rank > 0:
    trained = stage.restore_trained(sft, workdir, base_policy, mesh)
    return delta.pin(base, trained, rank=rank, dtype=start.delta_dtype, base_name=name)
  tuned = hosts.host_copy(params)
  cut = delta.factorize(delta.flat_params(hosts.host_copy(base)), delta.flat_params(tuned), rank,
                        start.delta_dtype)
  return delta.pin(base, cut, rank=rank, dtype=start.delta_dtype, base_name=name, tuned=tuned)


def export(config: ml_collections.ConfigDict, workdir: str, path: str = "") -> str:
  """``--mode=export``: the newest RL checkpoint's policy (else the SFT one) as an HF safetensors
  directory with the run's tokenizer (default ``<workdir>/export``); returns the directory."""
  hosts.initialize_distributed(config.distributed)  # every host joins the checkpoint restore
  mesh = make_mesh(config)
  env = base.make_environment_from_config(config.env)
  policy = starting_policy(config, workdir, env, mesh)
  params, step = rl_params(config, workdir, policy.model, mesh)
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
