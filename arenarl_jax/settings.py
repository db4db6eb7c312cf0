"""Config sections <-> frozen settings dataclasses, the one way both directions.

    settings = settings_from_config(HttpJudgeSettings, config.judge.http, "judge.http")
    section = defaults(HttpJudgeSettings)   # field -> default: what config_tree declares

A settings class is a frozen dataclass whose fields are exactly the keys of one config section
(``judge.http``, ``env.travel``, ``eval``, ...). ``config_tree`` builds the section from
``defaults`` and the code that uses it builds the dataclass with ``settings_from_config``, so
the two cannot drift, and a key the class does not take is an error naming the section and the
key, never dropped. Standard library only: config files import this (through ``config_tree``)
without loading jax or any backend.
"""
from __future__ import annotations

import dataclasses
from typing import Any, Mapping, TypeVar

T = TypeVar("T")


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


def defaults(cls: type) -> dict[str, Any]:
  """Field -> default of a settings dataclass (every field must have one): a config section."""
  instance = cls()
  return {name: getattr(instance, name) for name in field_names(cls)}


def settings_from_config(cls: type[T], section: Any, where: str, **extra: Any) -> T:
  """``cls`` from config section ``where`` (a ConfigDict, a mapping or None), plus ``extra``.

  An unknown key raises ValueError naming ``where`` and the key, so a typo in a config file or on
  the command line cannot be silently ignored. ``extra`` sets fields that live outside the
  section (``rollout``'s ``max_turns`` comes from ``sampling.max_turns``); it wins over the
  section. The class's own ``__post_init__`` checks the values.
  """
  values = section_dict(section, where)
  names = field_names(cls)
  unknown = sorted(set(values) - set(names))
  if unknown:
    raise ValueError(f"{where}: unknown key(s) {unknown}; allowed: {sorted(names)}")
  bad_extra = sorted(set(extra) - set(names))
  if bad_extra:
    raise TypeError(f"{where}: {cls.__name__} has no field(s) {bad_extra}")
  return cls(**{**values, **extra})
