"""Real judge server for the HTTP tests: llama.cpp (llama-cpp-python) serving SmolLM2, plus proxies.

Started once per session on first use (offline tests never start it) and killed (process group) at
teardown. Every test reaches it through a FaultProxy, which counts the requests that reached the
model; the session fails at teardown if they exceed the budget.
"""
import dataclasses
import os
import secrets

import pytest

from arenarl_jax.judges import local_server
from arenarl_jax.models.embedded import find_smollm2_gguf
import fault_proxy
from judge_fakes import KEY_ENV

MAX_REAL_REQUESTS = 16


@dataclasses.dataclass
class RealEndpoint:
  """The running server, its key (kept in ``KEY_ENV``) and every proxy put in front of it."""

  server: local_server.LlamaServer
  key: str = dataclasses.field(repr=False)
  proxies: list = dataclasses.field(default_factory=list)

  def proxy(self, schedule=(), on_forward=None, gate=None) -> fault_proxy.FaultProxy:
    p = fault_proxy.FaultProxy(self.server.port, schedule, on_forward, gate).start()
    self.proxies.append(p)
    return p

  @property
  def real_requests(self) -> int:
    return sum(p.forwarded for p in self.proxies)


@pytest.fixture(scope="session")
def real_endpoint():
  key = secrets.token_hex(16)
  server = local_server.LlamaServer(find_smollm2_gguf(), api_key=key, n_ctx=2048, n_threads=1)
  server.start()
  os.environ[KEY_ENV] = key
  endpoint = RealEndpoint(server, key)
  try:
    yield endpoint
  finally:
    os.environ.pop(KEY_ENV, None)
    for p in endpoint.proxies:
      p.stop()
    server.stop()
  assert endpoint.real_requests <= MAX_REAL_REQUESTS, (
      f"{endpoint.real_requests} requests reached the model server (budget {MAX_REAL_REQUESTS})")
