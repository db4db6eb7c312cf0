"""The contract every environment and tool source keeps (ARCHITECTURE.md, "training half").

- A **tool source** lists OpenAI function schemas (``tools()``) and answers ``await call(name,
  arguments, timeout=...)`` with a :class:`ToolResult`. It is stateless per call, safe to call
  concurrently, and never raises for bad arguments, unknown tools, timeouts or failures: those
  come back as ``ok=False`` with an error text the model sees and an ``error_kind`` for metrics.
- An **environment** (one per world, chosen by ``env.name``) owns its tasks, its tool source, the
  rubric judge's checker (partial credit, a training reward), the strict verifier (all or
  nothing, the evaluation's headline metric and never part of a reward), the validity rule for
  answers and an expert agent that writes reference-format messages.
- :func:`make_environment` builds one from the registry, whose keys equal the config values.
"""
from __future__ import annotations

import dataclasses
import hashlib
import math
import os
import sys
from typing import Any, Callable, Mapping, Protocol, Sequence, runtime_checkable

import numpy as np

from arenarl_jax import types
from arenarl_jax.envs import settings as env_settings
from arenarl_jax.envs.settings import COMMON_KEYS  # noqa: F401 (env.* keys every environment takes)
from arenarl_jax.settings import section_dict, settings_from_config

# error_kind values shared by every tool source (metrics group tool errors by these).
UNKNOWN_TOOL = "unknown_tool"  # no tool of that name
BAD_ARGUMENTS = "bad_arguments"  # missing / extra / wrongly typed / out-of-range arguments
NOT_FOUND = "not_found"  # valid arguments that name nothing in the world (unknown city, POI, date)
TIMEOUT = "timeout"  # the call did not finish within its timeout
TRANSPORT = "transport"  # the server could not be reached or died (MCP)
TOOL_ERROR = "tool_error"  # the tool itself failed (an exception inside it, a server-side error)
ERROR_KINDS = (UNKNOWN_TOOL, BAD_ARGUMENTS, NOT_FOUND, TIMEOUT, TRANSPORT, TOOL_ERROR)


@dataclasses.dataclass(frozen=True)
class ToolResult:
  """What one tool call returned: plain text the model reads, and how the call went."""

  text: str
  ok: bool = True
  error_kind: str | None = None  # one of ERROR_KINDS when ok is False
  latency_s: float = 0.0


@runtime_checkable
class ToolSource(Protocol):
  """In-process tools, an MCP client or a test fake: the rollout only sees this."""

  def tools(self) -> list[dict[str, Any]]:
    """OpenAI function schemas: ``{"name", "description", "parameters"}`` each."""
    ...

  async def call(self, name: str, arguments: Mapping[str, Any] | str, *,
                 timeout: float | None = None) -> ToolResult:
    """Runs one call; ``arguments`` may be a dict or its JSON string. Never raises."""
    ...


@dataclasses.dataclass(frozen=True)
class Task:
  """One prompt of an environment. ``id`` is stable across processes (``"travel/search/000123"``).

  ``constraints`` holds what the task asks for in structured form (budget, dates, party, ...);
  checkers re-derive ground truth from the environment's seed and the id, never from a trajectory.
  """

  id: str
  env: str
  subtask: str
  query: str
  constraints: Mapping[str, Any] = dataclasses.field(default_factory=dict)


@dataclasses.dataclass(frozen=True)
class Verification:
  """The strict verifier's verdict on one trajectory: did it solve its task?

  ``total`` counts the task's requirements (``finished`` is one of them), ``met`` those that
  hold, and ``unmet`` names the others (``finished``, ``fact:price:<place>``,
  ``constraint:rating:<place>``, ``count``, ``budget``, ``schedule``, ...). A trajectory that did
  not finish with an answer meets nothing (``met = 0``) and its ``unmet`` may name ``finished``
  only. ``solved`` is ``met == total`` (and ``unmet`` is empty exactly then).

  ``content_met`` of ``content_total`` count the content requirements alone: every requirement
  but the format ones, which a well-formed answer that states nothing meets (travel: all but
  ``finished`` and ``facts_supported``; research: the ``fact:*`` ones). None where the
  environment does not say which requirements are content (:func:`verdict` fills them).
  """

  met: int
  total: int
  unmet: tuple[str, ...] = ()
  content_met: int | None = None
  content_total: int | None = None
  solved: bool = dataclasses.field(init=False)

  def __post_init__(self):
    if self.total < 1 or not 0 <= self.met <= self.total:
      raise ValueError(f"Verification: need 0 <= met <= total and total >= 1, got met={self.met} "
                       f"total={self.total}")
    if (self.content_total is None) != (self.content_met is None) or (
        self.content_total is not None
        and not 0 <= self.content_met <= min(self.content_total, self.met)
        or (self.content_total or 0) > self.total):
      raise ValueError(f"Verification: need 0 <= content_met <= content_total <= total and "
                       f"content_met <= met, got content_met={self.content_met} content_total="
                       f"{self.content_total} met={self.met} total={self.total}")
    object.__setattr__(self, "unmet", tuple(self.unmet))
    # An unfinished trajectory meets nothing but needs only ``finished`` named.
    if bool(self.unmet) == (self.met == self.total) or len(self.unmet) > self.total - self.met:
      raise ValueError(f"Verification: unmet {self.unmet!r} disagrees with met={self.met} of "
                       f"total={self.total}")
    object.__setattr__(self, "solved", self.met == self.total)

  @property
  def met_rate(self) -> float:
    return self.met / self.total

  @property
  def content_met_rate(self) -> float:
    """``content_met / content_total``; NaN without content requirements."""
    if not self.content_total:
      return math.nan
    return self.content_met / self.content_total

  def as_dict(self) -> dict[str, Any]:
    """The eval jsonl's fields: ``solved``, ``unmet``, ``met``, ``total`` (and
    ``content_met``, ``content_total`` where the environment names its content)."""
    out = {"solved": self.solved, "unmet": list(self.unmet), "met": self.met,
           "total": self.total}
    if self.content_total is not None:
      out.update(content_met=self.content_met, content_total=self.content_total)
    return out


