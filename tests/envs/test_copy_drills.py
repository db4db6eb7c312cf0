"""The travel copy drills (envs/travel/copy_drills.py): every answer is in the user's turn."""
import json
import re

import numpy as np
import pytest

from arenarl_jax.envs import base
from arenarl_jax.envs.travel import copy_drills


@pytest.fixture(scope="module")
def env():
  return base.make_environment("travel")


def _answer_parts(message):
  if message.get("tool_calls"):
    return [v for c in message["tool_calls"]
            for v in json.loads(c["function"]["arguments"]).values()]
  return [message["content"]]


@pytest.mark.parametrize("kind", copy_drills.KINDS)
def test_every_answer_token_is_in_the_user_turn(env, kind):
  for seed in range(20):
    user, assistant = copy_drills.DRILLS[kind](env.world, np.random.default_rng(seed))
    assert (user["role"], assistant["role"]) == ("user", "assistant")
    for part in _answer_parts(assistant):
      for figure in re.findall(r"\d[\d.:,-]*\d|\d", part):  # every figure ...
        assert figure in user["content"], (kind, figure)
    names = [n for n in env.names() if n in " ".join(_answer_parts(assistant))]
    assert all(n in user["content"] for n in names)  # ... and every name


def test_drills_are_seeded_and_invent_their_figures(env):
  a = env.copy_drill(np.random.default_rng(3))
  assert env.copy_drill(np.random.default_rng(3)) == a
  # Invented figures: over many places, the drill's rating is rarely the world's.
  same = 0
  for seed in range(200):
    p = copy_drills.invented_poi(env.world, np.random.default_rng(seed))
    real = next(q for q in env.world.pois[p.city] if q.name == p.name)
    same += (p.rating, p.price, p.address) == (real.rating, real.price, real.address)
  assert same <= 2
  # drill() draws every kind.
  def kind(messages):
    user, assistant = messages
    if assistant.get("tool_calls"):
      return "call"
    return "repeat" if user["content"].startswith("Repeat") else "lookup"
  kinds = [kind(env.copy_drill(np.random.default_rng(s))) for s in range(60)]
  assert set(kinds) == set(copy_drills.KINDS) and max(map(kinds.count, kinds)) < 35
