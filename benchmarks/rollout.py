"""The multi-turn rollout at the quickstart's shape with a fake tool source whose calls take 50 ms.

  .venv/bin/python benchmarks/rollout.py [--model smollm2|tiny] [--prompts 2] [--group 4]
      [--new 48] [--cache-len 512] [--turns 2] [--latency 0.05] [--repeats 2] [--no-steer]

B = 2 prompts x G = 4 rows, 48 new tokens per turn, 2 tool turns and the forced final turn, a
512-token cache (configs/quickstart.py). A language model rarely calls a made-up tool, so by default
the model is steered: after each turn's header the logits of "<tool_call>{...}" or "Done" get a
large bonus (about half the rows call a tool each turn); --no-steer measures the plain model. The
first rollout compiles; the RESULT line reports the median of the following ``--repeats`` ones:
rollout_tok_s (sampled tokens / wall s), tool_phase_s and slowest_call_s (the turn with the largest
ratio of the two: ~1 means the calls really ran concurrently; target <= 1.5), host_frac (wall time
outside device calls and tool phases, i.e. the driver's bookkeeping; target <= 0.10).
"""
from __future__ import annotations

import argparse
import asyncio
import statistics
import time

import jax

from arenarl_jax.envs import base
from arenarl_jax.models.config import PRESETS
from arenarl_jax.models.loading import load_model, load_tokenizer
from arenarl_jax.models.transformer import make_model
from arenarl_jax.rollout.agent_loop import CompileCounter, Rollout
from arenarl_jax.rollout.settings import RolloutSettings
from arenarl_jax.sampling.sampler import Sampler, SamplingSettings
from arenarl_jax.testing.rollout_fakes import Steered  # the model steered into tool calls, shared

QUERY = "Plan a three day trip to Lisbon for two people on a budget. Use the tools. ({k})"


class SleepyTools:
  """A tool source whose every call sleeps ``latency`` seconds (asyncio) and answers."""

  def __init__(self, latency: float):
    self.latency = latency

  def tools(self):
    return [{"name": "lookup", "description": "Looks something up.",
             "parameters": {"type": "object", "properties": {"q": {"type": "string"}}}}]

  async def call(self, name, arguments, *, timeout=None):
    start = time.perf_counter()
    await asyncio.sleep(self.latency)
    return base.ToolResult(f"{name}: 3 results for {arguments}",
                           latency_s=time.perf_counter() - start)


def main():
  p = argparse.ArgumentParser()
  p.add_argument("--model", default="smollm2", choices=("smollm2", "tiny"))
  p.add_argument("--prompts", type=int, default=2)
  p.add_argument("--group", type=int, default=4)
  p.add_argument("--new", type=int, default=48)
  p.add_argument("--cache-len", type=int, default=512)
  p.add_argument("--turns", type=int, default=2)
  p.add_argument("--latency", type=float, default=0.05)
  p.add_argument("--repeats", type=int, default=2)
  p.add_argument("--no-steer", action="store_true")
  args = p.parse_args()

  tok = load_tokenizer("smollm2")
  model = (load_model("smollm2")[1] if args.model == "smollm2"
           else make_model(PRESETS["tiny"], seed=0))
  if not args.no_steer:
    model = Steered(model, tok)
  sampler = Sampler(model, cache_len=args.cache_len)
  sampling = SamplingSettings(temperature=0.8, max_new_tokens=args.new, eos_ids=(tok.eos_id,))
  rollout = Rollout(sampler, tok, RolloutSettings(max_turns=args.turns), sampling)
  source = SleepyTools(args.latency)
  tasks = [base.Task(id=f"bench/{b}", env="bench", subtask="plan", query=QUERY.format(k=b))
           for b in range(args.prompts)]

  runs = []
  for k in range(args.repeats + 1):
    with CompileCounter() as compiles:
      batch = rollout.run(tasks, source, group_size=args.group, key=jax.random.key(k))
    s = batch.stats
    ratios = [(t / c, t, c) for t, c in zip(s["tool_phase_s"], s["slowest_call_s"]) if c > 0]
    worst = max(ratios, default=(0.0, 0.0, 0.0))
    run = {"tok_s": s["sampled_tokens"] / s["wall_s"], "tool_phase_s": worst[1],
           "slowest_call_s": worst[2], "host_frac": s["host_s"] / s["wall_s"],
           "wall_s": s["wall_s"], "compiles": compiles.count, "calls": s["tool_calls"],
           "turns": s["turns"], "valid_rate": s["valid_rate"]}
    print(("warm-up " if k == 0 else f"run {k}: ") + " ".join(
        f"{key}={v:.4g}" if isinstance(v, float) else f"{key}={v}" for key, v in run.items())
        + f" finish={s['finish']}")
    if k:
      runs.append(run)
  med = {key: statistics.median(r[key] for r in runs) for key in runs[0]}
  print(f"RESULT rollout_tok_s={med['tok_s']:.1f} tool_phase_s={med['tool_phase_s']:.4f} "
        f"slowest_call_s={med['slowest_call_s']:.4f} host_frac={med['host_frac']:.4f}")


if __name__ == "__main__":
  main()
