"""The travel environment (``env.name=travel``): world, tasks, tools, checker, validity, expert."""
from __future__ import annotations

import hashlib
import re
from typing import Any, Sequence

import numpy as np

from arenarl_jax import types
from arenarl_jax.envs import base
from arenarl_jax.envs import inprocess
from arenarl_jax.envs import settings as env_settings
from arenarl_jax.envs.travel import checker as checker_lib
from arenarl_jax.envs.travel import copy_drills
from arenarl_jax.envs.travel import expert as expert_lib
from arenarl_jax.envs.travel import tasks as tasks_lib
from arenarl_jax.envs.travel import tools as tools_lib
from arenarl_jax.envs.travel import verifier as verifier_lib
from arenarl_jax.envs.travel import world as world_lib

PLAN_SUBTASKS = ("direction", "one_day", "multi_day")
_TIME = re.compile(r"\b\d{1,2}:\d{2}\b")
_PLACE = re.compile(r"\b[A-Z][a-z]+ [A-Z][a-z]+ [A-Z][a-z]+")


@base.register("travel")
class TravelEnvironment:
  """Open-Travel offline; the keyword arguments are the ``env.*`` config keys of the same names.

  ``tool_max_chars`` cuts tool outputs (the reference uses 5,000); ``train_per_subtask`` and
  ``test_per_subtask`` size the splits; ``reference_error_rate`` is the expert's error rate for
  evaluation references; ``wrong_fact_cost`` is the checker's (``checker.TravelChecker``).
  """

  name = "travel"
  rubric = env_settings.rubric_of("travel")
  subtasks = tasks_lib.SUBTASKS

  def __init__(self, seed: int = 0, tool_max_chars: int = inprocess.DEFAULT_MAX_CHARS,
               train_per_subtask: int = tasks_lib.TRAIN_PER_SUBTASK,
               test_per_subtask: int = tasks_lib.TEST_PER_SUBTASK,
               reference_error_rate: float = expert_lib.REFERENCE_ERROR_RATE,
               wrong_fact_cost: int = checker_lib.STEP_ANSWER):
    self.seed = int(seed)
    self.world = world_lib.make_world(self.seed)
    self._source = tools_lib.make_tool_source(self.world, max_chars=tool_max_chars)
    self._checker = checker_lib.TravelChecker(self.seed, wrong_fact_cost=wrong_fact_cost)
    self._expert = expert_lib.TravelExpert(self.world, self._source)
    self._sizes = (int(train_per_subtask), int(test_per_subtask))
    if not 0.0 <= reference_error_rate <= 1.0:
      raise ValueError(f"env.reference_error_rate must be in [0, 1], got {reference_error_rate}")
    self.reference_error_rate = float(reference_error_rate)

  def tasks(self, split: str) -> list[base.Task]:
    return list(tasks_lib.make_split(self.seed, split, *self._sizes))

  def task(self, task_id: str) -> base.Task:
    return tasks_lib.task_by_id(self.seed, task_id)

  def fingerprint(self) -> str:
    """SHA-256 of the world (cities, POIs, corpus, a sample of timetables) and every split."""
    h = hashlib.sha256()
    w = self.world
    h.update(repr((w.cities, sorted(w.pois.items()), w.docs)).encode())
    for a in w.cities[:6]:
      for b in w.cities[-6:]:
        for date in world_lib.DATES[::7]:
          h.update(repr((w.departures("flight", a.name, b.name, date),
                         w.departures("train", a.name, b.name, date))).encode())
    for split in ("train", "sft") + tuple(f"test_{s}" for s in self.subtasks):
      h.update(repr([(t.id, t.query, sorted(t.constraints.items())) for t in self.tasks(split)])
               .encode())
    return h.hexdigest()

  def tool_source(self) -> inprocess.InProcessToolSource:
    return self._source

  def checker(self, trajectory: types.Trajectory) -> dict[str, dict[str, float]]:
    return self._checker(trajectory)

  def verify(self, trajectory: types.Trajectory) -> base.Verification:
    """The strict verifier (:mod:`verifier`): every requirement of the task must hold."""
    task_id = (trajectory.metadata or {}).get("task_id")
    if not task_id:
      raise ValueError("travel verifier: trajectory.metadata['task_id'] is missing")
    task, gt = self._checker.truth(task_id)
    return verifier_lib.verify(self.world, task, gt, trajectory)

  def names(self) -> tuple[str, ...]:
    """The world's city and place names (a task tokenizer may keep each one whole)."""
    places = (p.name for pois in self.world.pois.values() for p in pois)
    return tuple(sorted({c.name for c in self.world.cities} | set(places)))

  def name_kinds(self) -> dict[str, str]:
    """Each of ``names()`` with its kind: ``city`` or ``place``."""
    kinds = {p.name: "place" for pois in self.world.pois.values() for p in pois}
    kinds.update({c.name: "city" for c in self.world.cities})
    return dict(sorted(kinds.items()))

  def query_places(self, task: base.Task | str) -> tuple[str, ...]:
    """The place names (not cities) that ``task``'s query states, in order of first mention."""
    if isinstance(task, str):
      task = self.task(task)
    if getattr(self, "_place_pattern", None) is None:
      places = sorted((n for n, k in self.name_kinds().items() if k == "place"),
                      key=lambda n: (-len(n), n))
      self._place_pattern = re.compile(
          r"(?<!\w)(?:" + "|".join(map(re.escape, places)) + r")(?!\w)")
    return tuple(dict.fromkeys(self._place_pattern.findall(task.query)))

  def copy_drill(self, rng: np.random.Generator) -> list[dict[str, Any]]:
    """One synthetic conversation that only reading answers (``copy_drills.py``)."""
    return copy_drills.drill(self.world, rng)

  def name_groups(self) -> dict[str, tuple[str, ...]]:
    """``names()`` by group: ``city`` and one group per place category (``place:<category>``),
    the names an SFT row may swap for one another (``data/renaming.py``)."""
    groups: dict[str, set[str]] = {"city": {c.name for c in self.world.cities}}
    for pois in self.world.pois.values():
      for p in pois:
        groups.setdefault(f"place:{p.category}", set()).add(p.name)
    return {g: tuple(sorted(names)) for g, names in sorted(groups.items())}

  def valid(self, answer: str, task: base.Task | str | None = None) -> tuple[bool, str]:
    """Content validity: non-empty; for a plan subtask's task (or id), names a place and a time."""
    if isinstance(task, str):
      task = self.task(task)
    subtask = task.subtask if task is not None else None
    if not isinstance(answer, str) or not answer.strip():
      return False, "empty answer"
    if subtask in PLAN_SUBTASKS or subtask is None:
      if subtask is not None and not _PLACE.search(answer):
        return False, "the plan names no concrete place"
      if subtask is not None and not _TIME.search(answer):
        return False, "the plan gives no time (HH:MM)"
    return True, ""

  def expert(self, task: base.Task, error_rate: float, rng: np.random.Generator | int,
             kinds: Sequence[str] = expert_lib.KINDS) -> list[dict[str, Any]]:
    return self._expert.solve(task, error_rate, rng, kinds)

  def reference(self, task: base.Task, rng: np.random.Generator | int) -> list[dict[str, Any]]:
    """An evaluation reference: the expert at ``reference_error_rate`` (SFT data uses rate 0)."""
    return self.expert(task, self.reference_error_rate, rng)