def first_call_names(trajectory: types.Trajectory, names: Sequence[str]) -> bool:
  """Whether the trajectory's first assistant turn calls a tool with an argument equal to one
  of ``names`` (a string argument, or an element of a list argument; exact match)."""
  if not trajectory.steps:
    return False
  wanted = set(names)
  for call in trajectory.steps[0].tool_calls:
    for value in call.arguments.values():
      values = value if isinstance(value, (list, tuple)) else [value]
      if any(isinstance(v, str) and v in wanted for v in values):
        return True
  return False


def verdict(checks: Sequence[tuple[str, bool]], finished: bool,
            is_content: Callable[[str], bool]) -> Verification:
  """The verification of a task's ``checks`` ((name, met) of every requirement, in order);
  ``is_content`` says which names are content requirements. A trajectory that did not finish
  meets nothing and names ``finished`` alone."""
  content = [ok for name, ok in checks if is_content(name)]
  if not finished:
    return Verification(0, len(checks), ("finished",), content_met=0,
                        content_total=len(content))
  unmet = tuple(name for name, ok in checks if not ok)
  return Verification(len(checks) - len(unmet), len(checks), unmet,
                      content_met=sum(content), content_total=len(content))


# Finish reasons of a trajectory that ended with its own answer; "" is a trajectory built outside
# a rollout (from reference messages), which ends where its messages end.
ANSWERED = ("answer", "")


def final_answer(trajectory: types.Trajectory) -> str:
  """The answer a trajectory finished with, or "" when it did not finish with one: it stopped at
  a limit (``length``, ``max_turns``), its answer was invalid or failed, or its last turn is a
  tool call left unanswered. Checkers and verifiers grade this text only."""
  if trajectory.finish_reason not in ANSWERED or not trajectory.steps:
    return ""
  last = trajectory.steps[-1]
  if last.tool_calls:
    return ""
  return last.content or ""


@runtime_checkable
class Environment(Protocol):
  """A world: tasks, tools, a checker (the rubric judge's ``Checker``), validity and an expert.

  Optional: ``names() -> tuple[str, ...]``, the names its tasks and tools use (cities, places),
  which a task tokenizer keeps whole with ``model.init.whole_names``; ``name_kinds() ->
  dict[str, str]``, each name's kind (``model.init.name_init=by_kind``); ``name_groups() ->
  dict[str, tuple[str, ...]]``, the names an SFT row may swap for one another
  (``sft.rename_share``, ``data/renaming.py``); ``query_places(task) -> tuple[str, ...]``, the
  places a task's query names (the evaluation's ``first_call_place_rate``).
  """

  name: str  # the registry key = the ``env.name`` config value
  rubric: str  # the judge rubric this world is scored on ("travel", "deep_research")
  subtasks: tuple[str, ...]

  def tasks(self, split: str) -> list[Task]:
    """``"train"``, ``"sft"``, ``"test_<subtask>"`` or ``"valid_<subtask>"`` (validation tasks,
    disjoint from train and test, for choosing settings); deterministic from the seed."""
    ...

  def tool_source(self) -> ToolSource:
    ...

  def checker(self, trajectory: types.Trajectory) -> dict[str, dict[str, float]]:
    """``{"path": {dim: 0-10}, "answer": {dim: 0-10}}`` for the task ``metadata["task_id"]``."""
    ...

  def verify(self, trajectory: types.Trajectory) -> Verification:
    """The strict verifier for the task ``metadata["task_id"]``: every requirement must hold."""
    ...

  def valid(self, answer: str, task: Task | str | None = None) -> tuple[bool, str]:
    """Whether a final answer's content is a valid generation, and why not ("" when valid).

    With the task (or its id) the subtask's own rules apply too (a plan names places and times;
    technical writing has sections); without it only the rules common to every subtask.
    """
    ...

  def expert(self, task: Task, error_rate: float,
             rng: np.random.Generator | int) -> list[dict[str, Any]]:
    """A reference-format conversation (messages) solving ``task`` with nested errors."""
    ...


