"""The offline research environment: corpus build time, search quality and the expert's scores.

  .venv/bin/python benchmarks/research_env.py
  .venv/bin/python benchmarks/research_env.py --queries 200 --tasks 120

Builds the corpus from scratch (no cache) and the BM25 index, timing both; runs ``--queries``
known-item queries (each written from a random page without its name) and counts how often the
page is in the top 3; then scores the expert on the test tasks at error rates 0 / 0.2 / 0.5 with
the checker and the deep-research rubric's combined score, and the share of valid answers. Ends
with one line: ``RESULT corpus_build_s=... index_build_s=... pages=... known_item_top3=...
expert_score_e0=... expert_score_e02=... expert_score_e05=... valid_e0=...``. Timings on a
shared machine are noisy.
"""
from __future__ import annotations

import argparse
import time

import numpy as np

from arenarl_jax.text import messages
from arenarl_jax.envs.research import corpus as corpus_lib
from arenarl_jax.envs.research import environment, search, tasks
from arenarl_jax.judges import rubric as rubric_lib


def main() -> None:
  parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
  parser.add_argument("--queries", type=int, default=200)
  parser.add_argument("--tasks", type=int, default=120, help="test tasks scored per error rate")
  parser.add_argument("--seed", type=int, default=0)
  args = parser.parse_args()

  start = time.perf_counter()
  corpus = corpus_lib.build_corpus()
  build_s = time.perf_counter() - start
  start = time.perf_counter()
  index = search.make_index(corpus)
  index_s = time.perf_counter() - start
  print(f"corpus: {len(corpus)} pages from {len(corpus_lib.MODULES)} modules in {build_s:.2f} s "
        f"(digest {corpus.digest[:16]}), index in {index_s:.2f} s")

  rng = np.random.default_rng(args.seed)
  picks = rng.choice(len(corpus), min(args.queries, len(corpus)), replace=False)
  hits = 0
  for i in picks:
    page = corpus.pages[int(i)]
    hits += page.id in [p.id for p, _ in index.search(tasks.known_item_query(page, rng), 3)]
  top3 = hits / len(picks)
  print(f"known-item queries: {hits}/{len(picks)} pages in the top 3")

  env = environment.ResearchEnvironment(seed=args.seed, corpus=corpus)
  rubric = rubric_lib.load_rubric(env.rubric)
  test = [t for k in env.subtasks for t in env.tasks(f"test_{k}")][:args.tasks]
  scores, valid = {}, {}
  for rate in (0.0, 0.2, 0.5):
    combined, ok = [], 0
    for task in test:
      msgs = env.expert(task, rate, args.seed)
      s = env.checker(messages.trajectory_from_messages(msgs, metadata={"task_id": task.id}))
      combined.append(rubric.combine([s["path"][d.name] for d in rubric.path],
                                     [s["answer"][d.name] for d in rubric.answer])[2])
      ok += env.valid(msgs[-1]["content"], task)[0]
    scores[rate], valid[rate] = float(np.mean(combined)), ok / len(test)
    print(f"expert error rate {rate}: mean combined score {scores[rate]:.2f}, valid "
          f"{valid[rate]:.2f} ({len(test)} test tasks)")
  print(f"RESULT corpus_build_s={build_s:.2f} index_build_s={index_s:.2f} pages={len(corpus)} "
        f"known_item_top3={top3:.3f} expert_score_e0={scores[0.0]:.2f} "
        f"expert_score_e02={scores[0.2]:.2f} expert_score_e05={scores[0.5]:.2f} "
        f"valid_e0={valid[0.0]:.2f}")


if __name__ == "__main__":
  main()
