"""Test-wide setup: 8 fake CPU devices (sharding tests), deterministic single-threaded torch."""
import os

# Must happen before jax is imported anywhere: unsharded code still runs on device 0. The suite
# compiles for compile speed (arenarl_jax/testing/xla_flags.py says how and why; importing it
# imports no jax).
import sys  # noqa: E402

from arenarl_jax.testing import xla_flags  # noqa: E402  pylint: disable=wrong-import-position
os.environ.setdefault("XLA_FLAGS", xla_flags.with_devices(8))
# The benchmark scripts (benchmarks/<name>.py) that tests run in process import as ``import
# <name>``, and import their siblings (benchmarks/timing.py, ...) as running ``python
# benchmarks/<name>.py`` lets them. Appended, so no benchmark's name hides an installed module.
sys.path.append(os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))),
                             "benchmarks"))
# torch with 2 threads collapses when another process is busy (PLATFORM.md).
os.environ.setdefault("OMP_NUM_THREADS", "1")
os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

import fcntl  # noqa: E402
import shutil  # noqa: E402
import tempfile  # noqa: E402

import jax  # noqa: E402,F401

# One folder per test run, shared by every process of the run: the first process (pytest itself,
# or the controller of pytest-xdist's workers, which inherit its environment) creates it and
# removes it at the end. It holds
#  - one persistent compilation cache, for every process that starts after this point: the
#    pytest-xdist workers and the subprocesses (pipelines, config smoke runs, multi-process and
#    fresh-interpreter tests) inherit the variables below before they import jax (only this first
#    process, which imported it above, keeps none). They compile the same small programs, and
#    each finds what an earlier one compiled. A test that counts compilations
#    (``rollout.agent_loop.CompileCounter``) counts loads from the cache too, so its count does
#    not depend on which tests ran before it;
#  - what a session fixture builds once for the whole run (``shared_folder``, ``shared_path``):
#    SmolLM2 as transformers reads it and as we convert it, whichever worker asks first.
_SHARED_VAR = "ARENARL_TEST_SHARED"
_OWNS_SHARED = _SHARED_VAR not in os.environ
if _OWNS_SHARED:
  os.environ[_SHARED_VAR] = tempfile.mkdtemp(prefix="arenarl_test_run_")
os.environ["JAX_COMPILATION_CACHE_DIR"] = os.path.join(os.environ[_SHARED_VAR], "jax_cache")
os.environ["JAX_PERSISTENT_CACHE_MIN_COMPILE_TIME_SECS"] = "0"
os.environ["JAX_PERSISTENT_CACHE_MIN_ENTRY_SIZE_BYTES"] = "0"


def pytest_sessionfinish(session, exitstatus):
  del session, exitstatus
  if _OWNS_SHARED:
    shutil.rmtree(os.environ.pop(_SHARED_VAR), ignore_errors=True)


def shared_path(name: str) -> str:
  """``name`` in the run's shared folder."""
  return os.path.join(os.environ[_SHARED_VAR], name)


def shared_folder(name: str, build) -> str:
  """The run-wide folder ``name``, filled by ``build(folder)`` in the first process that asks
  (the others wait on its lock, then find it complete)."""
  folder = shared_path(name)
  done = os.path.join(folder, ".complete")
  with open(folder + ".lock", "w", encoding="utf-8") as lock:
    fcntl.flock(lock, fcntl.LOCK_EX)
    if not os.path.isfile(done):
      shutil.rmtree(folder, ignore_errors=True)
      os.makedirs(folder)
      build(folder)
      open(done, "w", encoding="utf-8").close()
  return folder


# ------------------------------------------------------ the longest files first
# The README's command runs the suite on two pytest-xdist workers, one test file per unit of work
# (``--dist loadscope``: a file's module fixtures are built once). The files that take longest
# (whole pipelines in subprocesses, SmolLM2 judges, eight-device updates) are handed out first,
# longest first, so the run does not end with one worker finishing a long file while the other
# idles. Their order is each file's summed test durations in a quiet run (tests/README.md, run
# 47); every other file follows in collection order.
LONGEST_FIRST = (
    "test_config_runs.py", "tools/test_start_reproduction.py", "test_pipeline_smoke.py",
    "experiments/test_training_studies.py", "rl/test_closed_loop.py", "test_colabs.py",
    "experiments/test_experiment_harness.py", "judges/flax/test_judge.py", "rl/test_train.py",
    "envs/test_mcp.py", "judges/test_http_server.py", "sampling/test_sampler_smollm2.py",
    "models/test_cache_attention.py", "models/test_precision.py", "test_trainer.py",
    "benchmarks/test_accelerator.py", "judges/flax/test_grammar.py", "models/test_kernel_build.py",
    "view/test_view.py", "models/test_attention_choice.py", "sampling/test_sampler.py",
    "text/test_tokenizer.py", "judges/flax/test_sharing.py", "models/test_causal_blocks.py")


