"""The local judge with a mesh: parameters on the partition rules' shardings, verdicts equal to
the single-device judge's."""
from __future__ import annotations

import dataclasses

import numpy as np
import pytest

from arenarl_jax import sharding
from arenarl_jax.judges.flax import FlaxJudge, FlaxJudgeSettings
from arenarl_jax.models.config import PRESETS
from arenarl_jax.models.embedded import find_smollm2_gguf
from arenarl_jax.models.transformer import make_model
from arenarl_jax.text.tokenizer import Tokenizer
from judge_fakes import matches

SMALL = FlaxJudgeSettings(max_rows=2, max_user_tokens=512)


@pytest.fixture(scope="module")
def tok():
  return Tokenizer.from_gguf(find_smollm2_gguf())


def test_judge_with_mesh_equals_one_device(tok):
  mesh = sharding.make_mesh(data=2, fsdp=2, tensor=2)
  model = make_model(dataclasses.replace(PRESETS["tiny"], n_layers=1), seed=0)
  one = FlaxJudge(model, tok, SMALL)
  meshed = FlaxJudge(model, tok, SMALL, mesh=mesh)
  q = meshed.params["layers"][0]["attn"]["q"]["kernel"].get_value()
  assert q.sharding.spec == sharding.spec_for("layers/0/attn/q/kernel", q.shape, mesh)
  assert q.sharding.mesh == mesh
  batch = matches([(3, 7)])
  want, got = one.judge(batch), meshed.judge(batch)
  assert [r.ok for r in got] == [r.ok for r in want] == [True]
  np.testing.assert_allclose([got[0].score_p, got[0].score_q],
                             [want[0].score_p, want[0].score_q], atol=1e-3)
  assert want[0].score_p != want[0].score_q  # the comparison is not between two ties


def test_the_pipeline_builds_the_flax_judge_on_this_hosts_sampling_mesh(tok, tmp_path):
  """``judge.backend=flax`` in a run on a data x fsdp x tensor mesh: the judge is loaded straight
  into the host's sampling mesh (rows over data, tensor kept, no fsdp) and judges as unsharded."""
  import types  # pylint: disable=import-outside-toplevel
  from arenarl_jax import config_tree, pipeline  # pylint: disable=import-outside-toplevel
  from arenarl_jax.judges import make_judge  # pylint: disable=import-outside-toplevel
  from arenarl_jax.models.safetensors_io import export_hf_dir  # pylint: disable=import-outside-toplevel
  cfg = dataclasses.replace(PRESETS["tiny"], n_layers=1, vocab_size=tok.vocab_size)
  ckpt = str(tmp_path / "judge")
  export_hf_dir(make_model(cfg, seed=0), cfg, ckpt)
  tok.save(ckpt)
  config = config_tree.make_base_config()
  with config.unlocked():
    config.mesh.update(data=2, fsdp=2, tensor=2)
    config.judge.backend = "flax"
    config.judge.rubric = "travel"
    config.judge.flax.update(model=ckpt, max_rows=2, max_user_tokens=512)
  judge = pipeline.make_training_judge(config, types.SimpleNamespace(rubric="travel"))
  assert dict(judge.mesh.shape) == {"data": 4, "fsdp": 1, "tensor": 2}
  q = judge.params["layers"][0]["attn"]["q"]["kernel"].get_value()
  assert q.sharding.mesh == judge.mesh and tuple(q.sharding.spec) == (None, "tensor")
  one = make_judge(config.judge, env_rubric="travel")
  assert one.mesh is None
  batch = matches([(3, 7), (6, 2)])
  want, got = one.judge(batch), judge.judge(batch)
  assert [r.ok for r in got] == [r.ok for r in want] == [True, True]
  for w, g in zip(want, got):
    assert np.sign(g.score_p - g.score_q) == np.sign(w.score_p - w.score_q)  # the same verdict
    np.testing.assert_allclose([g.score_p, g.score_q], [w.score_p, w.score_q], atol=1e-3)
