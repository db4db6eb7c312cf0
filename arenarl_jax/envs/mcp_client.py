"""A tool source over any MCP server started as a stdio subprocess (official ``mcp`` SDK).

:class:`McpToolSource` keeps the :class:`~arenarl_jax.envs.base.ToolSource` contract: ``tools()``
lists OpenAI function schemas, ``await call(...)`` returns a ToolResult and never raises. Around
each call it adds:

- a **concurrency limit** per server (a semaphore; ``max_in_flight`` records the peak);
- a **timeout** per call (``timeout=`` or ``timeout_s``), counted from when the call got its slot,
  so calls queued behind the limit are not failed for waiting; a late call is ``TIMEOUT``;
- **retries with exponential backoff** (``backoff_s``, doubled each time) for reaching a live server
  (spawn + ``initialize``). A call already sent when its server dies is not re-sent: that call may
  be what killed the server, and the rollout gets a ``TRANSPORT`` error at once instead of waiting
  for a respawn. The next call starts a fresh server process (a dead server is noticed by the
  end of its stdout, also between calls);
- a **cache** of successful results per (tool, canonical JSON arguments), least recently used out
  first (``cache_size``; 0 turns it off). Tools are read-only, so a repeat call is not sent;
- a **name map** from the names the policy uses (the paper's) to the server's names, so another
  provider's server can stand in. Unmapped tools keep their names.

Event loops: the MCP session lives in one owner task on the loop of the first call (or of
``await start()``); calls from other tasks of that loop share it. When that loop has finished
(e.g. each rollout step runs its own ``asyncio.run``), the next call starts a new server on the
new loop. Close with ``await aclose()`` (or ``async with``); the server also exits when its stdin
closes, so a process that ends without closing leaves no server behind.

``tools()`` is synchronous: after ``start()`` (or any call) it returns the list fetched on
connecting; before that it lists the tools once through a short-lived server run on a helper
thread, so it also works inside a running loop.
"""
from __future__ import annotations

import asyncio
import collections
import concurrent.futures
import contextlib
import dataclasses
import json
import logging
import os
import re
import shlex
import subprocess
import sys
import time
from typing import Any, Mapping, Sequence

import anyio
import mcp.types as mcp_types
from mcp import ClientSession, McpError, StdioServerParameters
from mcp.client.stdio import stdio_client

from arenarl_jax.envs import base, inprocess
from arenarl_jax.envs.settings import McpClientSettings  # noqa: F401 (re-exported)
from arenarl_jax.envs.mcp_server import ERROR_KIND_META

log = logging.getLogger(__name__)
_EXIT_POLL_S = 0.1  # how often an idle connection checks that its server is still there

# A text the in-process source already cut ends with its note; cutting it again would change it.
_TRUNCATED_RE = re.compile(r"\n\.\.\.\[truncated: \d+ more characters\]\Z")


def parse_name_map(name_map: str | Mapping[str, str] | None) -> dict[str, str]:
  """``{paper name: server name}`` from a JSON string or a mapping; a clear error otherwise."""
  if isinstance(name_map, str):
    if not name_map.strip():
      return {}
    try:
      name_map = json.loads(name_map)
    except json.JSONDecodeError as e:
      raise ValueError(f"env.mcp.name_map: not JSON ({e.msg} at character {e.pos})") from e
  name_map = dict(name_map or {})
  bad = [k for k, v in name_map.items() if not (isinstance(k, str) and isinstance(v, str) and v)]
  if bad:
    raise ValueError(f"env.mcp.name_map: entries must map a tool name to a server tool name; "
                     f"bad: {bad}")
  if len(set(name_map.values())) != len(name_map):
    raise ValueError("env.mcp.name_map: two tool names map to the same server tool")
  return name_map


def canonical_arguments(arguments: Mapping[str, Any]) -> str:
  """The cache key's argument part: sorted keys, no spaces, so equal objects give equal strings."""
  return json.dumps(arguments, sort_keys=True, separators=(",", ":"), ensure_ascii=False)


def _server_errlog():
  """Where the server's stderr goes: ours when it is a real file, else nowhere."""
  try:
    sys.__stderr__.fileno()
    return sys.__stderr__
  except (AttributeError, OSError, ValueError):
    return subprocess.DEVNULL


