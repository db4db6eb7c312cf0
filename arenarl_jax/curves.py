"""The run's learning curves as one PNG: SFT loss, RL rewards and evaluation win rates."""
from __future__ import annotations

import json
import os
from typing import Sequence

CURVES = (  # (file under the workdir, metric key, panel title)
    ("sft/metrics.jsonl", "loss", "SFT loss"),
    ("metrics.jsonl", "reward/checker_mean", "RL: noise-free checker score"),
    ("metrics.jsonl", "advantage/zero_groups", "RL: groups with all-zero advantages"),
    ("metrics.jsonl", "rollout/tool_calls_per_trajectory", "RL: tool calls per trajectory"),
    ("eval/summary.jsonl", "reference", "eval: win rate vs reference"),
    ("eval/summary.jsonl", "sft", "eval: win rate vs SFT"),
)


def _series(workdir: str, name: str, key: str) -> tuple[list[float], list[float]]:
  path = os.path.join(workdir, name)
  if not os.path.isfile(path):
    return [], []
  xs, ys = [], []
  with open(path, encoding="utf-8") as f:
    for line in f:
      row = json.loads(line)
      if name.startswith("eval/"):
        rate = row.get("win_rates", {}).get(key, {}).get("overall", {}).get("rate")
        value = rate
      else:
        value = row.get(key)
      if value is not None:
        xs.append(float(row["step"]))
        ys.append(float(value))
  return xs, ys


def plot(workdir: str, curves: Sequence[tuple[str, str, str]] = CURVES,
         filename: str = "curves.png") -> str | None:
  """Writes ``<workdir>/<filename>`` with one panel per curve that has data; returns its path."""
  import matplotlib  # pylint: disable=import-outside-toplevel
  matplotlib.use("Agg")
  import matplotlib.pyplot as plt  # pylint: disable=import-outside-toplevel
  panels = [(title, *_series(workdir, name, key)) for name, key, title in curves]
  panels = [p for p in panels if p[1]]
  if not panels:
    return None
  cols = min(3, len(panels))
  rows = -(-len(panels) // cols)
  fig, axes = plt.subplots(rows, cols, figsize=(4.5 * cols, 3.2 * rows), squeeze=False)
  for ax, (title, xs, ys) in zip(axes.flat, panels):
    ax.plot(xs, ys, marker="o" if len(xs) < 30 else None)
    ax.set_title(title, fontsize=10)
    ax.set_xlabel("step")
  for ax in list(axes.flat)[len(panels):]:
    ax.axis("off")
  fig.tight_layout()
  path = os.path.join(workdir, filename)
  fig.savefig(path, dpi=80)
  plt.close(fig)
  return path
