"""The run's learning curves as one PNG: what shows learning, by the strict verifier.

Panels (each drawn when its data exist):
  - SFT loss (an in-job SFT stage only);
  - RL: requirements met by each step's training rollouts, the greedy anchors apart from the
    samples (``verifier/met_rate_greedy``, ``verifier/met_rate_sampled``; rl/experience.py);
  - RL: content requirements met, likewise (format requirements apart);
  - RL: the noise-free checker's score of the rollouts (what the judge's truth says);
  - eval: met and content met at every evaluation with their 95% intervals over tasks.
The training reward is not an evaluation; the last panel is.
"""
from __future__ import annotations

import json
import os
from typing import Sequence

# (file under the workdir, [(metric key, label)], panel title); eval rows read ``success``.
CURVES = (
    ("sft/metrics.jsonl", [("loss", "loss")], "SFT loss"),
    ("metrics.jsonl", [("verifier/met_rate_greedy", "greedy anchors"),
                       ("verifier/met_rate_sampled", "samples")], "RL rollouts: met"),
    ("metrics.jsonl", [("verifier/content_met_rate_greedy", "greedy anchors"),
                       ("verifier/content_met_rate_sampled", "samples")],
     "RL rollouts: content met"),
    ("metrics.jsonl", [("reward/checker_mean", "checker")], "RL: noise-free checker score"),
    ("eval/summary.jsonl", [("met", "met"), ("content_met", "content met")],
     "eval (greedy): met [95%]"),
)


def series(workdir: str, name: str, key: str) -> tuple[list[float], list[float], list[float],
                                                       list[float]]:
  """(steps, values, lows, highs) of ``key`` in ``<workdir>/<name>``; for the evaluation's
  summary, the overall estimate of ``success[key]`` and its interval (else lows = highs =
  values)."""
  path = os.path.join(workdir, name)
  xs, ys, lo, hi = [], [], [], []
  if not os.path.isfile(path):
    return xs, ys, lo, hi
  with open(path, encoding="utf-8") as f:
    for line in f:
      row = json.loads(line)
      if name.startswith("eval/"):
        e = (row.get("success", {}).get("overall") or {}).get(key)
        if not e:
          continue
        value, low, high = e["value"], e["low"], e["high"]
      else:
        value = row.get(key)
        if value is None:
          continue
        low = high = value
      xs.append(float(row["step"]))
      ys.append(float(value))
      lo.append(float(low))
      hi.append(float(high))
  return xs, ys, lo, hi


def plot(workdir: str, curves: Sequence = CURVES, filename: str = "curves.png") -> str | None:
  """Writes ``<workdir>/<filename>`` with one panel per curve that has data; returns its path."""
  import matplotlib  # pylint: disable=import-outside-toplevel
  matplotlib.use("Agg")
  import matplotlib.pyplot as plt  # pylint: disable=import-outside-toplevel
  panels = []
  for name, keys, title in curves:
    lines = [(label, *series(workdir, name, key)) for key, label in keys]
    lines = [ln for ln in lines if ln[1]]
    if lines:
      panels.append((title, lines))
  if not panels:
    return None
  cols = min(3, len(panels))
  rows = -(-len(panels) // cols)
  fig, axes = plt.subplots(rows, cols, figsize=(4.5 * cols, 3.2 * rows), squeeze=False)
  for ax, (title, lines) in zip(axes.flat, panels):
    for label, xs, ys, lo, hi in lines:
      if any(l != y or h != y for y, l, h in zip(ys, lo, hi)):
        ax.errorbar(xs, ys, yerr=[[y - l for y, l in zip(ys, lo)],
                                  [h - y for y, h in zip(ys, hi)]], marker="o", capsize=3,
                    label=label)
      else:
        ax.plot(xs, ys, marker="o" if len(xs) < 30 else None, label=label)
    if len(lines) > 1:
      ax.legend(fontsize=8)
    ax.set_title(title, fontsize=10)
    ax.set_xlabel("step")
  for ax in list(axes.flat)[len(panels):]:
    ax.axis("off")
  fig.tight_layout()
  path = os.path.join(workdir, filename)
  fig.savefig(path, dpi=80)
  plt.close(fig)
  return path