def pytest_configure(config):
  # pytest-xdist (3.8) hands out loadscope's files by their number of tests, most first, unless
  # told otherwise: that would put many quick parametrised cases before the long files below.
  if hasattr(config.option, "loadscopereorder"):
    config.option.loadscopereorder = False


def pytest_collection_modifyitems(session, config, items):
  del session, config
  rank = {name: k for k, name in enumerate(LONGEST_FIRST)}

  def key(item):
    path = item.nodeid.split("::", 1)[0].removeprefix("tests/")
    return rank.get(path, len(rank))
  items.sort(key=key)  # stable: every other file keeps its place and its tests their order


# ------------------------------------------------------ SmolLM2, loaded once per test run
import functools  # noqa: E402

import pytest  # noqa: E402


@pytest.fixture(scope="session")
def hf_smollm2():
  """transformers' SmolLM2-135M model (float32, eval) and tokenizer, read from the embedded GGUF
  by transformers itself: the reference of the model, sampler and tokenizer tests. Read-only.

  The run's first reader parses the GGUF (transformers parses it three times, for config, weights
  and tokenizer, and rebuilds gguf's name map per submodule: memoising those two pure gguf calls
  while loading changes no result) and writes what it read to a ``shared_folder``: transformers'
  own state dict, config, generation config and tokenizer. Every worker builds the model from
  that folder (identical tensors) instead of parsing the GGUF again.
  """
  import gguf  # pylint: disable=g-import-not-at-top
  import torch  # pylint: disable=g-import-not-at-top
  from transformers import (AutoConfig, AutoModelForCausalLM, AutoTokenizer,  # pylint: disable=g-import-not-at-top
                            GenerationConfig)
  from arenarl_jax.models.embedded import find_smollm2_gguf  # pylint: disable=g-import-not-at-top
  torch.set_num_threads(1)

  def read_gguf(out):
    path = find_smollm2_gguf()
    folder, name = os.path.dirname(path), os.path.basename(path)
    with pytest.MonkeyPatch.context() as mp:
      mp.setattr(gguf, "GGUFReader", functools.lru_cache(gguf.GGUFReader))
      mp.setattr(gguf, "get_tensor_name_map", functools.lru_cache(gguf.get_tensor_name_map))
      model = AutoModelForCausalLM.from_pretrained(folder, gguf_file=name, dtype=torch.float32)
      tokenizer = AutoTokenizer.from_pretrained(folder, gguf_file=name)
    torch.save(model.state_dict(), os.path.join(out, "state_dict.pt"))
    model.config.to_json_file(os.path.join(out, "config.json"))
    model.generation_config.save_pretrained(out)
    tokenizer.save_pretrained(out)

  folder = shared_folder("hf_smollm2", read_gguf)
  config = AutoConfig.from_pretrained(folder)
  if hasattr(config, "quantization_config"):  # the GGUF's: its tensors are dequantized already
    del config.quantization_config
  model = AutoModelForCausalLM.from_config(config, dtype=torch.float32)
  model.load_state_dict(torch.load(os.path.join(folder, "state_dict.pt")))
  model.generation_config = GenerationConfig.from_pretrained(folder)
  return model.eval(), AutoTokenizer.from_pretrained(folder)


@pytest.fixture(scope="session")
def smollm2_cache_dir():
  """The run's converted-parameter cache of SmolLM2, shared by both workers (the cache writes
  atomically: whichever process converts first)."""
  return shared_path("smollm2_params")


@pytest.fixture(scope="session")
def smollm2(smollm2_cache_dir):
  """Our (config, model) of the embedded SmolLM2-135M, float32, from the run's cache. Shared by
  every test file that only reads it: never mutate it."""
  from arenarl_jax.models.loading import load_model  # pylint: disable=g-import-not-at-top
  return load_model("smollm2", cache_dir=smollm2_cache_dir)


@pytest.fixture(scope="session")
def dataset_dir(tmp_path_factory):
  """One ``data.dir`` for every pipeline the tests run: each environment's dataset (a pure
  function of its config) is built once per worker process instead of once per test."""
  return str(tmp_path_factory.mktemp("datasets"))
