"""The RL loop: prompts -> rollout (pluggable) -> training batch -> minibatch updates -> metrics.

Every host runs this same loop (``distributed.initialize`` joins them): each host rolls out its
own contiguous share of the step's prompts (a group never spans hosts; the rollout indexes its
random draws by the global group, so the union of the shares is what one process rolls out), the
update is one global SPMD step over all hosts' rows, every host takes part in checkpoint saves,
the hosts' rollout stats are combined (``combine_host_stats``) and process 0 writes metrics.
``pipeline`` does the same for SFT (each host feeds its share of the global batch) and has every
host evaluate the same test tasks (process 0 writes and prints).
A rollout is any callable ``rollout(params, *, step, prompt_ids, all_prompt_ids, key) ->
(trajectories, advantages_N, stats)`` with ``num_prompts``, ``state_dict()`` and
``load_state_dict()``; ``fake_rollout.FakeRollout`` stands in until the agent rollout lands.
Resume: the newest checkpoint restores the train state, the step, the prompt cursor, the PRNG key
and the rollout's state, so a run killed at any point and rerun ends where an uninterrupted run
does. SIGTERM finishes the current step, saves and returns.
"""
from __future__ import annotations

import json
import os
import signal
import time
from typing import Any, Mapping

import jax
import jax.numpy as jnp
import ml_collections
import numpy as np
from flax import nnx

from arenarl_jax import batch as batch_lib
from arenarl_jax import checkpoint as ckpt_lib
from arenarl_jax import losses, metrics as metrics_lib, sharding
from arenarl_jax.train_step import Trainer, make_optimizer


def initialize_distributed(section: Mapping[str, Any]) -> None:
  """``jax.distributed.initialize`` from ``config.distributed`` (call before touching devices;
  a second call is a no-op)."""
  if not section["initialize"] or jax.distributed.is_initialized():
    return
  if section["cpu_collectives"]:
    jax.config.update("jax_cpu_collectives_implementation", section["cpu_collectives"])
  jax.distributed.initialize(coordinator_address=section["coordinator_address"] or None,
                             num_processes=section["num_processes"] or None,
                             process_id=None if section["process_id"] < 0 else section["process_id"])


class PromptCursor:
  """Prompt ids per step: a fresh seeded permutation each epoch, incomplete tail dropped."""

  def __init__(self, num_prompts: int, per_step: int, seed: int):
    if per_step <= 0 or num_prompts < per_step:
      raise ValueError(f"rl.prompts_per_step={per_step} needs at least that many prompts, "
                       f"the rollout has {num_prompts}")
    self.num_prompts, self.per_step, self.seed = num_prompts, per_step, seed
    self.epoch, self.index = 0, 0

  def state(self) -> dict[str, int]:
    return {"epoch": self.epoch, "index": self.index}

  def load(self, state: Mapping[str, int]) -> None:
    self.epoch, self.index = int(state["epoch"]), int(state["index"])

  def next(self) -> list[int]:
    if self.index + self.per_step > self.num_prompts:
      self.epoch, self.index = self.epoch + 1, 0
    order = np.random.default_rng([self.seed, self.epoch]).permutation(self.num_prompts)
    ids = order[self.index:self.index + self.per_step]
    self.index += self.per_step
    if self.index + self.per_step > self.num_prompts:  # the epoch's last step: the next is new
      self.epoch, self.index = self.epoch + 1, 0
    return [int(i) for i in ids]


_TRAINERS: dict[Any, Trainer] = {}  # compiled programs, reused by runs with the same settings


def make_trainer(config: ml_collections.ConfigDict, graphdef, params, mesh) -> Trainer:
  total = int(config.rl.steps) * int(config.rl.minibatches_per_rollout)
  loss_cfg = losses.LossConfig.from_config(config.loss)
  shapes = str(jax.tree.map(lambda x: (x.shape, str(x.dtype)), params))
  key = (graphdef, mesh, loss_cfg, json.dumps(config.optim.to_dict(), sort_keys=True), total,
         int(config.rl.accumulation_steps), int(config.rl.logprob_chunk), config.model.remat,
         shapes)
  if key not in _TRAINERS:
    _TRAINERS[key] = Trainer(graphdef, params, mesh, loss_cfg,
                             make_optimizer(config.optim, total),
                             accumulation_steps=config.rl.accumulation_steps,
                             chunk=config.rl.logprob_chunk, remat=config.model.remat)
  return _TRAINERS[key]


