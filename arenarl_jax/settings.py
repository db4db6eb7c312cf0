"""Config sections <-> frozen settings dataclasses, the one way both directions.

    settings = settings_from_config(HttpJudgeSettings, config.judge.http, "judge.http")
    section = defaults(HttpJudgeSettings)   # field -> default: what config_tree declares

A settings class is a frozen dataclass, every field with a default, whose fields are the keys
of one config section (``judge.http``, ``env.travel``, ``eval``, ...). ``config_tree`` builds the
section from ``defaults`` and the code that uses it builds the dataclass with
``settings_from_config``, so the two cannot drift, and a key the class does not take is an error
naming the section and the key, never dropped. Two kinds of field go beyond one flat section:
a field whose default is itself a settings object is a sub-section (``model.init``), and a field
declared with ``outside`` is not in the section at all: its value comes from another key
(``rollout``'s ``max_turns`` is ``sampling.max_turns``) and is passed as a keyword argument.
The library below ``pipeline.py`` takes these objects, never the whole config. Standard library
only: config files import this (through ``config_tree``) without loading jax or any backend.
"""
from __future__ import annotations

import dataclasses
from typing import Any, Mapping, TypeVar

T = TypeVar("T")
_OUTSIDE = "outside_section"  # field metadata: the config key the value comes from


def outside(default: Any, source: str) -> Any:
  """A settings field that is not a key of the class's own section: ``source`` names where its
  value lives (``"sampling.max_turns"``; "" for a value only code sets). ``defaults`` leaves it
  out, a section that holds it is an error, and ``settings_from_config`` takes it as ``extra``."""
  return dataclasses.field(default=default, metadata={_OUTSIDE: source})


def section_dict(section: Any, where: str) -> dict[str, Any]:
  """A plain dict from a ConfigDict (``to_dict``), a mapping or None (an empty section)."""
  if section is None:
    return {}
  if hasattr(section, "to_dict"):
    return section.to_dict()
  if isinstance(section, Mapping):
    return dict(section)
  raise TypeError(f"{where}: expected a ConfigDict or a mapping, got {type(section).__name__}")


def field_names(cls: type) -> tuple[str, ...]:
  """The fields of a settings dataclass, in declaration order."""
  if not (isinstance(cls, type) and dataclasses.is_dataclass(cls)):
    raise TypeError(f"{cls!r} is not a settings dataclass")
  return tuple(f.name for f in dataclasses.fields(cls))


def section_names(cls: type) -> tuple[str, ...]:
  """The fields of a settings dataclass that are keys of its section (not ``outside``)."""
  return tuple(f.name for f in dataclasses.fields(cls) if _OUTSIDE not in f.metadata)


def _is_settings(value: Any) -> bool:
  return dataclasses.is_dataclass(value) and not isinstance(value, type)


def defaults(cls: type) -> dict[str, Any]:
  """Section key -> default of a settings dataclass (every field must have one): a config
  section, sub-sections as nested dicts, ``outside`` fields left out."""
  instance = cls()
  out = {}
  for name in section_names(cls):
    value = getattr(instance, name)
    out[name] = defaults(type(value)) if _is_settings(value) else value
  return out


def settings_from_config(cls: type[T], section: Any, where: str, **extra: Any) -> T:
  """``cls`` from config section ``where`` (a ConfigDict, a mapping or None), plus ``extra``.

  An unknown key raises ValueError naming ``where`` and the key, so a typo in a config file or on
  the command line cannot be silently ignored. A sub-section (a field whose default is a
  settings object) is built the same way, named ``where.<field>``. ``extra`` sets fields that
  live outside the section (``rollout``'s ``max_turns`` comes from ``sampling.max_turns``); it
  wins over the section. The class's own ``__post_init__`` checks the values.
  """
  values = section_dict(section, where)
  names = section_names(cls)
  unknown = sorted(set(values) - set(names))
  if unknown:
    raise ValueError(f"{where}: unknown key(s) {unknown}; allowed: {sorted(names)}")
  bad_extra = sorted(set(extra) - set(field_names(cls)))
  if bad_extra:
    raise TypeError(f"{where}: {cls.__name__} has no field(s) {bad_extra}")
  for f in dataclasses.fields(cls):
    if f.name in values and _is_settings(f.default) and not _is_settings(values[f.name]):
      values[f.name] = settings_from_config(type(f.default), values[f.name], f"{where}.{f.name}")
  return cls(**{**values, **extra})


# ------------------------------------------------ the sections the base modules read
@dataclasses.dataclass(frozen=True)
class CheckpointSettings:
  """The ``checkpoint.*`` config section: the RL stage's orbax checkpoints (``checkpoint.py``)."""

  every: int = 50  # RL steps between saves (and one at the end and on SIGTERM)
  keep: int = 3  # newest checkpoints kept
  resume: bool = True  # continue from the newest checkpoint in workdir/checkpoints

  @classmethod
  def from_config(cls, section: Any, **extra: Any) -> "CheckpointSettings":
    return settings_from_config(cls, section, "checkpoint", **extra)


@dataclasses.dataclass(frozen=True)
class MetricsSettings:
  """The ``metrics.*`` config section: where a stage's metrics go (``metrics.py``)."""

  tensorboard: bool = True  # TensorBoard event files beside metrics.jsonl
  jsonl: bool = True  # metrics.jsonl, one row per logged step
  progress: bool = True  # a progress bar on process 0

  @classmethod
  def from_config(cls, section: Any, **extra: Any) -> "MetricsSettings":
    return settings_from_config(cls, section, "metrics", **extra)
