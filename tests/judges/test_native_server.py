"""llama.cpp's own ``llama-server`` (parallel slots) as the HTTP judge's server: started on
127.0.0.1 with the key from the environment, it honours the verdict's GBNF grammar (no fallback;
the reply is the compact skeleton exactly), every reply parses, and a wrong key is refused. The binary is not part of setup
(``scripts/build_llama_server.sh`` builds it): without one this module is skipped."""
import os
import secrets

import pytest

from arenarl_jax.judges import http
from arenarl_jax.judges import local_server
from arenarl_jax.models.embedded import find_smollm2_gguf
import judge_fakes

BINARY = local_server.find_native_server()
pytestmark = pytest.mark.skipif(
    BINARY is None, reason="no llama-server binary (set LLAMA_SERVER_BIN or run "
                           "scripts/build_llama_server.sh; it is not built by setup)")
KEY_ENV = "ARENARL_TEST_NATIVE_JUDGE_KEY"


@pytest.fixture(scope="module")
def native():
  key = secrets.token_hex(16)
  server = local_server.NativeLlamaServer(BINARY, find_smollm2_gguf(), parallel=2, api_key=key,
                                          n_ctx=2048, n_threads=1, n_threads_batch=1)
  assert key not in " ".join(server.command())
  server.start()
  os.environ[KEY_ENV] = key
  try:
    yield server
  finally:
    os.environ.pop(KEY_ENV, None)
    server.stop()


def test_native_server_serves_grammar_constrained_verdicts(native):
  assert native.host == "127.0.0.1"
  config = http.HttpJudgeSettings(base_url=native.base_url, model="smollm2", api_key_env=KEY_ENV,
                                response_format="gbnf", max_tokens=160,
                                max_concurrency=4, timeout_s=300.0, parse_retries=0)
  judge = http.HttpJudge(config, "travel", compact=True)
  results = judge.judge(judge_fakes.matches([(3, 7)]))
  snap = judge.metrics.snapshot()
  assert all(r.ok for r in results), [r.error for r in results]
  assert snap["format_fallbacks"] == 0 and snap["parse_failures"] == 0
  assert snap["requests"] == 2


def test_native_server_refuses_a_wrong_key(native, monkeypatch):
  monkeypatch.setenv("ARENARL_WRONG_KEY", "not-the-key")
  config = http.HttpJudgeSettings(base_url=native.base_url, model="smollm2",
                                api_key_env="ARENARL_WRONG_KEY", max_tokens=16, max_retries=0)
  with pytest.raises(http.JudgeAuthError):
    http.HttpJudge(config, "travel", compact=True).judge(judge_fakes.matches([(1, 2)]))
