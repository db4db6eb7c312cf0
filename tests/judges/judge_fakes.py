"""Test helpers: trajectories with a known quality, and an in-process OpenAI-compatible fake."""
import asyncio
import json
import re

import httpx

from arenarl_jax.judges import rubric as rubric_lib
from arenarl_jax.judges import verdict as verdict_lib
from arenarl_jax.types import Match, Step, ToolCall, Trajectory

KEY_ENV = "ARENARL_TEST_JUDGE_KEY"  # the real-server tests' key lives here (conftest sets it)


def traj(quality: int, extra: str = "", query: str = "Plan a day in Lyon") -> Trajectory:
  """A short trajectory whose answer carries QUALITY=q (the fake judge's ground truth)."""
  return Trajectory(query, (
      Step(reasoning="find sights", tool_calls=(ToolCall("search_poi", {"address": "Lyon"}),),
           tool_results=("Fourviere 45.76,4.82",)),
      Step(content=f"Visit Fourviere. QUALITY={quality} {extra}".strip())))


def matches(qualities_pq, group: int = 0) -> list[Match]:
  return [Match(group, 2 * k, 2 * k + 1, "Plan a day in Lyon", traj(p), traj(q))
          for k, (p, q) in enumerate(qualities_pq)]


def truthful_reply(body: dict, rubric: rubric_lib.Rubric, compact: bool = False) -> str:
  """The verdict a perfect judge gives: every dimension of an agent = the QUALITY in its answer."""
  user = body["messages"][-1]["content"]
  pairwise = "<agent_a_answer>" in user
  tags = ("agent_a_answer", "agent_b_answer") if pairwise else ("agent_answer",)
  scores = []
  for tag in tags:
    section = user.split(f"<{tag}>\n", 1)[1].split(f"\n</{tag}>", 1)[0]
    q = int(re.search(r"QUALITY=(\d+)", section).group(1))
    scores.append(verdict_lib.score_agent(rubric, [q] * len(rubric.path), [q] * len(rubric.answer)))
  return verdict_lib.format_verdict(rubric, "pairwise" if pairwise else "pointwise", scores,
                                    compact)


def completion(content: str) -> dict:
  return {"id": "x", "object": "chat.completion", "model": "fake",
          "choices": [{"index": 0, "finish_reason": "stop",
                       "message": {"role": "assistant", "content": content}}]}


class GateError(AssertionError):
  """The client never had the gate's number of requests in flight together."""


class FakeServer:
  """Scripted faults (consumed in arrival order), then ``reply(body) -> content``."""

  def __init__(self, reply, faults=(), delay_s: float = 0.0, api_key: str | None = None,
               gate: tuple[int, int] | None = None):
    """``gate=(k, total)`` holds each request until k are in flight together (or the request is
    the first, a lone probe, or the last of ``total``): concurrency is then checked by counting,
    never by timing. A client that cannot reach k in flight fails after 10 s (no deadlock)."""
    self.reply, self.faults, self.delay_s, self.api_key = reply, list(faults), delay_s, api_key
    self.bodies: list[dict] = []
    self.headers: list[httpx.Headers] = []
    self.in_flight = self.max_in_flight = 0
    self.gate, self._released = gate, None

  @property
  def transport(self) -> httpx.MockTransport:
    return httpx.MockTransport(self.handle)

  async def handle(self, request: httpx.Request) -> httpx.Response:
    body = json.loads(request.content)
    self.bodies.append(body)
    self.headers.append(request.headers)
    fault = self.faults.pop(0) if self.faults else None
    self.in_flight += 1
    self.max_in_flight = max(self.max_in_flight, self.in_flight)
    try:
      if self.gate is not None:
        await self._hold()
      await asyncio.sleep(self.delay_s)
      if fault == "hang":
        await asyncio.sleep(3600)
      if fault == "connect":
        raise httpx.ConnectError("refused", request=request)
      if fault == "timeout":
        raise httpx.ReadTimeout("slow", request=request)
      if fault == "malformed":
        return httpx.Response(200, json={"oops": True})
      if fault is not None:
        return httpx.Response(int(fault), json={"error": f"scripted {fault}"},
                              headers={"Retry-After": "0"})
      if self.api_key and request.headers.get("authorization") != f"Bearer {self.api_key}":
        return httpx.Response(401, json={"error": "bad key"})
      return httpx.Response(200, json=completion(self.reply(body)))
    finally:
      self.in_flight -= 1

  async def _hold(self) -> None:
    k, total = self.gate
    if self._released is None:
      self._released = asyncio.Event()
    arrived = len(self.bodies)
    if self.in_flight >= k or arrived == 1 or arrived == total:
      self._released.set()
      self._released = asyncio.Event()
      return
    try:
      await asyncio.wait_for(self._released.wait(), 10.0)
    except TimeoutError:
      raise GateError(f"{self.in_flight} requests in flight, the gate waits for {k}") from None
