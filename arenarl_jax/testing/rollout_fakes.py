"""Fakes for rollout tests: tool sources (scripted latencies, failures, hangs, a fault-injecting
wrapper), a scripted sampler with the real sampler's interface that records what it was fed, and a
real model steered into tool calls (also used by benchmarks/rollout.py)."""
from __future__ import annotations

import asyncio
import dataclasses
import functools
import json
import time
from typing import Any, Callable

import jax
import jax.numpy as jnp
import numpy as np
from flax import nnx

from arenarl_jax.envs import base
from arenarl_jax.envs.inprocess import check_arguments
from arenarl_jax.models.loading import load_tokenizer
from arenarl_jax.sampling.sampler import PAD, SampleOutput
from arenarl_jax.sampling.settings import TURN_STOP_REASONS


@functools.lru_cache(maxsize=None)
def smollm2_tokenizer():
  return load_tokenizer("smollm2")


SCHEMAS = {
    "lookup": {"type": "object", "properties": {"q": {"type": "string"}}},
    "search": {"type": "object", "properties": {"query": {"type": "string", "minLength": 1}},
               "required": ["query"]},
    "echo": {"type": "object", "properties": {"text": {"type": "string"}}, "required": ["text"]},
    "slow": {"type": "object", "properties": {}},
    "hang": {"type": "object", "properties": {}},
    "crash": {"type": "object", "properties": {}},
    "fail": {"type": "object", "properties": {}},
    "big": {"type": "object", "properties": {"n": {"type": "integer"}}},
}


class FakeToolSource:
  """Tools with scripted behaviour; counts calls in flight (max_in_flight) to show overlap.

  lookup/search answer after ``latency`` s; echo returns its text; slow sleeps ``slow_s``; hang
  never returns; crash raises (a source breaking the contract); fail returns a tool error; big
  returns ``n`` words. Arguments are checked against the schemas (bad_arguments errors).
  """

  def __init__(self, latency: float = 0.0, slow_s: float = 0.05, names=None):
    self.latency, self.slow_s = latency, slow_s
    self.names = tuple(names or SCHEMAS)
    self.in_flight = self.max_in_flight = self.calls = 0

  def tools(self) -> list[dict[str, Any]]:
    return [{"name": n, "description": f"the {n} tool", "parameters": p}
            for n, p in SCHEMAS.items() if n in self.names]

  async def call(self, name, arguments, *, timeout=None) -> base.ToolResult:
    self.calls += 1
    self.in_flight += 1
    self.max_in_flight = max(self.max_in_flight, self.in_flight)
    start = time.perf_counter()
    try:
      if name not in SCHEMAS:
        return base.ToolResult(f"Error: unknown tool {name!r}", False, base.UNKNOWN_TOOL)
      args = json.loads(arguments) if isinstance(arguments, str) else dict(arguments)
      if (problem := check_arguments(args, SCHEMAS[name])):
        return base.ToolResult(f"Error: {name}: {problem}", False, base.BAD_ARGUMENTS)
      if name == "hang":
        await asyncio.sleep(3600)
      if name == "crash":
        raise RuntimeError("the tool source broke")
      if name == "fail":
        return base.ToolResult("Error: fail failed", False, base.TOOL_ERROR)
      if name == "slow":
        await asyncio.sleep(self.slow_s)
        return base.ToolResult("slow done")
      if name == "echo":
        return base.ToolResult(args["text"])
      if name == "big":
        return base.ToolResult(" ".join(f"word{k}" for k in range(args.get("n", 2000))))
      await asyncio.sleep(self.latency)
      return base.ToolResult(f"{name} result for {json.dumps(args, sort_keys=True)}",
                             latency_s=time.perf_counter() - start)
    finally:
      self.in_flight -= 1


class FaultInjecting:
  """Wraps a tool source; each call (by a seeded RNG) raises, hangs, returns garbage, returns an
  error result, or goes through."""

  def __init__(self, inner, seed: int = 0, p: float = 0.15):
    self.inner, self.rng, self.p = inner, np.random.default_rng(seed), p
    self.injected: dict[str, int] = {}

  def tools(self):
    return self.inner.tools()

  async def call(self, name, arguments, *, timeout=None):
    u = self.rng.random()
    for kind, (lo, hi) in {"raise": (0, 1), "hang": (1, 2), "garbage": (2, 3),
                           "error": (3, 4)}.items():
      if lo * self.p <= u < hi * self.p:
        self.injected[kind] = self.injected.get(kind, 0) + 1
        if kind == "raise":
          raise ConnectionError("injected")
        if kind == "hang":
          await asyncio.sleep(3600)
        if kind == "garbage":
          return {"not": "a ToolResult"}
        return base.ToolResult("Error: injected transport failure", False, base.TRANSPORT)
    return await self.inner.call(name, arguments, timeout=timeout)


