"""The HTTP judge against a REAL OpenAI-compatible server: llama.cpp serving SmolLM2-135M.

A 135M model is no judge; these tests check plumbing: prompts, JSON-schema-constrained replies,
parsing, both orders, concurrency, cache, auth, retries through a fault-injecting proxy, and a
server that dies mid-batch. Budget: at most 16 requests reach the model in this module (checked by
the session fixture): batch 4, wrong key 1, faults 2, kill 3.
"""
import dataclasses
import json
import threading

import pytest

from arenarl_jax.judges import http
from arenarl_jax.judges import rubric as rubric_lib
from arenarl_jax.types import Match, Step, ToolCall, Trajectory
import judge_fakes

MINI = rubric_lib.Rubric(
    "mini", "Decide which agent helped the user more.",
    (rubric_lib.Dimension("quality", "useful tool calls"),),
    (rubric_lib.Dimension("quality", "correct and complete"),), 0.5, 0.5)


def _traj(answer: str, city: str) -> Trajectory:
  return Trajectory("q", (
      Step(reasoning="look it up", tool_calls=(ToolCall("weather", {"city": city}),),
           tool_results=(f"{city}: sunny, 21C",)),
      Step(content=answer)))


def _matches(n: int) -> list[Match]:
  pool = [_traj("Lyon is sunny, 21C. Take a walk.", "Lyon"),
          _traj("I don't know.", "Paris"),
          _traj("Sunny and warm: visit the park.", "Lyon"),
          _traj("", "Nice")]
  return [Match(0, k, k + 1, "What is the weather in Lyon today?", pool[k % 4], pool[(k + 1) % 4])
          for k in range(n)]


def _config(proxy, **overrides) -> http.HttpJudgeSettings:
  base = dict(base_url=proxy.base_url, model="smollm2", api_key_env=judge_fakes.KEY_ENV,
              response_format="json_object_schema", temperature=0.0, max_tokens=96,
              max_concurrency=2, timeout_s=120.0, max_retries=3, parse_retries=0,
              backoff_s=0.05, backoff_max_s=0.5)
  return http.HttpJudgeSettings(**{**base, **overrides})


@dataclasses.dataclass
class Batch:
  results: list
  judge: http.HttpJudge
  proxy: object
  cache_dir: str


@pytest.fixture(scope="module")
def judged_batch(real_endpoint, tmp_path_factory):
  """Two matches (four real requests), concurrency limit 2, with an on-disk cache; the proxy's
  gate holds requests until two are in flight (counting, not timing)."""
  proxy = real_endpoint.proxy(gate=(2, 4))
  cache_dir = str(tmp_path_factory.mktemp("judge_cache"))
  judge = http.HttpJudge(_config(proxy, cache_dir=cache_dir), MINI, compact=True)
  return Batch(judge.judge(_matches(2)), judge, proxy, cache_dir)


def test_batch_judged_in_both_orders_with_valid_scores(judged_batch):
  results, judge, proxy = judged_batch.results, judged_batch.judge, judged_batch.proxy
  assert all(r.ok for r in results), [r.error for r in results]
  for r in results:
    (fa, fb), (ba, bb) = r.detail["forward"], r.detail["backward"]
    assert all(0 <= x <= 10 for x in (fa, fb, ba, bb))
    assert r.score_p == pytest.approx(fa + bb) and r.score_q == pytest.approx(fb + ba)
    assert r.requests == 2
  assert proxy.forwarded == 4 and proxy.answered == ["pass"] * 4
  assert judge.metrics["requests"] == 4 and judge.metrics["parse_failures"] == 0
  # Each match was asked in both orders: P's answer is Agent_A once and Agent_B once.
  bodies = [json.loads(b) for b in proxy.bodies]
  assert all(b["response_format"]["type"] == "json_object" and "schema" in b["response_format"]
             for b in bodies)
  users = [b["messages"][1]["content"] for b in bodies]
  a_first = [u.split("<agent_a_answer>\n")[1].startswith("Lyon is sunny") for u in users]
  b_first = [u.split("<agent_b_answer>\n")[1].startswith("Lyon is sunny") for u in users]
  assert sum(a_first) == 1 and sum(b_first) == 1  # match 0's P, in each order once
  snap = judge.metrics.snapshot()
  assert snap["latency_ms_p50"] > 0 and snap["latency_ms_p99"] >= snap["latency_ms_p50"]


def test_in_flight_never_exceeds_the_limit(judged_batch):
  # The gate released nothing until two were in flight: the limit is reached and never passed.
  assert judged_batch.proxy.max_in_flight == 2
  assert judged_batch.judge.metrics.max_in_flight == 2


