"""OpenAI-compatible HTTP judge (vLLM, SGLang, llama.cpp, OpenAI, DashScope, ...), async, batched.

One match = two chat-completion requests (both orders). All requests of a batch are in flight
together, at most ``max_concurrency`` at a time. Transport faults (429, 5xx, timeouts, connection
errors) are retried with exponential backoff and jitter; other 4xx are not; 401/403 (bad key) and
404 (wrong URL or model) raise at once because no retry can fix them.

Constrained decoding: the reply is asked for with ``response_format`` (default: the verdict's JSON
schema). A server that rejects the format (HTTP 400/422/500 naming it) is asked again with the next
weaker one (json_schema -> json_object_schema -> json_object -> none), once per judge, counted as
``format_fallbacks``. ``gbnf`` (llama.cpp servers, compact verdict only) sends the verdict's exact
grammar (``verdict.verdict_gbnf``: the fixed text with single spaces, scores 0..10) as the request's
``grammar`` field: the same tokens the local judge's constrained decoding writes, and no room for
the whitespace a JSON-schema grammar allows; it falls back to json_schema. Repair: an unparseable reply is asked again (``parse_retries``) at
``retry_temperature`` with a fixed repair instruction added to the system prompt (never the
reply or the parser's message, which may quote policy text). A match that still fails is
``MatchResult(ok=False)`` with scores (0, 0): both players get no rank evidence, so neither trains on it (types.py).
The API key is read from the environment variable named in the config and never logged, printed,
put in a repr, pickled or cached.
"""
from __future__ import annotations

import asyncio
import concurrent.futures
import os
import random
import time
from typing import Any, Callable, Mapping, Sequence

import httpx
import numpy as np

from arenarl_jax.judges import cache as cache_lib
from arenarl_jax.judges import registry, render
from arenarl_jax.judges import rubric as rubric_lib
from arenarl_jax.judges.settings import (  # noqa: F401 (re-exported: the backend's names)
    RESPONSE_FORMATS, HttpJudgeSettings, JudgeConfigError)
from arenarl_jax.judges import stats
from arenarl_jax.judges import verdict as verdict_lib
from arenarl_jax.settings import settings_from_config
from arenarl_jax.types import Match, MatchResult, Stateless, Trajectory

# The next weaker format after a server rejected one.
FORMAT_FALLBACK = {"gbnf": "json_schema", "json_schema": "json_object_schema",
                   "json_object_schema": "json_object", "json_object": "none"}
REPAIR = ("Your previous reply to this request could not be used. Reply again with exactly one "
          "JSON object of the shape above and nothing else: no text, no code fence.")


class JudgeAuthError(RuntimeError):
  """The judge server rejected the credentials (HTTP 401/403)."""


class JudgeFailureError(RuntimeError):
  """Too many matches of a batch failed (``max_failure_rate``)."""


class _Secret:
  """Holds the API key; its repr hides it and it refuses to be pickled or copied."""

  __slots__ = ("_value",)

  def __init__(self, value: str):
    self._value = value

  def reveal(self) -> str:
    return self._value

  def __repr__(self) -> str:
    return "<hidden>"

  __str__ = __repr__

  def __reduce__(self):
    raise TypeError("the judge API key cannot be pickled, copied or checkpointed")


class _RequestFailed(Exception):
  """A judge request given up on (the message becomes the match's error)."""


class _FormatRejected(Exception):
  """The server rejected the request's response_format (``format`` names ours)."""

  def __init__(self, fmt: str):
    super().__init__(fmt)
    self.format = fmt


def _format_name(response_format: dict[str, Any]) -> str:
  if response_format.get("type") == "json_schema":
    return "json_schema"
  return "json_object_schema" if "schema" in response_format else "json_object"


def _names_format(text: str) -> bool:
  """Whether an error body is about the response format (not, e.g., the context length)."""
  low = text.lower()
  return any(w in low for w in ("response_format", "json_schema", "schema", "json_object",
                                "grammar"))


