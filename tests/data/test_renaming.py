"""The SFT rows' renaming (data/renaming.py): consistent, within groups, seeded, invertible."""
import numpy as np
import pytest

from arenarl_jax.data import records, renaming
from arenarl_jax.envs import base


@pytest.fixture(scope="module")
def env():
  return base.make_environment("travel")


def _example(env, subtask):
  task = next(t for t in env.tasks("train") if t.subtask == subtask)
  messages = env.expert(task, 0.0, np.random.default_rng(0))
  return records.Example(task_id=task.id, env="travel", subtask=subtask, query=task.query,
                         messages=tuple(messages))


def _strings(example):
  out = [example.query]
  for m in example.messages:
    out += [m.get("content", ""), m.get("reasoning_content", "")]
    out += [c["function"]["arguments"] for c in m.get("tool_calls", ())]
  return out


def test_hand_worked_renaming():
  r = renaming.Renamer({"city": ["Ax", "Bo", "Cy"], "place:park": ["Elm Park", "Oak Park"]}, 1.0)
  # "Elm Park" never matches inside a longer word, and "Ax" not inside "Axel".
  assert r.rename("Elm Park in Ax, not Axel", {"Ax": "Bo", "Elm Park": "Oak Park"}) == (
      "Oak Park in Bo, not Axel")
  mapping = r.mapping(["Ax to Elm Park", "then Bo"], np.random.default_rng(0))
  assert set(mapping) == {"Ax", "Bo", "Elm Park"}
  assert len(set(mapping[n] for n in ("Ax", "Bo"))) == 2  # one-to-one within a group
  assert mapping["Elm Park"] in ("Elm Park", "Oak Park")
  with pytest.raises(ValueError, match="rename_share"):
    renaming.Renamer({}, 1.5)


@pytest.mark.parametrize("subtask", ["search", "one_day", "multi_day"])
def test_renaming_is_consistent_within_groups_and_invertible(env, subtask):
  groups = env.name_groups()
  r = renaming.Renamer(groups, 1.0)
  ex = _example(env, subtask)
  mapping = r.draw(ex, np.random.default_rng(7))
  out = r.apply(ex, mapping)
  assert mapping and out.messages != ex.messages and r(ex, np.random.default_rng(7)) == out
  assert set(mapping) == set(r.mapping(_strings(ex), np.random.default_rng(0)))
  for old, new in mapping.items():  # a city stays a city, a park a park
    assert r.group_of[old] == r.group_of[new]
  assert len(set(mapping.values())) == len(mapping)
  # The query's place is the one called and the one the answer states, renamed alike.
  place = env.query_places(env.task(ex.task_id))[0] if env.query_places(
      env.task(ex.task_id)) else None
  if place is not None:
    assert mapping[place] in out.query
    first_call_args = out.messages[1]["tool_calls"][0]["function"]["arguments"]
    assert mapping[place] in first_call_args or place not in ex.messages[1]["tool_calls"][0][
        "function"]["arguments"]
  # Renaming back with the inverse mapping gives the original text, word for word.
  inverse = {v: k for k, v in mapping.items()}
  back = [r.rename(s, inverse) for s in _strings(out)]
  assert back == _strings(ex)


def test_share_of_rows_renamed(env):
  ex = _example(env, "search")
  r = renaming.Renamer(env.name_groups(), 0.25)
  renamed = [r(ex, np.random.default_rng(k)) != ex for k in range(400)]
  assert 0.18 < np.mean(renamed) < 0.32
  assert renaming.Renamer(env.name_groups(), 0.0)(ex, np.random.default_rng(0)) is ex


def test_rows_renamed_per_position_and_seeded(env):
  """As the SFT pipeline maps it (grain ``random_map``), a row's renaming depends on its
  position: two epochs of one record differ, and the same seed gives the same rows."""
  import grain
  ex = _example(env, "search")
  r = renaming.Renamer(env.name_groups(), 1.0)
  ds = grain.MapDataset.source([ex]).repeat(2).random_map(r, seed=3)
  assert ds[0] != ds[1] and ds[0] != ex
  again = grain.MapDataset.source([ex]).repeat(2).random_map(r, seed=3)
  assert again[0] == ds[0] and again[1] == ds[1]
