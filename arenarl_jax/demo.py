"""The end-to-end demo the main job runs until the training stages land.

Every stage that exists, on the embedded SmolLM2: a multi-turn rollout (``arenarl_jax.rollout``:
tool-using chat prompts, a group of G trajectories per prompt with row 0 greedy, toy tools run
concurrently, observations appended, a forced final answer) -> rank every group with a tournament
judged by the programmatic rubric judge (``demo_checker``) -> advantages. It trains nothing; it
shows the contracts working together and measures them.
"""
from __future__ import annotations

import json
import os
import time

import jax
import numpy as np

from arenarl_jax import tournament
from arenarl_jax.envs.base import Task
from arenarl_jax.envs.inprocess import InProcessToolSource, Tool
from arenarl_jax.judges import make_judge
from arenarl_jax.models.loading import load_model, load_tokenizer
from arenarl_jax.rollout import Rollout, RolloutSettings
from arenarl_jax.sampler import Sampler, SamplingSettings
from arenarl_jax.sampling.buckets import cache_size_ladder
from arenarl_jax.types import Trajectory

QUERIES = (
    "What's the weather in Paris tomorrow? Use the tools.",
    "Find a museum near the Eiffel Tower in Paris. Use the tools.",
)
TOOLS = (
    {"name": "get_weather", "description": "Weather forecast for a city.",
     "parameters": {"type": "object", "properties": {"city": {"type": "string"}},
                    "required": ["city"]}},
    {"name": "search_poi", "description": "Points of interest matching a keyword in a city.",
     "parameters": {"type": "object", "properties": {"keyword": {"type": "string"},
                                                     "city": {"type": "string"}},
                    "required": ["keyword", "city"]}},
)


def toy_tool_source() -> InProcessToolSource:
  """Deterministic stand-in tools (the real worlds live in ``arenarl_jax.envs``)."""
  def get_weather(city: str) -> str:
    return json.dumps({"city": city, "forecast": "sunny", "high_c": 21})

  def search_poi(keyword: str, city: str) -> str:
    del keyword, city
    return json.dumps({"results": [{"name": "Musée du quai Branly", "distance_m": 450}]})
  fns = {"get_weather": get_weather, "search_poi": search_poi}
  return InProcessToolSource([Tool(t["name"], t["description"], t["parameters"], fns[t["name"]])
                              for t in TOOLS])


def demo_checker(traj: Trajectory) -> dict[str, dict[str, float]]:
  """Toy ground truth on the travel rubric: valid known tool calls and a non-empty final answer."""
  known = {t["name"] for t in TOOLS}
  calls = [c for s in traj.steps for c in s.tool_calls]
  good = sum(c.name in known for c in calls)
  path = min(10.0, 3.0 + 3.5 * good) if calls else 1.0
  answer = traj.final_answer.strip()
  ans = 1.0 if not answer else min(10.0, 3.0 + len(answer) / 40)
  return {"path": {"breadth": path, "relevance": path, "detail": path},
          "answer": {"relevance": ans, "feasibility": ans, "details": ans, "clarity": ans}}


def run(config, workdir: str) -> dict:
  """Runs the demo, writes ``demo.jsonl`` to ``workdir`` and prints a RESULT line."""
  t0 = time.perf_counter()
  s = config.sampling
  _, model = load_model(config.model.source, cache_dir=config.model.cache_dir or None,
                        compute_dtype=config.model.compute_dtype,
                        attention=config.model.attention)
  tok = load_tokenizer(config.model.source)
  t_load = time.perf_counter() - t0

  queries = [QUERIES[b % len(QUERIES)] for b in range(config.rl.prompts_per_step)]
  tasks = [Task(id=f"demo/toy/{b:06d}", env="demo", subtask="toy", query=q)
           for b, q in enumerate(queries)]
  g = s.group_size
  # A one-shot demo pays every compile once: a coarse ladder (128, 256, ...) compiles fewer
  # programs than the default, which suits long training runs.
  sampler = Sampler(model, cache_len=s.cache_len,
                    cache_sizes=cache_size_ladder(s.cache_len, first=128, multiple=128))
  settings = SamplingSettings(temperature=s.temperature, top_p=s.top_p, top_k=s.top_k,
                              eos_ids=(tok.eos_id,), max_new_tokens=s.max_new_tokens)
  rollout = Rollout(sampler, tok, RolloutSettings.from_config(config), settings)

  t1 = time.perf_counter()
  batch = rollout.run(tasks, toy_tool_source(), group_size=g, key=jax.random.key(config.seed))
  groups = batch.trajectories
  generated = batch.stats["sampled_tokens"]
  t_sample = time.perf_counter() - t1

  # The rubric backend needs ground truth: here the toy checker; http/flax judges need none.
  extra = {"checker": demo_checker} if config.judge.backend == "rubric" else {}
  judge = make_judge(config.judge, **extra)
  t2 = time.perf_counter()
  results = tournament.rank(groups, judge, config.tournament.topology, config.seed,
                            failure_threshold=config.tournament.failure_threshold)
  t_rank = time.perf_counter() - t2

  path = os.path.join(workdir, "demo.jsonl")
  with open(path, "w") as f:
    for b, res in enumerate(results):
      print(f"\nprompt {b}: {queries[b]!r}  ({config.tournament.topology}, "
            f"{res.requests} judge requests)")
      for i, traj in enumerate(groups[b]):
        calls = [c.name for st in traj.steps for c in st.tool_calls]
        text = tok.decode(traj.tokens[traj.metadata["prompt_len"]:])
        print(f"  row {i}{' (anchor)' if i == 0 else ''}: rank {res.ranks[i]} "
              f"adv {res.advantages[i]:+.3f} {traj.finish_reason} calls {calls} "
              f"text {text[:70]!r}")
        f.write(json.dumps({"prompt": b, "row": i, "rank": int(res.ranks[i]),
                            "advantage": float(res.advantages[i]), "tool_calls": calls,
                            "finish_reason": traj.finish_reason, "text": text,
                            "messages": list(traj.messages)}, ensure_ascii=False) + "\n")
  calls_valid = np.mean([any(st.tool_calls for st in t.steps) for grp in groups for t in grp])
  metrics = {"load_s": round(t_load, 2), "sample_s": round(t_sample, 2),
             "gen_tok_s": round(generated / t_sample, 1), "rank_s": round(t_rank, 4),
             "tool_call_rate": round(float(calls_valid), 3),
             "valid_rate": round(batch.valid_rate, 3),
             "judge_requests": sum(r.requests for r in results)}
  print(f"\nwrote {path}")
  print("RESULT stage=demo " + " ".join(f"{k}={v}" for k, v in metrics.items()))
  return metrics