class HttpJudge(Stateless):
  """Pairwise ``judge(matches)`` and pointwise ``score(trajectories)`` over an HTTP endpoint."""

  def __init__(self, config: HttpJudgeSettings, rubric: rubric_lib.Rubric | str = "travel",
               compact: bool = False, limits: render.RenderLimits = render.RenderLimits(),
               transport: httpx.AsyncBaseTransport | None = None):
    self.config = config
    self._transport = transport  # tests plug in a fake server here
    self.rubric = rubric_lib.load_rubric(rubric)
    self.compact = compact
    if config.response_format == "gbnf" and not compact:
      raise JudgeConfigError("judge.http.response_format='gbnf' describes the compact verdict: "
                             "set judge.compact=true")
    self.limits = limits
    self.metrics = stats.JudgeMetrics()
    self._key: _Secret | None = None
    if config.api_key_env:
      value = os.environ.get(config.api_key_env)
      if not value:
        raise JudgeConfigError(f"judge.http.api_key_env names ${config.api_key_env}, which is "
                               "unset or empty")
      self._key = _Secret(value)
    self._cache = cache_lib.DiskCache(config.cache_dir) if config.cache_dir else None
    self._rng = random.Random(config.seed)
    self.response_format = config.response_format  # downgraded when the server rejects it
    self._contacted = False  # until the server answered once, the first request goes alone

  def __repr__(self) -> str:
    c = self.config
    return (f"HttpJudge(base_url={c.base_url!r}, model={c.model!r}, rubric={self.rubric.name!r}, "
            f"api_key_env={c.api_key_env!r}, max_concurrency={c.max_concurrency})")

  def __reduce_ex__(self, protocol):
    raise TypeError("HttpJudge cannot be pickled, copied or checkpointed (it may hold an API "
                    "key): build a new one from its config")

  def judge(self, matches: Sequence[Match], *, offset: int = 0) -> list[MatchResult]:
    """Both orders of every match; results align with ``matches``."""
    del offset  # requests are independent of their position
    return _run_sync(self.ajudge(matches))

  def score(self, trajectories: Sequence[Trajectory], *,
            offset: int = 0) -> verdict_lib.PointwiseScores:
    """Pointwise 0-10 scores (the same rubric, one trajectory per request)."""
    del offset
    return _run_sync(self.ascore(trajectories))

  async def ajudge(self, matches: Sequence[Match]) -> list[MatchResult]:
    prompts = []
    for k, m in enumerate(matches):
      if m.p is None or m.q is None:
        raise ValueError(f"matches[{k}] (group {m.group}, {m.i} vs {m.j}) has no trajectories")
      query = m.query or m.p.query
      prompts.append(render.render_pairwise(self.rubric, query, m.p, m.q, self.limits,
                                            self.compact))
      prompts.append(render.render_pairwise(self.rubric, query, m.q, m.p, self.limits,
                                            self.compact))
    parse = lambda r: verdict_lib.parse_pairwise(r, self.rubric, self.compact)
    answers = await self._ask_all(prompts, parse, "pairwise")
    results = []
    for k in range(len(matches)):
      (fwd, e1, n1), (bwd, e2, n2) = answers[2 * k], answers[2 * k + 1]
      if fwd is None or bwd is None:
        results.append(verdict_lib.failed(e1, e2, requests=n1 + n2))
      else:
        results.append(verdict_lib.combine(fwd, bwd, requests=n1 + n2))
        self.metrics.orders((fwd.a.combined, fwd.b.combined), (bwd.a.combined, bwd.b.combined))
    self._account(len(results), [r.error for r in results if not r.ok])
    return results

  async def ascore(self, trajectories: Sequence[Trajectory]) -> verdict_lib.PointwiseScores:
    prompts = [render.render_pointwise(self.rubric, t.query, t, self.limits, self.compact)
               for t in trajectories]
    parse = lambda r: verdict_lib.parse_pointwise(r, self.rubric, self.compact)
    answers = await self._ask_all(prompts, parse, "pointwise")
    scores = np.array([v.score if v is not None else np.nan for v, _, _ in answers], np.float32)
    errors = tuple(e for _, e, _ in answers)
    self._account(len(answers), [e for e in errors if e])
    ok = np.array([v is not None for v, _, _ in answers], bool)
    return verdict_lib.PointwiseScores(scores, ok, errors)

  def _account(self, n: int, errors: list[str]) -> None:
    self.metrics.add("matches", n)
    self.metrics.add("failed_matches", len(errors))
    if n and len(errors) / n > self.config.max_failure_rate:
      raise JudgeFailureError(
          f"{len(errors)}/{n} judge matches failed (judge.http.max_failure_rate="
          f"{self.config.max_failure_rate}); first error: {errors[0]}")

  async def _ask_all(self, prompts: list[render.Prompt], parse: Callable[[str], Any],
                     mode: str) -> list[tuple[Any, str | None, int]]:
    """(verdict or None, error or None, requests sent) per prompt, in order."""
    for p in prompts:
      self.metrics.add("truncations", p.truncations)
      self.metrics.add("repairs", p.repairs)
    out: list[Any] = [None] * len(prompts)
    todo = []
    template = cache_lib.template_hash(render.system_prompt(self.rubric, mode, self.compact),
                                       self.rubric, self.limits, mode, self.compact)
    for k, p in enumerate(prompts):
      body = self._body(p, mode)
      key = cache_lib.cache_key(self.config.base_url, self.config.model, p.messages,
                                self._settings(body), template)
      hit = self._cached(key, parse)
      if hit is not None:
        self.metrics.add("cache_hits")
        out[k] = (hit, None, 0)
      else:
        todo.append((k, mode, p, key))
    if not todo:
      return out
    # Sent in the order of their text: prompts that begin alike (in a tournament, the matches
    # that show the same trajectory first) reach the server one after another, so a server that
    # keeps its last prompt's KV cache (llama.cpp's prompt cache, vLLM/SGLang prefix caching)
    # reuses that beginning instead of computing it again.
    todo.sort(key=lambda item: [m.get("content", "") for m in item[2].messages])
    limits = httpx.Limits(max_connections=self.config.max_concurrency,
                          max_keepalive_connections=self.config.max_concurrency)
    sem = asyncio.Semaphore(self.config.max_concurrency)
    async with httpx.AsyncClient(timeout=httpx.Timeout(self.config.timeout_s), limits=limits,
                                 transport=self._transport) as client:
      async def one(k, mode, prompt, key):
        out[k] = await self._ask(client, sem, mode, prompt, key, parse)

      if not self._contacted:  # one probe first: a bad key costs one request, not a batch
        await one(*todo[0])
        todo = todo[1:]
      try:
        async with asyncio.TaskGroup() as tg:
          for item in todo:
            tg.create_task(one(*item))
      except BaseExceptionGroup as group:
        for exc in group.exceptions:
          if isinstance(exc, (JudgeAuthError, JudgeConfigError)):
            raise exc from None
        raise
    return out

  def _cached(self, key: str, parse: Callable[[str], Any]) -> Any:
    if self._cache is None:
      return None
    reply = self._cache.get(key)
    if reply is None:
      return None
    try:
      verdict = parse(reply)
    except verdict_lib.VerdictError:  # stale entry from another schema: ask again
      return None
    self.metrics.add("mismatches", verdict.mismatches)
    return verdict

  def _body(self, prompt: render.Prompt, mode: str, repair: bool = False) -> dict[str, Any]:
    c = self.config
    messages = [dict(m) for m in prompt.messages]
    if repair:  # a fixed instruction only: nothing from the rejected reply goes back
      messages[0]["content"] += "\n\n" + REPAIR
    body: dict[str, Any] = {"model": c.model, "messages": messages,
                            "temperature": c.temperature, "max_tokens": c.max_tokens}
    fmt = self.response_format
    if fmt == "gbnf":  # llama.cpp's grammar field
      body["grammar"] = verdict_lib.verdict_gbnf(self.rubric, mode)
    elif fmt != "none":
      schema = rubric_lib.verdict_schema(self.rubric, mode, self.compact)
      if fmt == "json_object":
        body["response_format"] = {"type": "json_object"}
      elif fmt == "json_object_schema":  # llama.cpp's form
        body["response_format"] = {"type": "json_object", "schema": schema}
      else:  # OpenAI / vLLM structured outputs
        body["response_format"] = {"type": "json_schema", "json_schema": {
            "name": f"{self.rubric.name}_{mode}_verdict", "schema": schema, "strict": True}}
    return body

  @staticmethod
  def _settings(body: dict[str, Any]) -> dict[str, Any]:
    """The sampling settings of a request (part of its cache key)."""
    return {k: v for k, v in body.items() if k not in ("model", "messages")}

  async def _ask(self, client: httpx.AsyncClient, sem: asyncio.Semaphore, mode: str,
                 prompt: render.Prompt, key: str,
                 parse: Callable[[str], Any]) -> tuple[Any, str | None, int]:
    """One judge request: post (transport retries, format fallback), parse (repair re-asks),
    cache the reply. Returns (verdict or None, error or None, requests sent)."""
    last, sent = "", [0]  # sent[0]: HTTP requests of this prompt, every retry included
    for attempt in range(self.config.parse_retries + 1):
      try:
        while True:
          body = self._body(prompt, mode, repair=attempt > 0)
          if attempt:
            body["temperature"] = max(body["temperature"], self.config.retry_temperature)
          try:
            reply = await self._post(client, sem, body, sent)
            break
          except _FormatRejected as e:
            self._downgrade(e.format)
      except _RequestFailed as e:
        self.metrics.add("failures")
        return None, str(e), sent[0]
      try:
        verdict = parse(reply)
      except verdict_lib.VerdictError as e:
        self.metrics.add("parse_failures")
        last = str(e)
        continue
      self.metrics.add("mismatches", verdict.mismatches)
      if self._cache is not None:
        self._cache.put(key, reply)
      return verdict, None, sent[0]
    self.metrics.add("failures")
    return None, f"unparseable reply after {self.config.parse_retries + 1} tries: {last}", sent[0]

  def _downgrade(self, rejected: str) -> None:
    """Switches to the next weaker response_format (once per rejected format, across tasks)."""
    if self.response_format == rejected:
      self.response_format = FORMAT_FALLBACK[rejected]
      self.metrics.add("format_fallbacks")

  async def _post(self, client: httpx.AsyncClient, sem: asyncio.Semaphore,
                  body: dict[str, Any], sent: list[int]) -> str:
    """The reply text; retries transport faults (``sent[0]`` counts every request); raises
    _RequestFailed, _FormatRejected or auth/config errors."""
    c = self.config
    url = c.base_url.rstrip("/") + "/chat/completions"
    headers = {"Authorization": f"Bearer {self._key.reveal()}"} if self._key else {}
    last, retry_after = "", 0.0
    for attempt in range(c.max_retries + 1):
      if attempt:
        self.metrics.add("retries")
        await asyncio.sleep(self._backoff(attempt - 1, retry_after))
      retry_after = 0.0
      async with sem:
        self.metrics.enter()
        self.metrics.add("requests")
        sent[0] += 1
        start = time.perf_counter()
        try:
          async with asyncio.timeout(c.timeout_s):
            resp = await client.post(url, json=body, headers=headers)
        except (TimeoutError, httpx.TimeoutException):
          last = f"timeout after {c.timeout_s:g}s"
          continue
        except httpx.TransportError as e:
          last = f"connection error ({type(e).__name__})"
          continue
        finally:
          self.metrics.leave()
      self.metrics.latency(time.perf_counter() - start)
      status = resp.status_code
      if status in (401, 403):
        raise JudgeAuthError(
            f"judge server {c.base_url} rejected the request with HTTP {status}: check the API "
            + (f"key in ${c.api_key_env}" if c.api_key_env else
               "key (judge.http.api_key_env is empty, so none was sent)"))
      if status == 404:
        raise JudgeConfigError(f"judge server {c.base_url} answered HTTP 404 for "
                               f"/chat/completions with model {c.model!r}: check base_url/model")
      fmt = body.get("response_format")
      # 400/422, or 500 from servers that wrap validation errors (llama-cpp-python), naming
      # the format: a weaker format, not a retry, can fix it.
      if status in (400, 422, 500) and _names_format(resp.text):
        if "grammar" in body:
          raise _FormatRejected("gbnf")
        if fmt is not None:
          raise _FormatRejected(_format_name(fmt))
      if status == 429 or status >= 500:
        last = f"HTTP {status}"
        retry_after = _retry_after(resp)
        continue
      if status >= 400:
        raise _RequestFailed(f"HTTP {status} (not retried): {resp.text[:200]}")
      self._contacted = True
      try:
        return resp.json()["choices"][0]["message"]["content"] or ""
      except (ValueError, KeyError, IndexError, TypeError):
        return f"(malformed completion response: {resp.text[:200]})"  # the parser rejects it
    raise _RequestFailed(f"gave up after {c.max_retries + 1} attempts; last: {last}")

  def _backoff(self, retry: int, retry_after: float) -> float:
    c = self.config
    delay = min(c.backoff_max_s, c.backoff_s * 2 ** retry) * self._rng.uniform(0.5, 1.0)
    return max(delay, min(retry_after, c.backoff_max_s))


def make_http_judge(cfg: Mapping[str, Any]) -> HttpJudge:
  """``backend="http"``: an OpenAI-compatible endpoint."""
  return HttpJudge(
      settings_from_config(HttpJudgeSettings, cfg.get("http"), "judge.http"),
      rubric=registry.rubric_name(cfg), compact=bool(cfg.get("compact", False)),
      limits=settings_from_config(render.RenderLimits, cfg.get("render"), "judge.render"))


def _retry_after(resp: httpx.Response) -> float:
  try:
    return max(0.0, float(resp.headers.get("retry-after", 0)))
  except ValueError:  # an HTTP date: fall back to our own backoff
    return 0.0


def _run_sync(coro):
  """Runs a coroutine from sync code, also inside an already running loop (notebooks)."""
  try:
    asyncio.get_running_loop()
  except RuntimeError:
    return asyncio.run(coro)
  with concurrent.futures.ThreadPoolExecutor(1) as pool:
    return pool.submit(asyncio.run, coro).result()