def _global_max(value: int) -> int:
  if jax.process_count() == 1:
    return value
  from jax.experimental import multihost_utils
  return int(np.max(multihost_utils.process_allgather(np.asarray([value]))))


def _process_0_first(fn, name: str):
  """``fn()`` on process 0, then on the others: they read what it wrote when the storage is
  shared, or make the same thing themselves (``fn`` is deterministic) when it is not."""
  if jax.process_count() == 1:
    return fn()
  from jax.experimental import multihost_utils  # pylint: disable=import-outside-toplevel
  out = fn() if jax.process_index() == 0 else None
  multihost_utils.sync_global_devices(name)
  return out if jax.process_index() == 0 else fn()


# How one step's rollout stats of several hosts (each over its own equal share of the groups)
# become one value: counts add up (every judge/ counter, tool errors by kind and these), times take
# the slowest host, extremes their extreme, the rest (means over trajectories or groups) the mean
# over hosts; a count a host lacks is 0 there. The order-flip rate is recomputed from the sums.
_SUMMED = ("tokens_per_s", "rollout/judge_cache_hits")


def combine_host_stats(per_host: list[Mapping[str, float]]) -> dict[str, float]:
  """One step's stats from every host's (see ``_SUMMED``); exact for counts, times, extremes and
  means, the mean of the hosts' values for spreads and correlations."""
  out = {}
  for key in sorted({k for h in per_host for k in h}):
    summed = (key in _SUMMED or "/tool_errors/" in key
              or (key.startswith("judge/") and not key.endswith("_rate")))
    values = [float(h.get(key, 0.0)) for h in per_host if summed or key in h]
    if summed:
      out[key] = float(np.sum(values))
    elif key.startswith("time/") or key.endswith("_max"):
      out[key] = float(np.max(values))
    elif key.endswith("_min"):
      out[key] = float(np.min(values))
    else:
      out[key] = float(np.mean(values))
  if out.get("judge/both_orders", 0) > 0:
    out["judge/order_flip_rate"] = out["judge/order_flips"] / out["judge/both_orders"]
  return out


def _gather_stats(stats: Mapping[str, float]) -> dict[str, float]:
  """Every host's rollout stats combined (``combine_host_stats``); one host: unchanged."""
  if jax.process_count() == 1:
    return dict(stats)
  from jax.experimental import multihost_utils  # pylint: disable=import-outside-toplevel
  blob = np.frombuffer(json.dumps({k: float(v) for k, v in stats.items()}).encode(), np.uint8)
  width = _global_max(len(blob))
  rows = multihost_utils.process_allgather(np.pad(blob, (0, width - len(blob))))
  return combine_host_stats([json.loads(bytes(r).rstrip(b"\0")) for r in np.asarray(rows)])


def _combine_updates(per_update: list[dict]) -> dict[str, float]:
  """Means over the rollout's minibatch updates (max / min for the ratio extremes)."""
  out = {}
  for key in per_update[0]:
    values = np.asarray([float(m[key]) for m in per_update])
    out[key] = values.max() if key.endswith("_max") else values.min() if key.endswith(
        "_min") else values.mean()
  return out


