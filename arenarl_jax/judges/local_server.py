"""llama.cpp's OpenAI-compatible server (llama-cpp-python) as a child process (a local judge).

Used by the judge tests and benchmark, and handy for a laptop run with a GGUF judge model. Needs
``llama-cpp-python[server]`` (``bash scripts/setup.sh --judge``).

The API key never goes on the command line (``/proc/<pid>/cmdline`` is readable by every local
user). ``key_via="env"`` (default) passes it in the child's environment as ``API_KEY``, which
the server's settings read and which only the same user can read; ``key_via="file"`` writes every
setting, the key included, to a 0600 JSON config file in a 0700 directory, named by the
``CONFIG_FILE`` environment variable and deleted when the server stops.
"""
from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import tempfile
import time

import httpx


def free_port(host: str = "127.0.0.1") -> int:
  """A TCP port that was free a moment ago."""
  with socket.socket() as s:
    s.bind((host, 0))
    return s.getsockname()[1]


class LlamaServer:
  """Starts, stops, kills and restarts ``python -m llama_cpp.server`` on a fixed host/port."""

  def __init__(self, model: str, port: int | None = None, host: str = "127.0.0.1",
               api_key: str | None = None, n_ctx: int = 2048, n_threads: int = 1,
               n_threads_batch: int | None = None, python: str = sys.executable,
               extra_args: tuple[str, ...] = (), key_via: str = "env"):
    if key_via not in ("env", "file"):
      raise ValueError(f"LlamaServer: key_via must be 'env' or 'file', got {key_via!r}")
    if key_via == "file" and extra_args:
      raise ValueError("LlamaServer: key_via='file' puts every setting in the config file; "
                       "extra_args cannot be combined with it")
    self.model, self.host, self.port = model, host, port or free_port(host)
    self._api_key, self.n_ctx, self.n_threads = api_key, n_ctx, n_threads
    self.n_threads_batch = n_threads_batch or n_threads
    self.python, self.extra_args, self.key_via = python, tuple(extra_args), key_via
    self.proc: subprocess.Popen | None = None
    self.workdir = tempfile.mkdtemp(prefix="llama_server_")  # 0700
    self.log_path = os.path.join(self.workdir, "server.log")
    self.config_path = os.path.join(self.workdir, "config.json")

  def __repr__(self) -> str:
    return f"LlamaServer(model={os.path.basename(self.model)!r}, url={self.base_url!r})"

  @property
  def base_url(self) -> str:
    return f"http://{self.host}:{self.port}/v1"

  def settings(self) -> dict:
    """The server and model settings (without the key)."""
    return {"host": self.host, "port": self.port, "interrupt_requests": False,
            "models": [{"model": self.model, "n_ctx": self.n_ctx, "n_threads": self.n_threads,
                        "n_threads_batch": self.n_threads_batch, "logits_all": False}]}

  def command(self) -> list[str]:
    """The argv: never holds the key."""
    cmd = [self.python, "-m", "llama_cpp.server"]
    if self.key_via == "file":
      return cmd
    return cmd + ["--model", self.model, "--host", self.host, "--port", str(self.port),
                  "--n_ctx", str(self.n_ctx), "--n_threads", str(self.n_threads),
                  "--n_threads_batch", str(self.n_threads_batch),
                  "--interrupt_requests", "False", "--logits_all", "False", *self.extra_args]

  def environment(self) -> dict[str, str]:
    """The child's environment: the key as API_KEY (env mode) or the config file's path."""
    env = {k: v for k, v in os.environ.items() if k not in ("API_KEY", "CONFIG_FILE")}
    if self.key_via == "file":
      env["CONFIG_FILE"] = self._write_config()
    elif self._api_key:
      env["API_KEY"] = self._api_key
    return env

  def _write_config(self) -> str:
    """Writes the settings (and key) to a file created 0600 in the 0700 work directory."""
    config = self.settings()
    if self._api_key:
      config["api_key"] = self._api_key
    if os.path.exists(self.config_path):
      os.unlink(self.config_path)
    fd = os.open(self.config_path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    with os.fdopen(fd, "w") as f:
      json.dump(config, f)
    return self.config_path

  def start(self, timeout_s: float = 180.0) -> "LlamaServer":
    """Starts the server and waits until ``GET /v1/models`` answers 200."""
    if self.proc is not None and self.proc.poll() is None:
      return self
    if not os.path.isfile(self.model):
      raise FileNotFoundError(f"judge model file not found: {self.model}")
    log = open(self.log_path, "ab")
    self.proc = subprocess.Popen(self.command(), stdout=log, stderr=subprocess.STDOUT,
                                 stdin=subprocess.DEVNULL, start_new_session=True,
                                 env=self.environment())
    log.close()
    headers = {"Authorization": f"Bearer {self._api_key}"} if self._api_key else {}
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
      if self.proc.poll() is not None:
        raise RuntimeError(f"llama.cpp server exited with code {self.proc.returncode}; log "
                           f"{self.log_path}:\n{self.log_tail()}")
      try:
        if httpx.get(self.base_url + "/models", headers=headers, timeout=2.0).status_code == 200:
          return self
      except httpx.TransportError:
        pass
      time.sleep(0.2)
    self.stop()
    raise TimeoutError(f"llama.cpp server not ready after {timeout_s:g}s; log {self.log_path}")

  def log_tail(self, chars: int = 2000) -> str:
    try:
      with open(self.log_path, "rb") as f:
        return f.read().decode("utf-8", "replace")[-chars:]
    except OSError:
      return ""

  def kill(self) -> None:
    """SIGKILL the whole process group at once (a crash, as far as clients can tell)."""
    self._signal(signal.SIGKILL)

  def stop(self, grace_s: float = 5.0) -> None:
    """SIGTERM the process group, then SIGKILL after ``grace_s``; deletes the config file."""
    if self._signal(signal.SIGTERM):
      try:
        self.proc.wait(grace_s)
      except subprocess.TimeoutExpired:
        self._signal(signal.SIGKILL)
    if os.path.exists(self.config_path):
      os.unlink(self.config_path)

  def _signal(self, sig: int) -> bool:
    if self.proc is None or self.proc.poll() is not None:
      return False
    try:
      os.killpg(self.proc.pid, sig)  # start_new_session: the group id is the child's pid
    except ProcessLookupError:
      return False
    if sig == signal.SIGKILL:
      self.proc.wait()
    return True

  def __enter__(self) -> "LlamaServer":
    return self.start()

  def __exit__(self, *exc) -> None:
    self.stop()


# Where scripts/build_llama_server.sh puts the binary by default.
BUILT_SERVER = os.path.join(os.path.dirname(os.path.dirname(os.path.dirname(
    os.path.abspath(__file__)))), ".cache", "llama-server", "build", "bin", "llama-server")


def find_native_server(path: str = "") -> str | None:
  """llama.cpp's own ``llama-server`` binary: ``path``, else ``$LLAMA_SERVER_BIN``, else PATH,
  else ``BUILT_SERVER`` (``scripts/build_llama_server.sh``'s output)."""
  import shutil  # pylint: disable=g-import-not-at-top
  for candidate in (path, os.environ.get("LLAMA_SERVER_BIN", ""), shutil.which("llama-server"),
                    BUILT_SERVER):
    if candidate and os.path.isfile(candidate) and os.access(candidate, os.X_OK):
      return candidate
  return None


class NativeLlamaServer(LlamaServer):
  """llama.cpp's own C++ server (``llama-server``): ``parallel`` slots with continuous batching.

  The context (``n_ctx`` per slot) is split across slots, so it asks for ``n_ctx * parallel``.
  The key goes in the child's environment, never argv: ``LLAMA_API_KEY`` is what ``--api-key``
  reads in the vendored sources (``common/arg.cpp``); ``LLAMA_ARG_API_KEY`` is set as well for
  builds that follow the ``LLAMA_ARG_*`` naming. No file mode. The web UI is off.
  """

  _KEY_VARS = ("LLAMA_API_KEY", "LLAMA_ARG_API_KEY", "LLAMA_ARG_API_KEY_FILE")

  def __init__(self, binary: str, model: str, parallel: int = 4, **kwargs):
    if kwargs.get("key_via", "env") != "env":
      raise ValueError("NativeLlamaServer: the key is passed by environment only")
    super().__init__(model, **kwargs)
    if int(parallel) < 1:
      raise ValueError(f"NativeLlamaServer: parallel must be >= 1, got {parallel!r}")
    self.binary, self.parallel = binary, int(parallel)

  def __repr__(self) -> str:
    return (f"NativeLlamaServer(model={os.path.basename(self.model)!r}, url={self.base_url!r}, "
            f"parallel={self.parallel})")

  def settings(self) -> dict:
    return {"binary": self.binary, "host": self.host, "port": self.port, "parallel": self.parallel,
            "cont_batching": True, "n_ctx_per_slot": self.n_ctx, "n_threads": self.n_threads,
            "n_threads_batch": self.n_threads_batch, "webui": False}

  def command(self) -> list[str]:
    return [self.binary, "-m", self.model, "--host", self.host, "--port", str(self.port),
            "-c", str(self.n_ctx * self.parallel), "-np", str(self.parallel),
            "--cont-batching", "-t", str(self.n_threads), "-tb", str(self.n_threads_batch),
            "--no-webui", *self.extra_args]

  def environment(self) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k not in ("API_KEY",) + self._KEY_VARS}
    if self._api_key:
      env["LLAMA_API_KEY"] = env["LLAMA_ARG_API_KEY"] = self._api_key
    return env
