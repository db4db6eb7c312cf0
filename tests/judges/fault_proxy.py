"""A fault-injecting HTTP/1.1 proxy on 127.0.0.1 (asyncio, own thread) for the real-server tests.

Chat-completion requests are numbered in arrival order; ``schedule[k]`` says what happens to the
k-th: "pass" (forward to the upstream server), "429"/"503" (answered by the proxy itself, never
reaching the model), or "hang" (no answer until the client gives up). Requests past the schedule
pass. When the upstream is down, the client's connection is reset (as if talking to it directly).
``gate=(k, total)`` holds each passing request until k are in flight together (or it is the
first, a lone probe, or the last of ``total``), so concurrency is checked by counting, not timing.
``outcomes(n)`` reads ``answered`` once the first n arrivals each have a recorded outcome, waiting
on a condition the proxy signals when it records one (not on a clock).
"""
import asyncio
import re
import threading
from typing import Callable


class FaultProxy:
  """Counts arrivals, forwards and concurrent requests; one connection per request."""

  def __init__(self, upstream_port: int, schedule=(),
               on_forward: Callable[[int], None] | None = None,
               gate: tuple[int, int] | None = None):
    self.gate = gate
    self._released: asyncio.Event | None = None
    self.upstream_port = upstream_port
    self.schedule = list(schedule)
    self.on_forward = on_forward  # called with the forward's index when it goes upstream
    self.arrivals = 0  # chat-completion requests received
    self.forwarded = 0  # chat-completion requests that reached the upstream server
    # Per arrival, in arrival order: "pass", "429", "503", "hang", "reset". Each entry is set
    # before the client can see the outcome, so a client that has its answer finds it recorded;
    # ``outcomes`` waits on ``_recorded`` anyway, so a reader never depends on that ordering.
    self.answered: list[str | None] = []
    self._recorded = threading.Condition()
    self.bodies: list[bytes] = []  # chat-completion request bodies, in arrival order
    self.in_flight = self.max_in_flight = 0
    self._loop = asyncio.new_event_loop()
    self._ready = threading.Event()
    self._thread = threading.Thread(target=self._run, daemon=True)
    self.port = 0

  @property
  def base_url(self) -> str:
    return f"http://127.0.0.1:{self.port}/v1"

  def outcomes(self, n: int, timeout_s: float = 60.0) -> list[str | None]:
    """``answered`` once the first ``n`` arrivals each have an outcome (AssertionError if they
    do not within ``timeout_s``: a proxy that never records is a bug to report, not to wait on)."""
    def done():
      return len(self.answered) >= n and None not in self.answered[:n]
    with self._recorded:
      if not self._recorded.wait_for(done, timeout_s):
        raise AssertionError(f"proxy outcomes not recorded within {timeout_s}s: {self.answered}")
      return list(self.answered)

  def start(self) -> "FaultProxy":
    self._thread.start()
    self._ready.wait(10)
    return self

  def stop(self) -> None:
    self._loop.call_soon_threadsafe(self._loop.stop)
    self._thread.join(10)

  def _run(self):
    asyncio.set_event_loop(self._loop)
    server = self._loop.run_until_complete(
        asyncio.start_server(self._handle, "127.0.0.1", 0))
    self.port = server.sockets[0].getsockname()[1]
    self._ready.set()
    self._loop.run_forever()
    server.close()
    # Cancel hanging handlers so the loop closes cleanly.
    for task in asyncio.all_tasks(self._loop):
      task.cancel()
    self._loop.run_until_complete(asyncio.sleep(0))
    self._loop.close()

  async def _handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter):
    try:
      head = await reader.readuntil(b"\r\n\r\n")
    except (asyncio.IncompleteReadError, ConnectionError):
      writer.close()
      return
    length = re.search(rb"(?im)^content-length:\s*(\d+)", head)
    body = await reader.readexactly(int(length.group(1))) if length else b""
    is_chat = b"/chat/completions" in head.split(b"\r\n", 1)[0]
    action, index = "pass", None
    if is_chat:
      index = self.arrivals
      self.arrivals += 1
      self.bodies.append(body)
      action = self.schedule[index] if index < len(self.schedule) else "pass"
      with self._recorded:
        self.answered.append(action if action == "hang" else None)
        self._recorded.notify_all()
      self.in_flight += 1
      self.max_in_flight = max(self.max_in_flight, self.in_flight)
    try:
      if action in ("429", "503"):
        self._record(index, action)
        text = f'{{"error": "injected {action}"}}'.encode()
        reason = b"Too Many Requests" if action == "429" else b"Service Unavailable"
        writer.write(b"HTTP/1.1 " + action.encode() + b" " + reason + b"\r\n"
                     b"Content-Type: application/json\r\nRetry-After: 0\r\nConnection: close\r\n"
                     b"Content-Length: " + str(len(text)).encode() + b"\r\n\r\n" + text)
        await writer.drain()
      elif action == "hang":
        await reader.read()  # returns when the client gives up and closes the connection
      else:
        if is_chat and self.gate is not None:
          await self._hold()
        await self._forward(head, body, writer, index)
    except (ConnectionError, asyncio.IncompleteReadError):
      pass
    finally:
      if is_chat:
        self.in_flight -= 1
        # A path that ended without an outcome (the upstream reset mid-request, the client went
        # away) closes the client's connection unanswered: that is a reset, recorded before close.
        if self.answered[index] is None:
          self._record(index, "reset")
      writer.close()

  async def _hold(self) -> None:
    k, total = self.gate
    if self._released is None:
      self._released = asyncio.Event()
    if self.in_flight >= k or self.arrivals in (1, total):
      self._released.set()
      self._released = asyncio.Event()
      return
    await asyncio.wait_for(self._released.wait(), 60.0)  # a client that never reaches k fails

  def _record(self, index: int | None, outcome: str) -> None:
    if index is not None:  # a chat-completion request (others are not counted)
      with self._recorded:
        self.answered[index] = outcome
        self._recorded.notify_all()

  async def _forward(self, head: bytes, body: bytes, writer: asyncio.StreamWriter,
                     index: int | None) -> None:
    head = re.sub(rb"(?im)^connection:[^\r\n]*\r\n", b"", head)
    head = head[:-2] + b"Connection: close\r\n\r\n"
    try:
      up_reader, up_writer = await asyncio.open_connection("127.0.0.1", self.upstream_port)
    except OSError:
      self._record(index, "reset")
      writer.transport.abort()  # upstream down: the client sees a reset connection
      return
    up_writer.write(head + body)
    await up_writer.drain()
    if index is not None:
      self.forwarded += 1
      if self.on_forward is not None:  # the request is with the server now
        self.on_forward(self.forwarded)
    try:
      response = await up_reader.read()  # the upstream closes after one response
    except ConnectionError:
      # A server killed before it read the whole request resets the connection (unread data)
      # instead of closing it: the same outcome as an empty answer.
      response = b""
    up_writer.close()
    if not response:
      self._record(index, "reset")
      writer.transport.abort()  # upstream died mid-request
      return
    self._record(index, "pass")
    writer.write(response)
    await writer.drain()
