"""The RL step's groups as jsonl: trajectories, standing, advantages and the tournament's match
log with the judge's per-dimension scores (``<workdir>/rollouts/step_<k>.jsonl``, written at every
evaluation step, never overwritten)."""
from __future__ import annotations

import json
from typing import Any, Sequence

import jax
import numpy as np

from arenarl_jax import jsonl, types
from arenarl_jax import tournament
from arenarl_jax.tournament import diagnostics

ROLLOUTS_DIR = "rollouts"


def group_record(step: int, b: int, group: Sequence[Any], adv_G: np.ndarray,
                 reward_G: np.ndarray, result: Any = None, topology: str = "",
                 mask_G: np.ndarray | None = None) -> dict[str, Any]:
  """One group of an RL step as a JSON-able record: its task, trajectories (conversation,
  finish, validity, metadata, ``ranked``: whether it trains), rewards, advantages and, for a
  tournament, the standing and the match log (scores, failures, requests and the judge's
  ``detail``: per-dimension scores). ``mask_G`` is the advantage source's loss mask (0 =
  unranked); without it a trajectory's ``metadata["ranked"]`` (default True) decides."""
  first = group[0]
  if mask_G is None:
    mask_G = [bool(t.metadata.get("ranked", True)) for t in group]
  rows = [{"index": g, "greedy": bool(t.metadata.get("greedy", g == 0)),
           "ranked": bool(mask_G[g] > 0),
           "finish_reason": t.finish_reason, "valid": t.finish_reason == "answer",
           "sampled_tokens": int(np.sum(t.loss_mask)) if t.loss_mask is not None else None,
           "tokens": None if t.tokens is None else int(len(t.tokens)),
           "reward": float(reward_G[g]), "advantage": float(adv_G[g]),
           "messages": list(t.messages), "metadata": dict(t.metadata)}
          for g, t in enumerate(group)]
  out = {"kind": "group", "step": int(step), "group": int(b),
         "task_id": first.metadata.get("task_id"), "subtask": types.subtask_of(first),
         "query": first.query, "trajectories": rows}
  if result is not None:
    out.update({"topology": topology, "order": list(result.order),
                "ranks": result.ranks, "base_rewards": result.base_rewards,
                "ranked": result.ranked,
                "requests": result.requests, "failures": result.failures,
                "matches": [{"round": result.rounds[k] if result.rounds else None,
                             "i": m.i, "j": m.j, "score_p": r.score_p, "score_q": r.score_q,
                             "ok": r.ok, "error": r.error, "requests": r.requests,
                             "detail": r.detail} for k, (m, r) in enumerate(result.matches)]})
    if tournament.TOPOLOGIES[topology].anchor_seeded:
      out["seeding_tau"] = diagnostics.seeding_tau(result)
  return jsonl.jsonable(out)


def write_rollouts(directory: str, step: int, groups: Sequence[Sequence[Any]], adv_BG: np.ndarray,
                   reward_BG: np.ndarray, results: Sequence[Any] | None = None, *,
                   topology: str = "", first_group: int = 0,
                   mask_BG: np.ndarray | None = None) -> str:
  """Writes ``<directory>/step_<step:08d>.jsonl`` (``_p<process>`` on a multi-process run; then
  ``_1``, ``_2``, ... when it exists: never overwritten), one ``group_record`` per line; groups are
  numbered from ``first_group``, this host's first group in the step); ``mask_BG`` is the
  advantage source's loss mask (``group_record``)."""
  name = f"step_{int(step):08d}"
  if jax.process_count() > 1:
    name += f"_p{jax.process_index()}"
  f, path = jsonl.create_jsonl(directory, name)
  with f:
    for b, group in enumerate(groups):
      rec = group_record(step, first_group + b, group, adv_BG[b], reward_BG[b],
                         None if results is None else results[b], topology,
                         None if mask_BG is None else mask_BG[b])
      f.write(json.dumps(rec, ensure_ascii=False) + "\n")
  return path