EnvironmentFactory = Callable[..., Environment]
_REGISTRY: dict[str, EnvironmentFactory] = {}


def register(name: str) -> Callable[[EnvironmentFactory], EnvironmentFactory]:
  """Class/function decorator: ``@register("travel")`` makes ``env.name=travel`` build it."""

  def wrap(factory: EnvironmentFactory) -> EnvironmentFactory:
    if name in _REGISTRY and _REGISTRY[name] is not factory:
      raise ValueError(f"environment {name!r} is registered twice")
    _REGISTRY[name] = factory
    return factory

  return wrap


def _import_builtin_environments() -> None:
  # Imported lazily so that `envs.base` stays dependency-free; each module registers itself.
  import importlib
  for module in ("arenarl_jax.envs.travel", "arenarl_jax.envs.research"):
    try:
      importlib.import_module(module)
    except ModuleNotFoundError as e:
      if e.name != module:  # a real missing dependency inside the module: report it
        raise


def registered() -> Sequence[str]:
  """Names accepted by :func:`make_environment`."""
  _import_builtin_environments()
  return tuple(sorted(_REGISTRY))


def _factory(name: str) -> EnvironmentFactory:
  """The registered factory of ``name``; an unknown name is an error naming the known ones."""
  _import_builtin_environments()
  if name not in _REGISTRY:
    raise ValueError(f"env.name: unknown environment {name!r}; known: {sorted(_REGISTRY)}")
  return _REGISTRY[name]


def code_version(name: str) -> str:
  """SHA-256 of the source of the environment ``name``: every ``.py`` file of the package that
  registers it (or its module alone, outside a package).

  Data generated from an environment (tasks, expert conversations, references) is cached by
  this digest, so editing the environment's code can never serve data the code no longer writes.
  """
  path = getattr(sys.modules.get(_factory(name).__module__), "__file__", None)
  if not path:
    raise ValueError(f"environment {name!r}: its module has no source file to version")
  folder = os.path.dirname(path)
  files = ([os.path.join(folder, f) for f in sorted(os.listdir(folder)) if f.endswith(".py")]
           if os.path.isfile(os.path.join(folder, "__init__.py")) else [path])
  h = hashlib.sha256()
  for f in files:
    with open(f, "rb") as fh:
      h.update(os.path.basename(f).encode() + b"\0" + fh.read() + b"\0")
  return h.hexdigest()


def make_environment(name: str, seed: int = 0, **kwargs: Any) -> Environment:
  """Builds the environment ``name`` (the ``env.name`` config value) from ``seed``."""
  return _factory(name)(seed=seed, **kwargs)


def environment_kwargs(env_config: Mapping[str, Any]) -> dict[str, Any]:
  """The constructor keywords of a run's ``env`` section besides ``seed``: the keys every
  environment takes and the ``env.<name>`` section, checked against its registered settings."""
  name = env_config["name"]
  kwargs = {k: env_config[k] for k in env_settings.COMMON_KEYS if k in env_config}
  own = env_config.get(name, None)
  spec = env_settings.ENVIRONMENTS.get(name)
  if spec is not None and spec.settings is not None:
    kwargs.update(dataclasses.asdict(settings_from_config(spec.settings, own, f"env.{name}")))
  else:  # an environment without registered settings takes its section's keys as they are
    kwargs.update(section_dict(own, f"env.{name}"))
  return kwargs


def make_environment_from_config(env_config: Mapping[str, Any]) -> Environment:
  """The environment of a run's ``env`` config section (``name``, ``seed`` and
  :func:`environment_kwargs`)."""
  return make_environment(env_config["name"], int(env_config["seed"]),
                          **environment_kwargs(env_config))


def records_settings(env_config: Mapping[str, Any]) -> dict[str, Any]:
  """The settings of :func:`environment_kwargs` that shape the dataset's records and differ from
  their defaults, sorted by key (a run at the defaults names none). Fields marked
  ``settings.NOT_IN_RECORDS`` never do; an environment without registered settings counts every
  key of its section; ``reference_error_rate`` is the dataset's own ``error_rate``."""
  name = env_config["name"]
  spec = env_settings.ENVIRONMENTS.get(name)
  classes = [env_settings.CommonSettings] + ([spec.settings] if spec and spec.settings else [])
  defaults, skip = {}, {"reference_error_rate"}
  for cls in classes:
    for f in dataclasses.fields(cls):
      defaults[f.name] = f.default
      if f.metadata.get("records", True) is False:
        skip.add(f.name)
  kwargs = environment_kwargs(env_config)
  return {k: v for k, v in sorted(kwargs.items())
          if k not in skip and (k not in defaults or v != defaults[k])}
