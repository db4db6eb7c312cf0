"""The local judge with a mesh: parameters on the partition rules' shardings, verdicts equal to
the single-device judge's."""
from __future__ import annotations

import dataclasses

import numpy as np
import pytest

from arenarl_jax import sharding
from arenarl_jax.judges import flax_judge
from arenarl_jax.models.config import PRESETS
from arenarl_jax.models.embedded import find_smollm2_gguf
from arenarl_jax.models.transformer import make_model
from arenarl_jax.text.tokenizer import Tokenizer
from judge_fakes import matches

SMALL = flax_judge.FlaxJudgeConfig(max_rows=2, max_user_tokens=512)


@pytest.fixture(scope="module")
def tok():
  return Tokenizer.from_gguf(find_smollm2_gguf())


def test_judge_with_mesh_equals_one_device(tok):
  mesh = sharding.make_mesh(data=2, fsdp=2, tensor=2)
  model = make_model(dataclasses.replace(PRESETS["tiny"], n_layers=1), seed=0)
  one = flax_judge.FlaxJudge(model, tok, SMALL)
  meshed = flax_judge.FlaxJudge(model, tok, SMALL, mesh=mesh)
  q = meshed.params["layers"][0]["attn"]["q"]["kernel"].get_value()
  assert q.sharding.spec == sharding.spec_for("layers/0/attn/q/kernel", q.shape, mesh)
  assert q.sharding.mesh == mesh
  batch = matches([(3, 7)])
  want, got = one.judge(batch), meshed.judge(batch)
  assert [r.ok for r in got] == [r.ok for r in want] == [True]
  np.testing.assert_allclose([got[0].score_p, got[0].score_q],
                             [want[0].score_p, want[0].score_q], atol=1e-3)
  assert want[0].score_p != want[0].score_q  # the comparison is not between two ties
