"""The offline deep-research environment, registered as ``env.name=research``.

Tasks, tools, checker (partial credit), verifier (all or nothing), validity and expert all derive
from one corpus (built from the standard library's documentation and cached on disk, see
corpus.py) and the seed. The corpus, index and
tasks are built on first use, so registering and constructing the environment is cheap.
"""
from __future__ import annotations

import functools
from typing import Any, Mapping

import numpy as np

from arenarl_jax import types
from arenarl_jax.envs import base, inprocess
from arenarl_jax.envs import settings as env_settings
from arenarl_jax.envs.research import checker as checker_lib
from arenarl_jax.envs.research import corpus as corpus_lib
from arenarl_jax.envs.research import expert as expert_lib
from arenarl_jax.envs.research import search
from arenarl_jax.envs.research import tasks as tasks_lib
from arenarl_jax.envs.research import valid as valid_lib
from arenarl_jax.envs.research import verifier as verifier_lib


@base.register("research")
class ResearchEnvironment:
  """Search-and-write research tasks over the standard library's documentation."""

  name = "research"
  rubric = env_settings.rubric_of("research")
  subtasks = tasks_lib.KINDS

  def __init__(self, seed: int = 0, cache_dir: str | None = None,
               corpus: corpus_lib.Corpus | None = None,
               tool_max_chars: int = inprocess.DEFAULT_MAX_CHARS,
               reference_error_rate: float = 0.3):
    if not 0.0 <= reference_error_rate <= 1.0:
      raise ValueError(f"env.reference_error_rate must be in [0, 1], got {reference_error_rate}")
    self.reference_error_rate = float(reference_error_rate)
    self.tool_max_chars = int(tool_max_chars)
    self.seed = int(seed)
    self._cache_dir = cache_dir or None
    self._corpus = corpus

  def __repr__(self) -> str:
    return f"ResearchEnvironment(seed={self.seed})"

  @property
  def corpus(self) -> corpus_lib.Corpus:
    if self._corpus is None:
      self._corpus = corpus_lib.load_corpus(self._cache_dir)
    return self._corpus

  @functools.cached_property
  def index(self) -> search.SearchIndex:
    return search.make_index(self.corpus)

  @functools.cached_property
  def _splits(self) -> dict[str, list[base.Task]]:
    return tasks_lib.generate_tasks(self.corpus, self.seed)

  @functools.cached_property
  def _by_id(self) -> dict[str, base.Task]:
    return {t.id: t for split in self._splits.values() for t in split}

  @functools.cached_property
  def _expert(self) -> expert_lib.Expert:
    return expert_lib.make_expert(self.index)

  def tasks(self, split: str) -> list[base.Task]:
    if split not in self._splits:
      raise ValueError(f"research: unknown split {split!r}; splits: {sorted(self._splits)}")
    return list(self._splits[split])

  def task(self, task_id: str) -> base.Task:
    task = self._by_id.get(task_id)
    if task is None:
      raise KeyError(f"research: unknown task id {task_id!r} (seed {self.seed})")
    return task

  def tool_source(self) -> base.ToolSource:
    return self.index.tool_source(self.tool_max_chars)

  def _task_of(self, trajectory: types.Trajectory, what: str) -> base.Task:
    task_id = (trajectory.metadata or {}).get("task_id")
    if not isinstance(task_id, str):
      raise ValueError(f"research {what}: trajectory.metadata['task_id'] is missing")
    return self.task(task_id)

  def checker(self, trajectory: types.Trajectory) -> dict[str, dict[str, float]]:
    """The rubric scores (partial credit, a training reward through the rubric judge)."""
    return checker_lib.score(self._task_of(trajectory, "checker"), trajectory)

  def verify(self, trajectory: types.Trajectory) -> base.Verification:
    """The strict verifier (the evaluation's headline metric, never part of a reward)."""
    return verifier_lib.verify(self._task_of(trajectory, "verifier"), trajectory)

  def valid(self, answer: str, task: base.Task | str | None = None) -> tuple[bool, str]:
    """Content validity; with the task (or its id) the kind's structure is required too."""
    if isinstance(task, str):
      task = self.task(task)
    if task is None:
      return valid_lib.valid_answer(answer)
    return valid_lib.valid_answer(answer, task.subtask, task.constraints)

  def expert(self, task: base.Task, error_rate: float,
             rng: np.random.Generator | int) -> list[dict[str, Any]]:
    return self._expert.run(task, error_rate, rng)

  def reference(self, task: base.Task, rng: np.random.Generator | int) -> list[dict[str, Any]]:
    """An evaluation reference: the expert at ``reference_error_rate`` (SFT data uses rate 0)."""
    return self.expert(task, self.reference_error_rate, rng)

  def expert_with_errors(self, task: base.Task,
                         errors: Mapping[str, Any] | set[tuple[str, int]]) -> list[dict[str, Any]]:
    """The expert conversation with exactly the given error sites (see expert.error_sites)."""
    return self._expert.write(task, set(errors))
