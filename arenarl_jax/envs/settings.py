"""The ``env`` config section's settings: the keys every environment takes, each environment's own
section (``env.<name>``) and its rubric, and the MCP client's ``env.mcp``.

    ENVIRONMENTS["travel"] == EnvironmentSpec(settings=TravelSettings, rubric="travel")

``config_tree`` generates ``env.<name>`` from each registered environment's settings class, and
``base.make_environment_from_config`` builds it back with ``settings.settings_from_config`` (an
unknown key names ``env.<name>`` and the key). The spec also names the judge rubric the world is
scored on, so ``judge.rubric=""`` can mean "the environment's" (``judges.settings``). Standard
library only: loading a config must not import numpy or the environments themselves, so the
built-in environments are registered here and their classes read their rubric from here; an
environment defined elsewhere calls ``register`` next to its ``base.register`` (before the
config is made, for its section to appear).
"""
from __future__ import annotations

import dataclasses

DEFAULT_MAX_CHARS = 5000  # the reference cuts tool outputs to 5,000 characters
# Field metadata of a setting that never changes a built dataset record (a checker's weight, a
# cache folder): the dataset's name leaves it out (``records_settings``), so changing it does not
# rebuild the data. Every other setting is part of the name, so no change reads a stale dataset.
NOT_IN_RECORDS = {"records": False}


@dataclasses.dataclass(frozen=True)
class CommonSettings:
  """``env.*`` keys every environment's constructor takes (besides ``seed``)."""

  tool_max_chars: int = DEFAULT_MAX_CHARS  # tool outputs are cut to this many characters
  reference_error_rate: float = 0.3  # the expert's error rate in evaluation references (SFT: 0)


COMMON_KEYS = tuple(f.name for f in dataclasses.fields(CommonSettings))


@dataclasses.dataclass(frozen=True)
class TravelSettings:
  """``env.travel``: keys only the travel environment takes."""

  train_per_subtask: int = 250  # training tasks per subtask (5 subtasks)
  test_per_subtask: int = 50  # test tasks per subtask (the paper's test set: 5 x 50)
  # The checker's cost, on answer relevance, feasibility and clarity, of every wrong fact beyond
  # the second (envs/travel/checker.py says why; 0-10 points each).
  wrong_fact_cost: int = dataclasses.field(default=4, metadata=NOT_IN_RECORDS)


@dataclasses.dataclass(frozen=True)
class ResearchSettings:
  """``env.research``: keys only the deep-research environment takes."""

  # corpus cache; "" = $ARENARL_RESEARCH_CACHE or ~/.cache
  cache_dir: str = dataclasses.field(default="", metadata=NOT_IN_RECORDS)


@dataclasses.dataclass(frozen=True)
class McpClientSettings:
  """Settings of one MCP server connection (the ``env.mcp`` config section, field for field)."""

  command: str = ""  # shell-style command line; "" = serve env.name/env.seed from this package
  concurrency: int = 16  # calls in flight at once
  timeout_s: float = 30.0  # per call, from when it got its slot; <= 0: no limit
  retries: int = 2  # extra attempts at reaching a live server
  backoff_s: float = 0.2  # delay before the first retry, doubled each time
  connect_timeout_s: float = 60.0  # spawn + initialize + tools/list
  cache_size: int = 4096  # cached successful results; 0 = no cache
  name_map: str = ""  # JSON object {"paper_tool_name": "server_tool_name"}; "" = same names
  inherit_env: str = "PYTHONPATH"  # comma-separated variables passed on besides the SDK's safe set
  max_chars: int = DEFAULT_MAX_CHARS  # result text cut to this many characters


@dataclasses.dataclass(frozen=True)
class EnvironmentSpec:
  """What the config knows of an environment without importing it."""

  settings: type | None  # its env.<name> section's class; None = only the common keys
  rubric: str  # the judge rubric its world is scored on (judges/rubric.py BUILTIN or a path)


ENVIRONMENTS: dict[str, EnvironmentSpec] = {}


def register(name: str, rubric: str, settings: type | None = None) -> EnvironmentSpec:
  """Declares environment ``name``'s rubric and its ``env.<name>`` settings class."""
  spec = EnvironmentSpec(settings=settings, rubric=rubric)
  if name in ENVIRONMENTS and ENVIRONMENTS[name] != spec:
    raise ValueError(f"environment settings {name!r} are registered twice")
  if settings is not None and (name in COMMON_KEYS or name in _SECTION_KEYS):
    raise ValueError(f"environment name {name!r} would shadow the env.{name} config key")
  ENVIRONMENTS[name] = spec
  return spec


def rubric_of(name: str) -> str:
  """The rubric environment ``name`` is scored on."""
  if name not in ENVIRONMENTS:
    raise ValueError(f"env.name: no settings registered for {name!r}; known: "
                     f"{sorted(ENVIRONMENTS)}")
  return ENVIRONMENTS[name].rubric


# env.* keys that are not environment sections (config_tree declares them).
_SECTION_KEYS = ("name", "seed", "tools", "schemas", "mcp")

register("travel", rubric="travel", settings=TravelSettings)
register("research", rubric="deep_research", settings=ResearchSettings)
