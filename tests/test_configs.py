"""Every config file loads with each documented arg; the tree is locked; CLI overrides work."""
import glob
import importlib.util
import os

import pytest

from arenarl_jax import config_tree, run_config
from arenarl_jax.envs import settings as env_settings
from arenarl_jax.judges import settings as judge_settings

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
CONFIG_FILES = sorted(glob.glob(os.path.join(ROOT, "configs", "*.py")))


def _load(path):
  spec = importlib.util.spec_from_file_location(os.path.basename(path)[:-3], path)
  module = importlib.util.module_from_spec(spec)
  spec.loader.exec_module(module)
  return module


def _arg_variants(args: dict):
  """The default, then one non-default value per documented option."""
  yield None
  for key, default in args.items():
    if isinstance(default, bool):
      yield key
    elif key == "method":
      yield from (f"method={m}" for m in config_tree.PRESETS)
    elif key == "topology":
      yield from (f"topology={t}" for t in ("anchor", "round_robin", "swiss",
                                            "double_elimination", "single_elimination"))
    elif isinstance(default, int):
      yield f"{key}={default + 1}"
    else:
      yield f"{key}={default}"


def test_expected_config_files_exist():
  names = {os.path.basename(p) for p in CONFIG_FILES}
  assert {"quickstart.py", "smollm2_travel.py", "research_quickstart.py",
          "qwen3_8b_pod.py"} <= names


def test_new_keys_have_defaults_and_typos_name_the_key():
  base = config_tree.make_base_config()
  assert base.model.keep_layers == 0  # all layers unless a config cuts the model
  module = _load(os.path.join(ROOT, "configs", "smollm2_travel.py"))
  c = module.get_config("smoke")
  with pytest.raises(AttributeError, match="keep_layer"):
    c.model.keep_layer = 2
  with pytest.raises(ValueError, match="judge_urll"):
    _load(os.path.join(ROOT, "configs", "qwen3_8b_pod.py")).get_config("judge_urll=x")


@pytest.mark.parametrize("path", CONFIG_FILES, ids=os.path.basename)
def test_every_config_loads_with_every_documented_arg(path):
  module = _load(path)
  doc = module.__doc__ or ""
  assert "python -m arenarl_jax.main --config=configs/" in doc.splitlines()[2] + doc, path
  for arg in _arg_variants(module.ARGS):
    c = module.get_config(arg)
    assert c.is_locked, (path, arg)
    assert c.tournament.topology in ("anchor", "round_robin", "swiss", "double_elimination",
                                     "single_elimination")
    assert c.advantage.source in ("arena", "pointwise")
    assert c.loss.ratio in ("token", "sequence") and c.loss.kl in ("k1", "k2", "k3")
    with pytest.raises(AttributeError):
      c.sampling.group_sise = 3  # a typo must fail on the locked tree


def test_presets_set_orthogonal_keys_together():
  module = _load(os.path.join(ROOT, "configs", "quickstart.py"))
  gspo = module.get_config("method=gspo")
  assert (gspo.advantage.source, gspo.loss.ratio, gspo.loss.clip_low) == ("pointwise", "sequence",
                                                                         3e-4)
  arena = module.get_config("topology=anchor")
  assert (arena.advantage.source, arena.loss.ratio, arena.tournament.topology) == (
      "arena", "token", "anchor")


def test_bad_args_name_the_option():
  module = _load(os.path.join(ROOT, "configs", "quickstart.py"))
  with pytest.raises(ValueError, match="topolgy"):
    module.get_config("topolgy=anchor")
  with pytest.raises(ValueError, match="group_size"):
    module.get_config("group_size=many")
  with pytest.raises(ValueError, match="unknown method preset"):
    module.get_config("method=ppo")


def test_cli_overrides_and_typos():
  path = os.path.join(ROOT, "configs", "quickstart.py")
  # What main makes of --config=<path>:<arg> --config.<key>=<value> ...
  c = run_config.load(f"{path}:topology=round_robin",
                      ["--config.sampling.group_size=8", "--config.loss.kl_coef=0.04"])
  assert c.tournament.topology == "round_robin" and c.is_locked
  assert c.sampling.group_size == 8 and c.loss.kl_coef == 0.04
  with pytest.raises(ValueError, match="group_sise"):
    run_config.load(path, ["--config.sampling.group_sise=8"])


