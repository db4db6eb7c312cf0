"""The end-to-end demo the main job runs until the training stages land.

Every stage that exists, on the embedded SmolLM2: render tool-using chat prompts -> sample a group of
G answers per prompt (row 0 greedy) -> parse tool calls -> run toy tools and ``extend`` the KV cache
with their results -> sample the final answers -> rank every group with a tournament judged by the
programmatic rubric judge (``demo_checker``) -> advantages. It trains nothing; it shows the
contracts working together and measures them.
"""
from __future__ import annotations

import json
import os
import time

import jax
import numpy as np

from arenarl_jax import chat_format, tool_calls, tournament
from arenarl_jax.judges import make_judge
from arenarl_jax.models.loading import load_model, load_tokenizer
from arenarl_jax.sampler import Sampler, SamplingSettings, finish_reasons, token_lists
from arenarl_jax.sampling.buckets import cache_size_ladder
from arenarl_jax.types import Step, Trajectory

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


def run_toy_tool(call) -> str:
  """Deterministic stand-in observations (real environments arrive with the envs issue)."""
  args = call.arguments
  if call.name == "get_weather":
    return json.dumps({"city": args.get("city", "?"), "forecast": "sunny", "high_c": 21})
  if call.name == "search_poi":
    return json.dumps({"results": [{"name": "Musée du quai Branly", "distance_m": 450}]})
  return json.dumps({"error": f"unknown tool {call.name!r}"})


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
                        attention=config.model.attention)
  tok = load_tokenizer(config.model.source)
  t_load = time.perf_counter() - t0

  queries = [QUERIES[b % len(QUERIES)] for b in range(config.rl.prompts_per_step)]
  prompts = [tok.encode(chat_format.render_messages(
      [{"role": "user", "content": q}], tools=TOOLS, add_generation_prompt=True))
             for q in queries]
  g = s.group_size
  # A one-shot demo pays every compile once: a coarse ladder (128, 256, ...) compiles fewer
  # programs than the default, which suits long training runs.
  sampler = Sampler(model, cache_len=s.cache_len,
                    cache_sizes=cache_size_ladder(s.cache_len, first=128, multiple=128))
  settings = SamplingSettings(temperature=s.temperature, top_p=s.top_p, top_k=s.top_k,
                              eos_ids=(tok.eos_id,), max_new_tokens=s.max_new_tokens)
  key = jax.random.key(config.seed)

  t1 = time.perf_counter()
  steps: list[list[Step]] = [[] for _ in range(len(queries) * g)]
  texts = [""] * len(steps)
  state = sampler.prefill(prompts, group_size=g)
  generated = 0
  for turn in range(s.max_turns + 1):
    key, sub = jax.random.split(key)
    out, state = sampler.decode(state, settings, sub)
    rows = token_lists(out)
    generated += sum(map(len, rows))
    reasons = finish_reasons(out)
    observations = [[] for _ in rows]
    for r, ids in enumerate(rows):
      if not ids:
        continue
      texts[r] += tok.decode(ids)
      parsed = tool_calls.parse_turn(tok.decode(ids))
      results = [run_toy_tool(c) for c in parsed.tool_calls]
      steps[r].append(tool_calls.to_step(parsed, results))
      if results and turn < s.max_turns and reasons[r] in ("eos", "stop"):
        # The row ended its turn with <|im_end|> (eos): append the observation turn and continue.
        observations[r] = tok.encode(chat_format.render_tool_turn(results, close_previous=False))
    if not any(observations):
      break
    state = state.replace(done_N=jax.numpy.asarray([not o for o in observations]))
    state = sampler.extend(state, observations)
  t_sample = time.perf_counter() - t1

  groups = [[Trajectory(query=q, steps=tuple(steps[b * g + i])) for i in range(g)]
            for b, q in enumerate(queries)]
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
      for i in range(g):
        r = b * g + i
        calls = [c.name for st in steps[r] for c in st.tool_calls]
        print(f"  row {i}{' (anchor)' if i == 0 else ''}: rank {res.ranks[i]} "
              f"adv {res.advantages[i]:+.3f} calls {calls} text {texts[r][:70]!r}")
        f.write(json.dumps({"prompt": b, "row": i, "rank": int(res.ranks[i]),
                            "advantage": float(res.advantages[i]), "tool_calls": calls,
                            "text": texts[r]}) + "\n")
  calls_valid = np.mean([any(st.tool_calls for st in row) for row in steps])
  metrics = {"load_s": round(t_load, 2), "sample_s": round(t_sample, 2),
             "gen_tok_s": round(generated / t_sample, 1), "rank_s": round(t_rank, 4),
             "tool_call_rate": round(float(calls_valid), 3),
             "judge_requests": sum(r.requests for r in results)}
  print(f"\nwrote {path}")
  print("RESULT stage=demo " + " ".join(f"{k}={v}" for k, v in metrics.items()))
  return metrics