@dataclasses.dataclass
class FakeState:
  """What the scripted sampler keeps per row: everything fed so far and which ids it sampled."""

  seen: list[list[int]]
  sampled: list[list[bool]]
  logp: list[list[float]]
  done_N: Any
  turn: int = 0
  group_size: int = 1

  def replace(self, **kw):
    return dataclasses.replace(self, **kw)


class ScriptedSampler:
  """The sampler's interface over a script: ``script(row, turn, seen_ids) -> ids`` (EOS ends the
  turn where it appears; the turn is cut at max_new_tokens and at cache_len like the real one)."""

  def __init__(self, script: Callable[[int, int, list[int]], list[int]], cache_len: int,
               seed: int = 0):
    self.script, self.cache_len, self.rng = script, cache_len, np.random.default_rng(seed)

  def prefill(self, prompts, group_size=1, *, reserve=0):
    n = len(prompts) * group_size
    return FakeState(seen=[list(prompts[r // group_size]) for r in range(n)],
                     sampled=[[False] * len(prompts[r // group_size]) for r in range(n)],
                     logp=[[0.0] * len(prompts[r // group_size]) for r in range(n)],
                     done_N=np.zeros(n, bool), group_size=group_size)

  def decode(self, state, settings, key, rows=None):
    n = len(state.seen)
    done = np.asarray(state.done_N).copy()
    toks = np.full((n, settings.max_new_tokens), PAD, np.int32)
    logp = np.zeros((n, settings.max_new_tokens), np.float32)
    lengths, finish = np.zeros(n, np.int32), np.zeros(n, np.int32)
    for r in range(n):
      if done[r] or len(state.seen[r]) >= self.cache_len:
        continue
      ids = list(self.script(r, state.turn, list(state.seen[r])))
      cap = min(settings.max_new_tokens, self.cache_len - len(state.seen[r]))
      eos_at = next((k for k, t in enumerate(ids) if t in settings.eos_ids), None)
      if eos_at is not None and eos_at < cap:
        ids, reason = ids[:eos_at + 1], "eos"
      else:
        ids, reason = ids[:cap], "length"
      lp = (-self.rng.random(len(ids)) * 3).astype(np.float32)
      toks[r, :len(ids)], logp[r, :len(ids)], lengths[r] = ids, lp, len(ids)
      finish[r] = TURN_STOP_REASONS.index(reason)
      state.seen[r] += ids
      state.sampled[r] += [True] * len(ids)
      state.logp[r] += lp.tolist()
      done[r] = reason == "eos" or len(state.seen[r]) >= self.cache_len
    out = SampleOutput(tokens_NT=toks, logp_NT=logp, lengths_N=lengths, finish_N=finish)
    return out, state.replace(done_N=done, turn=state.turn + 1)

  def extend(self, state, new_tokens, same_as=None):
    del same_as  # every row is written on its own: sharing changes nothing here
    for r, ids in enumerate(new_tokens):
      if len(state.seen[r]) + len(ids) > self.cache_len:
        raise ValueError(f"extend: row {r} overflows cache_len")
      state.seen[r] += list(ids)
      state.sampled[r] += [False] * len(ids)
      state.logp[r] += [0.0] * len(ids)
    return state


class Steered(nnx.Module):
  """The model with +``boost`` on the next token of "<tool_call>{"name": "lookup"}" or "Done"
  (then <|im_end|>) after each turn's header "\\n" (one extra hidden feature carries the previous
  token)."""

  def __init__(self, base_model, tok, boost: float = 40.0):
    self.base, self.cfg, self.boost = base_model, base_model.cfg, boost
    newline = tok.encode("\n")[-1]
    end = tok.token_to_id("<|im_end|>")
    call = tok.encode('<tool_call>{"name": "lookup"}') + [end]
    done = tok.encode("Done") + [end]
    table = np.full((self.cfg.vocab_size, 2), -1, np.int32)
    table[newline] = [call[0], done[0]]
    for seq in (call, done):
      for a, b in zip(seq, seq[1:]):
        table[a, 0] = b
    self.table = nnx.Variable(jnp.asarray(table))

  def hidden(self, tokens_NT, positions_NT=None, *, cache=None, mask_NT=None):
    h, cache = self.base.hidden(tokens_NT, positions_NT, cache=cache, mask_NT=mask_NT)
    return jnp.concatenate([h, tokens_NT[..., None].astype(h.dtype)], axis=-1), cache

  def head(self, h):
    logits = self.base.head(h[..., :-1])
    nxt = self.table[...][h[..., -1].astype(jnp.int32)]
    iota = jax.lax.broadcasted_iota(jnp.int32, logits.shape, logits.ndim - 1)
    return jnp.where((iota == nxt[..., :1]) | (iota == nxt[..., 1:]), logits + self.boost, logits)

  def __call__(self, tokens_NT, positions_NT=None, *, cache=None, mask_NT=None):
    h, cache = self.hidden(tokens_NT, positions_NT, cache=cache, mask_NT=mask_NT)
    return self.head(h), cache
