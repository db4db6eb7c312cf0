"""Test-wide setup: 8 fake CPU devices (sharding tests), deterministic single-threaded torch."""
import os

# Must happen before jax is imported anywhere: unsharded code still runs on device 0. The suite
# compiles for compile speed (tests/xla_flags.py says how and why).
import sys  # noqa: E402
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import xla_flags  # noqa: E402  pylint: disable=wrong-import-position
os.environ.setdefault("XLA_FLAGS", xla_flags.with_devices(8))
# torch with 2 threads collapses when another process is busy (PLATFORM.md).
os.environ.setdefault("OMP_NUM_THREADS", "1")
os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

import shutil  # noqa: E402
import tempfile  # noqa: E402

import jax  # noqa: E402,F401  (imported before the cache variables below: this process keeps none)

# One persistent compilation cache per test run, for the subprocesses only (pipelines, config
# smoke runs, multi-process and fresh-interpreter tests): they compile the same small programs,
# and each finds what an earlier one compiled. This process has already read its jax config, so
# its compile counts stay exact. The run's first process (pytest itself, or the controller of
# pytest-xdist's workers, which inherit its environment) creates the directory and removes it
# at the end.
_CACHE_VAR = "ARENARL_TEST_COMPILE_CACHE"
_OWNS_CACHE = _CACHE_VAR not in os.environ
if _OWNS_CACHE:
  os.environ[_CACHE_VAR] = tempfile.mkdtemp(prefix="arenarl_test_jax_cache_")
os.environ["JAX_COMPILATION_CACHE_DIR"] = os.environ[_CACHE_VAR]
os.environ["JAX_PERSISTENT_CACHE_MIN_COMPILE_TIME_SECS"] = "0"
os.environ["JAX_PERSISTENT_CACHE_MIN_ENTRY_SIZE_BYTES"] = "0"


def pytest_sessionfinish(session, exitstatus):
  del session, exitstatus
  if _OWNS_CACHE:
    shutil.rmtree(os.environ.pop(_CACHE_VAR), ignore_errors=True)


# ------------------------------------------------------ the longest files first
# The README's command runs the suite on two pytest-xdist workers, one test file per unit of work
# (``--dist loadscope``: a file's module fixtures are built once). The files that take longest
# (whole pipelines in subprocesses, SmolLM2 judges, eight-device updates) are handed out first,
# so the run does not end with one worker finishing a long file while the other idles.
LONGEST_FIRST = ("test_config_runs.py", "test_pipeline_multiprocess.py", "test_pipeline.py",
                 "test_train_step.py", "judges/test_flax_judge.py", "judges/test_http_server.py",
                 "models/test_attention_choice.py", "models/test_cache_attention.py",
                 "test_train.py", "test_sampler.py")


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

  transformers parses the file three times (config, weights, tokenizer) and rebuilds gguf's name
  map per submodule; memoising those two pure gguf calls while loading changes no result.
  """
  import gguf  # pylint: disable=g-import-not-at-top
  import torch  # pylint: disable=g-import-not-at-top
  from transformers import AutoModelForCausalLM, AutoTokenizer  # pylint: disable=g-import-not-at-top
  from arenarl_jax.models.embedded import find_smollm2_gguf  # pylint: disable=g-import-not-at-top
  torch.set_num_threads(1)
  path = find_smollm2_gguf()
  folder, name = os.path.dirname(path), os.path.basename(path)
  with pytest.MonkeyPatch.context() as mp:
    mp.setattr(gguf, "GGUFReader", functools.lru_cache(gguf.GGUFReader))
    mp.setattr(gguf, "get_tensor_name_map", functools.lru_cache(gguf.get_tensor_name_map))
    model = AutoModelForCausalLM.from_pretrained(folder, gguf_file=name, dtype=torch.float32)
    tokenizer = AutoTokenizer.from_pretrained(folder, gguf_file=name)
  return model.eval(), tokenizer


@pytest.fixture(scope="session")
def smollm2(tmp_path_factory):
  """Our (config, model) of the embedded SmolLM2-135M, float32; its parameter cache in the run's
  temporary directory. Shared by every test file that only reads it: never mutate it."""
  from arenarl_jax.models.loading import load_model  # pylint: disable=g-import-not-at-top
  return load_model("smollm2", cache_dir=str(tmp_path_factory.mktemp("smollm2_params")))


@pytest.fixture(scope="session")
def dataset_dir(tmp_path_factory):
  """One ``data.dir`` for every pipeline the tests run: each environment's dataset (a pure
  function of its config) is built once per worker process instead of once per test."""
  return str(tmp_path_factory.mktemp("datasets"))