@pytest.mark.parametrize("name,rubric", [("quickstart", "travel"), ("smollm2_travel", "travel"),
                                         ("research_quickstart", "deep_research")])
def test_cpu_configs_train_against_the_stated_noise_model(name, rubric):
  c = _load(os.path.join(ROOT, "configs", f"{name}.py")).get_config()
  # judge.rubric "" is the environment's rubric: the judge cannot score another world's rubric.
  assert (c.judge.backend, c.judge.rubric) == ("rubric", "")
  assert judge_settings.resolve_rubric(c.judge.rubric, env_settings.rubric_of(c.env.name)) == rubric
  noise = {k: c.judge.noise[k] for k in ("pointwise_std", "pairwise_std", "position_bias",
                                         "saturation", "saturation_knee")}
  # The values the quickstart's docstring and the README state.
  assert noise == {"pointwise_std": 1.0, "pairwise_std": 1.0, "position_bias": 0.5,
                   "saturation": 0.8, "saturation_knee": 8.0}


def test_the_long_quickstart_changes_only_how_long_it_trains():
  module = _load(os.path.join(ROOT, "configs", "quickstart.py"))
  base, long = module.get_config(), module.get_config("long")
  flat_base, flat_long = _flatten(base.to_dict()), _flatten(long.to_dict())
  changed = {k for k in flat_base if flat_base[k] != flat_long[k]}
  assert changed == {"sft.steps", "sft.first_turn_steps", "rl.steps", "checkpoint.every"}
  assert (long.sft.steps, long.sft.first_turn_steps, long.rl.steps) == (
      2 * base.sft.steps, 2 * base.sft.first_turn_steps, 240)


def test_the_copy_start_differs_from_the_default_start_in_the_stated_keys():
  module = _load(os.path.join(ROOT, "configs", "quickstart.py"))
  base, copy = module.get_config(), module.get_config("start=copy")
  flat_base, flat_copy = _flatten(base.to_dict()), _flatten(copy.to_dict())
  changed = {k: flat_copy[k] for k in flat_base if flat_base[k] != flat_copy[k]}
  assert changed == {"model.init.name_space": "apart", "model.init.copy_heads": 2,
                     "model.init.rope_theta": 1e6, "sampling.max_new_tokens": 296}
  assert base.model.init.rope_theta == 0.0  # the preset's base: the default start is unchanged


def _flatten(tree, prefix=""):
  out = {}
  for k, v in tree.items():
    if isinstance(v, dict):
      out.update(_flatten(v, f"{prefix}{k}."))
    else:
      out[prefix + k] = v
  return out


def test_smollm2_pinned_runs_rl_from_the_start_with_the_prompt_it_was_built_with():
  from arenarl_jax.sft import start as start_lib  # pylint: disable=import-outside-toplevel
  from arenarl_jax.sft.settings import StartSettings  # pylint: disable=import-outside-toplevel
  module = _load(os.path.join(ROOT, "configs", "smollm2_travel.py"))
  c = module.get_config("pinned")
  start = StartSettings.from_config(c.start)
  assert start.loads and not start.in_job(c.sft.steps)  # no SFT in the job
  eight = module.get_config("pinned,group_size=8")
  assert eight.sampling.group_size == 8
  for config in (c, eight):  # one row per micro-batch, whatever the group size
    rows = config.rl.prompts_per_step * config.sampling.group_size
    assert rows // config.rl.minibatches_per_rollout == config.rl.accumulation_steps
  # Of what the build reads, only the RL's sampling differs from the start's record: the prompt
  # (env.schemas), the limits and the evaluation's tasks are the build's.
  stale = start_lib.check(start, config_tree.flat(c.to_dict()))
  assert stale and all(s.startswith("sampling.top_p") for s in stale), stale
  assert (c.sampling.temperature, c.sampling.top_p, c.checkpoint.every) == (0.6, 0.9, 1)
