"""Config section <-> settings dataclass: one function, unknown keys named, sections generated
from the registries, and the judge's rubric tied to the environment's."""
import dataclasses

import pytest

from arenarl_jax import config_tree
from arenarl_jax.envs import settings as env_settings
from arenarl_jax.eval import settings as eval_settings
from arenarl_jax.judges import settings as judge_settings
from arenarl_jax.settings import defaults, outside, section_dict, settings_from_config


@dataclasses.dataclass(frozen=True)
class _Example:
  size: int = 3
  name: str = "a"


def test_settings_from_config_builds_from_configdict_mapping_or_none():
  c = config_tree.make_base_config()
  assert settings_from_config(eval_settings.EvalSettings, c.eval, "eval") == (
      eval_settings.EvalSettings())
  assert settings_from_config(_Example, {"size": 5}, "x") == _Example(size=5)
  assert settings_from_config(_Example, None, "x") == _Example()
  assert settings_from_config(_Example, {"size": 5}, "x", size=7).size == 7  # extra wins


def test_settings_from_config_raises_on_an_unknown_key_naming_section_and_key():
  with pytest.raises(ValueError, match=r"judge\.http: unknown key\(s\) \['max_concurency'\]"):
    settings_from_config(judge_settings.HttpJudgeSettings, {"max_concurency": 2}, "judge.http")
  c = config_tree.make_base_config()
  c.env.travel.train_per_subtaks = 3  # the tree is unlocked: the typo reaches the settings
  with pytest.raises(ValueError, match=r"env\.travel: unknown key.*train_per_subtaks"):
    settings_from_config(env_settings.TravelSettings, c.env.travel, "env.travel")
  with pytest.raises(TypeError, match="list"):
    section_dict([1], "loss")


def test_loss_section_keys_are_never_dropped():
  from arenarl_jax.rl.settings import LossSettings  # pylint: disable=import-outside-toplevel
  c = config_tree.make_base_config()
  assert LossSettings.from_config(c.loss) == LossSettings()
  with pytest.raises(ValueError, match=r"loss: unknown key\(s\) \['kl_coeff'\]"):
    LossSettings.from_config({"kl_coeff": 0.1})


def test_sections_are_generated_from_the_registries():
  c = config_tree.make_base_config()
  for name, cls in judge_settings.SECTIONS.items():
    assert c.judge[name].to_dict() == defaults(cls), name
  for name, spec in env_settings.ENVIRONMENTS.items():
    assert c.env[name].to_dict() == defaults(spec.settings), name
  assert c.env.mcp.to_dict() == defaults(env_settings.McpClientSettings)
  assert {k: c.env[k] for k in env_settings.COMMON_KEYS} == defaults(env_settings.CommonSettings)
  assert set(env_settings.ENVIRONMENTS) == {"travel", "research"}


def test_a_registered_judge_backend_gets_its_section(monkeypatch):
  from arenarl_jax.judges import registry  # pylint: disable=import-outside-toplevel
  monkeypatch.setattr(judge_settings, "SECTIONS", dict(judge_settings.SECTIONS))
  monkeypatch.setattr(registry, "BACKENDS", dict(registry.BACKENDS))
  registry.register_backend("example", lambda cfg: cfg, settings=_Example)
  assert config_tree.make_base_config().judge.example.to_dict() == {"size": 3, "name": "a"}


def test_environment_classes_read_their_rubric_from_the_registry():
  # pylint: disable=import-outside-toplevel
  from arenarl_jax.envs.research.environment import ResearchEnvironment
  from arenarl_jax.envs.travel.environment import TravelEnvironment
  for env_cls in (TravelEnvironment, ResearchEnvironment):
    assert env_cls.rubric == env_settings.rubric_of(env_cls.name)