class TransportError(Exception):
  """The server could not be started, initialised or reached."""


@dataclasses.dataclass
class McpStats:
  """Counters a rollout reports (and the tests read)."""

  sent: int = 0  # calls that reached the server
  cache_hits: int = 0
  cache_misses: int = 0
  connects: int = 0  # servers started successfully
  connect_failures: int = 0  # failed attempts (each retry counts)
  transport_errors: int = 0
  timeouts: int = 0
  max_in_flight: int = 0


class _Connection:
  """One server process and its session, owned by one task (anyio scopes stay in one task)."""

  def __init__(self, params: StdioServerParameters):
    self.params = params
    self.session: ClientSession | None = None
    self.listed: list[mcp_types.Tool] = []
    self.dead = asyncio.get_running_loop().create_future()  # set when the owner task ends
    self._stop = asyncio.Event()
    self._task: asyncio.Task | None = None

  async def open(self, timeout_s: float) -> None:
    ready = asyncio.get_running_loop().create_future()
    self._task = asyncio.create_task(self._own(ready))
    try:
      await asyncio.wait_for(asyncio.shield(ready), timeout_s if timeout_s > 0 else None)
    except BaseException:
      await self.close()
      raise

  async def _own(self, ready: asyncio.Future) -> None:
    try:
      async with stdio_client(self.params, errlog=_server_errlog()) as (read, write):
        async with ClientSession(read, write) as session:
          await session.initialize()
          listed, cursor = [], None
          while True:  # servers may page their tool list
            page = await session.list_tools(params=mcp_types.PaginatedRequestParams(cursor=cursor)
                                            if cursor else None)
            listed.extend(page.tools)
            if not (cursor := page.nextCursor):
              break
          self.session, self.listed = session, listed
          ready.set_result(None)
          while not self._stop.is_set():
            if read.statistics().open_send_streams == 0:  # the server's stdout ended: it exited
              break
            with contextlib.suppress(asyncio.TimeoutError):
              await asyncio.wait_for(self._stop.wait(), _EXIT_POLL_S)
    except Exception as e:  # the transport's task group may raise an ExceptionGroup
      log.debug("MCP connection ended: %r", e)
      if not ready.done():
        ready.set_exception(TransportError(f"{type(e).__name__}: {e}"[:300]))
    finally:
      if not ready.done():
        ready.set_exception(TransportError("the server connection was cancelled"))
      if not self.dead.done():
        self.dead.set_result(None)

  @property
  def alive(self) -> bool:
    return self.session is not None and not self.dead.done() and not self._stop.is_set()

  def abandon(self) -> None:
    """Stops using this connection; the owner task closes it (stdin first, then signals)."""
    self._stop.set()

  async def close(self) -> None:
    self._stop.set()
    if self._task is not None:
      with contextlib.suppress(Exception):  # a timeout or the transport's own failure
        await asyncio.wait_for(asyncio.shield(self._task), 10.0)
      if not self._task.done():
        self._task.cancel()