def run(config: ml_collections.ConfigDict, workdir: str, rollout, *, model=None, on_step=None):
  """Runs ``config.rl.steps`` RL steps (resuming from ``workdir/checkpoints``); returns the state.

  ``model`` is the initial policy (an nnx Transformer; also the frozen KL reference).
  ``on_step(step, state, writer)`` runs after each step's metrics and checkpoint (evaluation).
  """
  mesh = sharding.make_mesh(**config.mesh)
  graphdef, params = nnx.split(model)
  params = nnx.to_pure_dict(params)
  trainer = make_trainer(config, graphdef, params, mesh)
  state = trainer.init_state(params)
  ref_params = trainer.place_params(params)
  del params

  rl = config.rl
  procs, me = jax.process_count(), jax.process_index()
  if rl.prompts_per_step % procs:
    raise ValueError(f"rl.prompts_per_step={rl.prompts_per_step} must split over {procs} hosts")
  cursor = PromptCursor(rollout.num_prompts, rl.prompts_per_step, config.seed)
  rng = jax.random.key(config.seed)
  checkpointer = ckpt_lib.Checkpointer(os.path.join(workdir, "checkpoints"),
                                       every=config.checkpoint.every, keep=config.checkpoint.keep)
  start = 0
  latest = checkpointer.latest_step() if config.checkpoint.resume else None
  if latest is not None:
    state, loop = checkpointer.restore(latest, state)
    start = int(loop["step"])
    cursor.load(loop["cursor"])
    rng = jax.random.wrap_key_data(jnp.asarray(loop["rng"], jnp.uint32))
    rollout.load_state_dict(loop["rollout"])
  writer = metrics_lib.MetricsWriter(workdir, tensorboard=config.metrics.tensorboard,
                                     jsonl=config.metrics.jsonl, resume_step=start)
  bar = metrics_lib.progress(rl.steps, desc="rl steps", initial=start,
                             enabled=config.metrics.progress and me == 0)

  stop = {"sigterm": False}
  previous = signal.signal(signal.SIGTERM, lambda *_: stop.update(sigterm=True))
  shards = mesh.shape["data"] * mesh.shape["fsdp"]
  rows_multiple = (rl.minibatches_per_rollout * rl.accumulation_steps * max(1, shards // procs))

  def loop_state(step):
    return {"step": step, "cursor": cursor.state(),
            "rng": np.asarray(jax.random.key_data(rng)).tolist(), "rollout": rollout.state_dict()}

  try:
    step = start
    while step < rl.steps and not stop["sigterm"]:
      t0 = time.perf_counter()
      epoch = cursor.epoch
      all_ids = cursor.next()
      share = len(all_ids) // procs
      rng, key = jax.random.split(rng)
      trajectories, adv_N, stats = rollout(state.params, step=step,
                                           prompt_ids=all_ids[me * share:(me + 1) * share],
                                           all_prompt_ids=all_ids, key=key)
      t1 = time.perf_counter()
      local = batch_lib.make_batch(trajectories, adv_N, bucket=rl.bucket,
                                   rows_multiple=rows_multiple, train_anchor=rl.train_anchor)
      width = _global_max(local["tokens_NT"].shape[1])  # every host's rows in one global shape
      if width > local["tokens_NT"].shape[1]:
        local = {k: np.pad(v, ((0, 0), (0, width - v.shape[1]))) if v.ndim == 2 else v
                 for k, v in local.items()}
      minibatches = [trainer.put_batch(mb)
                     for mb in batch_lib.split_rows(local, rl.minibatches_per_rollout)]
      for mb in minibatches:  # the rollout policy's log-probs, before this rollout's updates
        mb["old_logp_NT"] = trainer.logprobs(state.params, mb)
      per_update = []
      for mb in minibatches:
        state, m = trainer.step(state, ref_params, mb)
        per_update.append(m)
      per_update = jax.device_get(per_update)
      t2 = time.perf_counter()
      step += 1
      values = dict(_combine_updates(per_update), **_gather_stats(stats))
      values.update({"optimizer_step": int(state.step), "epoch": epoch,
                     "time/rollout_s": t1 - t0, "time/update_s": t2 - t1,
                     "time/step_s": time.perf_counter() - t0})
      writer.write(step, values)
      bar.update(1)
      if checkpointer.due(step) or step == rl.steps or stop["sigterm"]:
        checkpointer.save(step, state, loop_state(step))
      if on_step is not None:
        on_step(step, state, writer)
  finally:
    signal.signal(signal.SIGTERM, previous)
    bar.close()
    writer.close()
    checkpointer.close()
  return state


def make_fake_rollout(config: ml_collections.ConfigDict, vocab_size: int):
  from arenarl_jax.fake_rollout import FakeRollout  # pylint: disable=import-outside-toplevel
  return FakeRollout(vocab_size=vocab_size, group_size=config.sampling.group_size,
                     num_prompts=config.rl.fake_prompts,
                     max_new_tokens=config.sampling.max_new_tokens,
                     temperature=config.sampling.temperature, seed=config.seed)


# rl.rollout -> factory(config, vocab_size); "agent" (the real one, rl_rollout.py) is built by
# ``pipeline`` from the environment, the policy and the judge.
ROLLOUTS = {"fake": make_fake_rollout}


def main(config: ml_collections.ConfigDict, workdir: str):
  """``--mode=train``: joins the hosts, loads the policy, runs the loop with ``rl.rollout``."""
  if config.rl.rollout == "agent":
    pipeline(config, workdir, stages=("rl",))
    return
  initialize_distributed(config.distributed)
  from arenarl_jax.models.loading import load_model  # pylint: disable=import-outside-toplevel
  if config.rl.rollout not in ROLLOUTS:
    raise ValueError(f"rl.rollout: unknown value {config.rl.rollout!r}; known: {sorted(ROLLOUTS)}")
  # The converted-parameter cache is written and read with single-host orbax calls: several
  # processes convert the GGUF themselves instead (seconds).
  model_cfg, model = load_model(config.model.source, cache_dir=config.model.cache_dir or None,
                                use_cache=jax.process_count() == 1)
  rollout = ROLLOUTS[config.rl.rollout](config, model_cfg.vocab_size)
  state = run(config, workdir, rollout, model=model)
  if jax.process_index() == 0:
    print(f"RESULT stage=train steps={int(config.rl.steps)} optimizer_steps={int(state.step)}")


# ------------------------------------------------------------------------------ the pipeline
STAGES = ("sft", "rl", "eval")


def _with_params(model, params):
  """``model`` (nnx) with its weights replaced by ``params`` (a pure dict; arrays kept as is)."""
  graphdef, state = nnx.split(model)
  nnx.replace_by_pure_dict(state, params)
  return nnx.merge(graphdef, state)


def _rl_params(config, workdir: str, model):
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
    trainer = make_trainer(config, graphdef, params, mesh)
    state, loop = checkpointer.restore(latest, trainer.init_state(params))
    return state.params, int(loop["step"])
  finally:
    checkpointer.close()


def make_training_judge(config, env):
  """``judge.*``'s judge; the rubric backend reads the environment's checker."""
  from arenarl_jax.judges import make_judge  # pylint: disable=import-outside-toplevel
  extra = {"checker": env.checker} if config.judge.backend == "rubric" else {}
  return make_judge(config.judge, **extra)


def pipeline(config: ml_collections.ConfigDict, workdir: str,
             stages: tuple[str, ...] = STAGES):
  """SFT (when ``sft.steps`` > 0) -> RL with the agent rollout -> evaluation, each resumable.

  ``stages`` picks what runs (``--mode=sft|train|eval`` run one): a stage that is not run reads
  its result from ``workdir`` (the SFT checkpoint, the newest RL checkpoint). Evaluations (the
  noise-free checker, ``evaluator.py``) run at RL step 0, every ``eval.every_steps`` and at the
  end; the final one is printed as a table and a ``RESULT`` line and returned.
  """
  from arenarl_jax import evaluator as eval_lib  # pylint: disable=import-outside-toplevel
  from arenarl_jax import policy as policy_lib  # pylint: disable=import-outside-toplevel
  from arenarl_jax import rl_rollout, sft  # pylint: disable=import-outside-toplevel
  from arenarl_jax.data import builder  # pylint: disable=import-outside-toplevel
  from arenarl_jax.envs import base  # pylint: disable=import-outside-toplevel
  unknown = set(stages) - set(STAGES)
  if unknown:
    raise ValueError(f"pipeline: unknown stage(s) {sorted(unknown)}; known: {STAGES}")
  initialize_distributed(config.distributed)
  main_process = jax.process_index() == 0
  env = base.make_environment_from_config(config.env)
  # Process 0 builds the dataset and trains and saves the tokenizer before the others look.
  data_path = _process_0_first(lambda: sft.dataset_path(config), "dataset")
  policy = _process_0_first(lambda: policy_lib.make_policy(config, workdir, env), "policy")
  times = {}

  t0 = time.perf_counter()
  if config.sft.steps > 0:
    if "sft" in stages:
      sft_params, last = sft.run(config, workdir, policy, env, data_path=data_path)
      if main_process and last:
        print(f"sft: {int(config.sft.steps)} steps, final loss {last['loss']:.4f}")
    else:
      sft_params = sft.restore_params(config, workdir, policy)
    policy.model = _with_params(policy.model, sft_params)
  times["sft_s"] = time.perf_counter() - t0
  if stages == ("sft",):
    if main_process:
      print(f"RESULT stage=sft steps={int(config.sft.steps)}")
    return None
  start_params = nnx.to_pure_dict(nnx.split(policy.model)[1])

  evaluator = eval_lib.Evaluator(config, env, policy, workdir) if "eval" in stages else None
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
    tasks = rl_rollout.tasks_from_records(builder.data_source(data_path, "train"))
    truth = eval_lib.checker_judge(env) if config.judge.backend == "rubric" else None
    rollout = rl_rollout.AgentRollout(config, env, policy, tasks,
                                      make_training_judge(config, env), truth=truth,
                                      workdir=workdir)

    def on_step(step, state, writer):
      every = int(config.eval.every_steps)
      if evaluator is not None and every and step % every == 0 and step < config.rl.steps:
        rep = evaluator.evaluate(state.params, step, second=sft_rows)
        writer.write(step, rep.scalars())

    state = run(config, workdir, rollout, model=policy.model, on_step=on_step)
    final_params, final_step = state.params, int(config.rl.steps)
    times["rl_s"] = time.perf_counter() - t0
  else:
    final_params, final_step = _rl_params(config, workdir, policy.model)
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
    from arenarl_jax import curves  # pylint: disable=import-outside-toplevel
    curves.plot(workdir)
    print(eval_lib.result_line(report, config.eval.opponent or "sft"))
  return report


def export(config: ml_collections.ConfigDict, workdir: str, path: str = "") -> str:
  """``--mode=export``: the newest RL checkpoint's policy (else the SFT one) as an HF safetensors
  directory with the run's tokenizer (default ``<workdir>/export``); returns the directory."""
  from arenarl_jax import policy as policy_lib  # pylint: disable=import-outside-toplevel
  from arenarl_jax import sft  # pylint: disable=import-outside-toplevel
  from arenarl_jax.envs import base  # pylint: disable=import-outside-toplevel
  from arenarl_jax.models.safetensors_io import export_hf_dir  # pylint: disable=import-outside-toplevel
  initialize_distributed(config.distributed)  # every host joins the checkpoint restore
  env = base.make_environment_from_config(config.env)
  policy = policy_lib.make_policy(config, workdir, env)
  if config.sft.steps > 0:
    policy.model = _with_params(policy.model, sft.restore_params(config, workdir, policy))
  params, step = _rl_params(config, workdir, policy.model)
  if params is not None:
    from arenarl_jax.rl_rollout import on_one_device  # pylint: disable=import-outside-toplevel
    # On several hosts the state may be spread over them: every host gathers its own copy.
    policy.model = _with_params(policy.model, jax.device_get(on_one_device(params)))
  path = path or os.path.join(workdir, "export")
  if jax.process_index() == 0:
    export_hf_dir(policy.model, policy.cfg, path)
    policy.tokenizer.save(path)
    print(f"RESULT stage=export rl_step={step} path={path}")
  return path


def _has_rl_checkpoint(workdir: str) -> bool:
  path = os.path.join(workdir, "checkpoints")
  return os.path.isdir(path) and any(name.isdigit() for name in os.listdir(path))