def test_judge_rubric_follows_the_environment_or_must_agree():
  assert judge_settings.resolve_rubric("", "deep_research") == "deep_research"
  assert judge_settings.resolve_rubric("travel", "travel") == "travel"
  assert judge_settings.resolve_rubric("/x/my_rubric.json", "travel") == "/x/my_rubric.json"
  assert judge_settings.resolve_rubric("travel", None) == "travel"
  with pytest.raises(ValueError, match="judge.rubric='travel' is not the environment's"):
    judge_settings.resolve_rubric("travel", "deep_research")


def test_make_judge_takes_the_environment_rubric():
  from arenarl_jax import judges  # pylint: disable=import-outside-toplevel

  def checker(trajectory):
    del trajectory
    return {"path": {}, "answer": {}}

  c = config_tree.make_base_config()
  judge = judges.make_judge(c.judge, env_rubric="deep_research", checker=checker)
  assert judge.rubric.name == "deep_research"
  with pytest.raises(ValueError, match="no environment was given"):
    judges.make_judge(c.judge, checker=checker)
  c.judge.rubric = "travel"
  with pytest.raises(ValueError, match="not the environment's rubric 'deep_research'"):
    judges.make_judge(c.judge, env_rubric="deep_research", checker=checker)


def test_settings_classes_are_named_settings():
  """One suffix for a config section's settings class: ``*Settings``. Only the model's
  architecture (``ModelConfig``) and tfds' builder config keep ``Config``."""
  import ast
  import pathlib
  root = pathlib.Path(__file__).resolve().parents[1] / "arenarl_jax"
  named = sorted(f"{p.relative_to(root)}:{node.name}" for p in root.rglob("*.py")
                 for node in ast.walk(ast.parse(p.read_text()))
                 if isinstance(node, ast.ClassDef) and node.name.endswith("Config"))
  assert named == ["data/builder.py:SourceConfig", "models/config.py:ModelConfig"]


def test_every_section_the_library_reads_is_generated_from_its_class():
  # pylint: disable=import-outside-toplevel
  from arenarl_jax import settings
  from arenarl_jax.data.settings import DataSettings
  from arenarl_jax.models.settings import ModelSettings
  from arenarl_jax.rl import settings as rl
  from arenarl_jax.rollout import settings as rollout
  from arenarl_jax.sft import settings as sft
  c = config_tree.make_base_config()
  classes = {"model": ModelSettings, "data": DataSettings,
             "sampling": rollout.PolicySamplingSettings, "rollout": rollout.RolloutSettings,
             "tournament": rl.TournamentSettings, "sft": sft.SftSettings,
             "start": sft.StartSettings, "eval": eval_settings.EvalSettings,
             "advantage": rl.AdvantageSettings, "loss": rl.LossSettings, "rl": rl.RlSettings,
             "optim": rl.OptimSettings, "checkpoint": settings.CheckpointSettings,
             "metrics": settings.MetricsSettings}
  for name, cls in classes.items():
    assert c[name].to_dict() == defaults(cls), name
    assert cls.from_config(c[name]) == cls(), name  # and back, sub-sections included


@dataclasses.dataclass(frozen=True)
class _Outer:
  size: int = 1
  inner: _Example = _Example()  # a sub-section
  seed: int = outside(0, "seed")  # not a key of this section


def test_sub_sections_nest_and_outside_fields_come_only_as_extra():
  assert defaults(_Outer) == {"size": 1, "inner": {"size": 3, "name": "a"}}
  built = settings_from_config(_Outer, {"inner": {"size": 4}}, "outer", seed=7)
  assert built == _Outer(inner=_Example(size=4), seed=7)
  with pytest.raises(ValueError, match=r"outer\.inner: unknown key\(s\) \['sise'\]"):
    settings_from_config(_Outer, {"inner": {"sise": 4}}, "outer")
  with pytest.raises(ValueError, match=r"outer: unknown key\(s\) \['seed'\]"):
    settings_from_config(_Outer, {"seed": 7}, "outer")
  with pytest.raises(TypeError, match="no field"):
    settings_from_config(_Outer, {}, "outer", sead=7)
