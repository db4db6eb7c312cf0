"""The suite compiles for compile speed (``arenarl_jax/testing/xla_flags.py``); the main job and
users' runs compile with XLA's defaults. A model's forward pass and gradient agree between the
two."""
import os
import subprocess
import sys

import numpy as np

from arenarl_jax.testing import xla_flags

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

# Prints the logits and the gradient's leaves of a random quickstart-shaped model as .npz.
PROGRAM = """
import sys, dataclasses
import jax, jax.numpy as jnp, numpy as np
from flax import nnx
from arenarl_jax.models import config as model_config, transformer
cfg = dataclasses.replace(model_config.get_preset("quickstart"), vocab_size=512)
model = transformer.make_model(cfg, seed=3)
tokens = jax.random.randint(jax.random.key(1), (2, 48), 0, 512)
graph, params = nnx.split(model)

@jax.jit
def run(params):
  def loss(params):
    logits, _ = nnx.merge(graph, params)(tokens)
    return jax.nn.logsumexp(logits, 0).mean(), logits  # logits are V-major: [V, N, T]
  (_, logits), grads = jax.value_and_grad(loss, has_aux=True)(params)
  return logits, grads

logits, grads = run(params)
np.savez(sys.argv[1], logits=np.asarray(logits),
         **{str(i): np.asarray(g) for i, g in enumerate(jax.tree.leaves(grads))})
"""


def _run(path, flags):
  env = dict(os.environ, PYTHONPATH=ROOT, XLA_FLAGS=flags)
  proc = subprocess.run([sys.executable, "-c", PROGRAM, str(path)], env=env, cwd=ROOT,
                        capture_output=True, text=True, timeout=300, check=False)
  assert proc.returncode == 0, proc.stderr[-3000:]
  return np.load(path)


def test_the_suite_compiles_fast_and_computes_what_the_defaults_compute(tmp_path):
  assert xla_flags.FAST_COMPILE in os.environ["XLA_FLAGS"]  # conftest set them for this process
  fast = _run(tmp_path / "fast.npz", xla_flags.with_devices(1))
  default = _run(tmp_path / "default.npz", "")
  assert sorted(fast) == sorted(default) and len(fast) > 10
  assert np.abs(default["logits"]).max() > 0.1
  for key in default:
    np.testing.assert_allclose(fast[key], default[key], rtol=1e-4, atol=1e-6, err_msg=key)