def test_second_run_served_from_cache(judged_batch):
  # The same endpoint (cache keys include it): a new judge sends nothing.
  proxy = judged_batch.proxy
  arrivals = proxy.arrivals
  judge = http.HttpJudge(_config(proxy, cache_dir=judged_batch.cache_dir), MINI, compact=True)
  again = judge.judge(_matches(2))
  assert [(r.score_p, r.score_q) for r in again] == [
      (r.score_p, r.score_q) for r in judged_batch.results]
  assert proxy.arrivals == arrivals and judge.metrics["requests"] == 0
  assert judge.metrics["cache_hits"] == 4


def test_wrong_key_one_401_no_retries(real_endpoint, monkeypatch):
  monkeypatch.setenv("ARENARL_WRONG_KEY", "not-the-key")
  proxy = real_endpoint.proxy()
  judge = http.HttpJudge(_config(proxy, api_key_env="ARENARL_WRONG_KEY"), MINI, compact=True)
  with pytest.raises(http.JudgeAuthError, match=r"HTTP 401.*\$ARENARL_WRONG_KEY") as e:
    judge.judge(_matches(3))
  assert "not-the-key" not in str(e.value)
  assert proxy.arrivals == 1 and judge.metrics["retries"] == 0


def test_json_schema_format_falls_back_on_this_server(real_endpoint):
  """llama-cpp-python's server rejects response_format type json_schema (HTTP 422): the judge
  falls back to its json_object + schema form once and keeps it (3 requests reach the server)."""
  proxy = real_endpoint.proxy()
  judge = http.HttpJudge(_config(proxy, response_format="json_schema", max_concurrency=1), MINI,
                         compact=True)
  (r,) = judge.judge(_matches(1))
  assert r.ok, r.error
  assert judge.metrics["format_fallbacks"] == 1 and judge.response_format == "json_object_schema"
  types = [json.loads(b)["response_format"]["type"] for b in proxy.bodies]
  assert types == ["json_schema", "json_object", "json_object"] and r.requests == 3


def test_faults_through_proxy_are_retried(judged_batch, real_endpoint):
  # A hang costs one timeout: make it a few real requests long on this (shared, noisy) machine.
  timeout = max(5.0, 2.5 * judged_batch.judge.metrics.snapshot()["latency_ms_p99"] / 1000)
  proxy = real_endpoint.proxy(schedule=["429", "503", "hang"])
  judge = http.HttpJudge(_config(proxy, timeout_s=timeout, max_retries=4), MINI, compact=True)
  (r,) = judge.judge(_matches(1))
  assert r.ok, r.error
  assert proxy.answered == ["429", "503", "hang", "pass", "pass"]
  assert proxy.forwarded == 2  # the faults never reached the model
  assert judge.metrics["retries"] == 3 and judge.metrics["requests"] == 5
  assert judge.metrics["failures"] == 0


def test_server_killed_mid_batch(real_endpoint):
  server = real_endpoint.server
  # 1. Dead server, no restart: the configured error, with the failures counted.
  server.kill()
  try:
    proxy = real_endpoint.proxy()
    judge = http.HttpJudge(_config(proxy, max_retries=1, max_failure_rate=0.0), MINI,
                           compact=True)
    with pytest.raises(http.JudgeFailureError, match="1/1 judge matches failed"):
      judge.judge(_matches(1))
    assert judge.metrics["failures"] == 2 and judge.metrics["failed_matches"] == 1
    assert proxy.forwarded == 0 and set(proxy.outcomes(2)) == {"reset"}
  finally:
    server.start()
  # 2. Killed while answering the batch's first request, restarted on the same port.
  restarter = []

  def kill_and_restart(forward_index):
    if forward_index == 1:
      server.kill()
      restarter.append(threading.Thread(target=server.start))
      restarter[0].start()

  proxy = real_endpoint.proxy(on_forward=kill_and_restart)
  judge = http.HttpJudge(_config(proxy, max_retries=10, backoff_s=0.5, backoff_max_s=4.0),
                         MINI, compact=True)
  results = judge.judge(_matches(1))
  restarter[0].join(120)
  assert all(r.ok for r in results), [r.error for r in results]
  # Read through ``outcomes``: it waits until each arrival's outcome is recorded, so the killed
  # request's "reset" is never read before the proxy has written it.
  answered = proxy.outcomes(proxy.arrivals)
  assert answered.count("reset") >= 1 and judge.metrics["retries"] >= 1
  assert proxy.forwarded == 3  # the killed request, then both directions on the new server
  assert server.proc.poll() is None