class McpToolSource:
  """The tool-source contract over one stdio MCP server (see the module docstring)."""

  def __init__(self, command: str | Sequence[str], config: McpClientSettings | None = None,
               env: Mapping[str, str] | None = None):
    self.config = config or McpClientSettings()
    argv = shlex.split(command) if isinstance(command, str) else [str(a) for a in command]
    if not argv:
      raise ValueError("env.mcp.command: empty command")
    inherited = {k: os.environ[k] for k in filter(None, map(str.strip,
                                                          self.config.inherit_env.split(",")))
                 if k in os.environ}
    self._params = StdioServerParameters(command=argv[0], args=argv[1:],
                                         env={**inherited, **(env or {})})
    self._to_server = parse_name_map(self.config.name_map)
    self._to_policy = {v: k for k, v in self._to_server.items()}
    self._schemas: list[dict[str, Any]] | None = None
    self._cache: collections.OrderedDict[tuple[str, str], base.ToolResult] = (
        collections.OrderedDict())
    self.stats = McpStats()
    self._in_flight = 0
    self._loop: asyncio.AbstractEventLoop | None = None
    self._semaphore: asyncio.Semaphore | None = None
    self._conn: _Connection | None = None
    self._connecting: asyncio.Future | None = None

  @property
  def command(self) -> list[str]:
    """The server's command line (argv)."""
    return [self._params.command, *self._params.args]

  @property
  def name_map(self) -> dict[str, str]:
    """``{policy tool name: server tool name}``."""
    return dict(self._to_server)

  # -- listing ---------------------------------------------------------------------------------
  def tools(self) -> list[dict[str, Any]]:
    if self._schemas is None:
      with concurrent.futures.ThreadPoolExecutor(1) as pool:  # its own loop, whatever the caller's
        pool.submit(asyncio.run, self._list_once()).result()
    return json.loads(json.dumps(self._schemas))

  async def _list_once(self) -> None:
    conn = await self._connect_with_retries()
    await conn.close()

  def _set_schemas(self, listed: Sequence[mcp_types.Tool]) -> None:
    names = {t.name for t in listed}
    missing = sorted(v for v in self._to_server.values() if v not in names)
    if missing:
      log.warning("env.mcp.name_map names tools the server does not have: %s", missing)
    # An unmapped server tool named like a mapped policy name would be unreachable: left out.
    self._schemas = [{"name": self._to_policy.get(t.name, t.name),
                      "description": t.description or "",
                      "parameters": dict(t.inputSchema)} for t in listed
                     if t.name in self._to_policy or t.name not in self._to_server]

  # -- connection ------------------------------------------------------------------------------
  def _bind_loop(self) -> str:
    """Ties the state to the running loop; "" when fine, else why this loop cannot be used."""
    loop = asyncio.get_running_loop()
    if self._loop is loop:
      return ""
    if self._loop is not None and self._loop.is_running():
      return "this MCP tool source is in use on another running event loop"
    # First use, or the old loop has finished: its server got EOF on stdin and exits on its own.
    self._loop, self._conn, self._connecting = loop, None, None
    self._semaphore = asyncio.Semaphore(max(1, self.config.concurrency))
    return ""

  async def start(self) -> McpToolSource:
    """Connects now (instead of on the first call); raises TransportError if that fails."""
    if (why := self._bind_loop()):
      raise RuntimeError(why)
    await self._live_connection()
    return self

  async def _live_connection(self) -> _Connection:
    if self._conn is not None and self._conn.alive:
      return self._conn
    if self._connecting is None or self._connecting.done():
      if self._conn is not None:
        self._conn.abandon()
      self._connecting = asyncio.ensure_future(self._connect_with_retries())
    self._conn = await asyncio.shield(self._connecting)
    return self._conn

  async def _connect_with_retries(self) -> _Connection:
    delay, why = self.config.backoff_s, ""
    for attempt in range(self.config.retries + 1):
      if attempt:
        await asyncio.sleep(delay)
        delay *= 2
      conn = _Connection(self._params)
      try:
        await conn.open(self.config.connect_timeout_s)
      except (TransportError, asyncio.TimeoutError) as e:
        self.stats.connect_failures += 1
        why = str(e) or "timed out"
        continue
      self.stats.connects += 1
      self._set_schemas(conn.listed)
      return conn
    raise TransportError(f"{self._params.command} failed {self.config.retries + 1} time(s); "
                         f"last: {why}")

  async def aclose(self) -> None:
    """Closes the server (if this loop owns one); the source reconnects if called again."""
    conn, self._conn, self._connecting = self._conn, None, None
    if conn is not None and self._loop is asyncio.get_running_loop():
      await conn.close()

  async def __aenter__(self) -> McpToolSource:
    return await self.start()

  async def __aexit__(self, *exc: Any) -> None:
    await self.aclose()

  # -- calls -----------------------------------------------------------------------------------
  async def call(self, name: str, arguments: Mapping[str, Any] | str | None = None, *,
                 timeout: float | None = None) -> base.ToolResult:
    start = time.perf_counter()
    try:
      return await self._call(name, arguments, timeout, start)
    except Exception as e:  # the contract: a failing call is an error result, never an exception
      log.exception("MCP call %s failed", name)
      return inprocess.error_result(base.TOOL_ERROR, f"{name} failed ({type(e).__name__})", start)

  async def _call(self, name: str, arguments: Mapping[str, Any] | str | None,
                  timeout: float | None, start: float) -> base.ToolResult:
    args, why = inprocess.call_arguments(arguments)
    if args is None:
      return inprocess.error_result(base.BAD_ARGUMENTS, f"{name}: {why}", start)
    key = (name, canonical_arguments(args))
    if self.config.cache_size > 0 and key in self._cache:
      self._cache.move_to_end(key)
      self.stats.cache_hits += 1
      return dataclasses.replace(self._cache[key], latency_s=time.perf_counter() - start)
    self.stats.cache_misses += 1
    if (why := self._bind_loop()):
      self.stats.transport_errors += 1
      return inprocess.error_result(base.TRANSPORT, f"{name}: {why}", start)
    limit = self.config.timeout_s if timeout is None else timeout
    async with self._semaphore:
      self._in_flight += 1
      self.stats.max_in_flight = max(self.stats.max_in_flight, self._in_flight)
      try:
        result = await self._send(name, args, limit if limit and limit > 0 else None, start)
      finally:
        self._in_flight -= 1
    if result.ok and self.config.cache_size > 0:
      self._cache[key] = result
      while len(self._cache) > self.config.cache_size:
        self._cache.popitem(last=False)
    return result

  async def _send(self, name: str, args: dict[str, Any], timeout: float | None,
                  start: float) -> base.ToolResult:
    try:
      conn = await self._live_connection()
    except TransportError as e:
      self.stats.transport_errors += 1
      return inprocess.error_result(base.TRANSPORT, f"{name}: MCP server unavailable ({e})", start)
    self.stats.sent += 1
    request = asyncio.ensure_future(conn.session.call_tool(self._to_server.get(name, name), args))
    try:
      done, _ = await asyncio.wait((request, conn.dead), timeout=timeout,
                                   return_when=asyncio.FIRST_COMPLETED)
    except asyncio.CancelledError:  # the caller gave up: do not leave the request running
      request.cancel()
      raise
    if request not in done:
      request.cancel()
      if conn.dead.done():
        return self._transport_error(conn, name, "the MCP server exited during the call", start)
      self.stats.timeouts += 1
      return inprocess.error_result(base.TIMEOUT, f"{name}: no answer within {timeout:g} s", start)
    if (e := request.exception()) is not None:
      if isinstance(e, McpError) and e.error.code != mcp_types.CONNECTION_CLOSED:
        return inprocess.error_result(base.TOOL_ERROR, f"{name}: server error: {e.error.message}",
                                      start)
      if isinstance(e, (McpError, anyio.ClosedResourceError, anyio.BrokenResourceError,
                        anyio.EndOfStream)):
        return self._transport_error(conn, name, "the MCP server connection closed", start)
      return inprocess.error_result(base.TOOL_ERROR, f"{name}: bad server reply "
                                    f"({type(e).__name__})", start)
    return self._result(name, request.result(), start)

  def _transport_error(self, conn: _Connection, name: str, why: str,
                       start: float) -> base.ToolResult:
    conn.abandon()  # the next call starts a fresh server
    self.stats.transport_errors += 1
    return inprocess.error_result(base.TRANSPORT, f"{name}: {why}", start)

  def _result(self, name: str, reply: mcp_types.CallToolResult, start: float) -> base.ToolResult:
    parts = []
    for block in reply.content:
      if isinstance(block, mcp_types.TextContent):
        parts.append(block.text)
      else:  # images, audio, resources: named, not inlined (the policy reads text)
        parts.append(f"[{block.type} content]")
    if not parts and reply.structuredContent is not None:
      parts.append(json.dumps(reply.structuredContent, ensure_ascii=False))
    text = "\n".join(parts)
    m = _TRUNCATED_RE.search(text)
    if self.config.max_chars > 0 and not (m and m.start() <= self.config.max_chars):
      text = inprocess.truncate(text, self.config.max_chars)
    latency = time.perf_counter() - start
    if not reply.isError:
      return base.ToolResult(text=text, ok=True, latency_s=latency)
    kind = (reply.meta or {}).get(ERROR_KIND_META)
    if kind not in base.ERROR_KINDS:
      kind = base.TOOL_ERROR
    if not text.startswith("Error"):
      text = f"Error: {name}: {text}"
    return base.ToolResult(text=text, ok=False, error_kind=kind, latency_s=latency)
