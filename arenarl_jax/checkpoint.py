"""Checkpoints with orbax: the train state (params, optimizer state, step) and the loop's state.

The loop's state is a JSON dict: the RL step, the data iterator's position, the PRNG key's data,
and whatever the rollout needs to continue exactly (the judge's reply cache and its noise
generator's state), so a resumed run draws the same prompts, samples and judge noise.
Saves are synchronous (a SIGKILL right after ``save`` returns loses nothing); every process calls
``save`` and ``restore`` (orbax coordinates hosts; a save from one host only would hang a pod).
"""
from __future__ import annotations

import os
from typing import Any, Mapping

import jax
import orbax.checkpoint as ocp


def abstract_like(tree: Any) -> Any:
  """Shapes, dtypes and shardings of ``tree``: restores straight into the same placement."""
  return jax.tree.map(lambda x: jax.ShapeDtypeStruct(x.shape, x.dtype, sharding=x.sharding), tree)


class Checkpointer:
  """Every ``every`` RL steps (and whenever asked: at the end, on SIGTERM); keeps the newest ``keep``."""

  def __init__(self, directory: str, *, every: int, keep: int):
    if every <= 0 or keep <= 0:
      raise ValueError(f"checkpoint.every ({every}) and checkpoint.keep ({keep}) must be positive")
    self.every = int(every)
    # Local paths made absolute (orbax wants that); URLs (gs://...) kept as they are.
    self.directory = directory if "://" in directory else os.path.abspath(directory)
    self._manager = ocp.CheckpointManager(
        self.directory,
        options=ocp.CheckpointManagerOptions(max_to_keep=keep, create=True,
                                             enable_async_checkpointing=False))

  def due(self, step: int) -> bool:
    return step % self.every == 0

  def latest_step(self) -> int | None:
    return self._manager.latest_step()

  def all_steps(self) -> list[int]:
    return list(self._manager.all_steps())

  def save(self, step: int, state: Any, loop: Mapping[str, Any]) -> None:
    """Saves (state, loop) as ``step`` unless that step is already saved; returns once durable."""
    if step in self._manager.all_steps():
      return
    self._manager.save(step, args=ocp.args.Composite(state=ocp.args.StandardSave(state),
                                                     loop=ocp.args.JsonSave(dict(loop))))
    self._manager.wait_until_finished()

  def restore(self, step: int, state_like: Any) -> tuple[Any, dict]:
    """(state placed like ``state_like``, loop dict) of ``step``."""
    out = self._manager.restore(step, args=ocp.args.Composite(
        state=ocp.args.StandardRestore(abstract_like(state_like)), loop=ocp.args.JsonRestore()))
    return out["state"], dict(out["loop"])

  def close(self) -> None:
    self._manager.close()
