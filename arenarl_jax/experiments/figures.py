"""A study's figures: the arms' outcomes with their intervals, and the runs' learning curves."""
from __future__ import annotations

import math
import pathlib
from typing import Sequence

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402  (after choosing the headless backend)

from arenarl_jax.experiments import pooling  # noqa: E402
from arenarl_jax.experiments.record import OUTCOMES  # noqa: E402
from arenarl_jax.experiments.tables import LABELS  # noqa: E402

CURVE_KEYS = ("reward/mean", "verifier/met_rate", "verifier/solved_rate")
# No software version or date in the files: the same results draw the same bytes.
_METADATA = {"Software": None}


def _save(fig, path: pathlib.Path) -> None:
  fig.tight_layout()
  fig.savefig(path, dpi=100, metadata=_METADATA)
  plt.close(fig)


def arms(results: Sequence[dict], arm_names: Sequence[str], path: pathlib.Path,
         samples: int, seed: int) -> None:
  """Per outcome, each arm's end (dot, 95% interval) beside its start (open circle)."""
  fig, axes = plt.subplots(1, len(OUTCOMES), figsize=(4 * len(OUTCOMES), 3.4))
  for ax, metric in zip(axes, OUTCOMES):
    for x, arm in enumerate(arm_names):
      for when, style, dx in (("start", "o", -0.12), ("end", "s", 0.12)):
        iv = pooling.arm_interval(results, arm, metric, when, samples, seed)
        if math.isnan(iv.value):
          continue
        err = None if math.isnan(iv.low) else [[iv.value - iv.low], [iv.high - iv.value]]
        ax.errorbar([x + dx], [iv.value], yerr=err, fmt=style, capsize=4,
                    mfc="white" if when == "start" else None, color=f"C{x}",
                    label=when if x == 0 else None)
    ax.set_xticks(range(len(arm_names)), arm_names, rotation=20)
    ax.set_title(LABELS[metric])
    ax.grid(alpha=0.3)
  axes[0].legend(fontsize=8)
  fig.suptitle("start (open) and end (filled) per arm; 95% hierarchical bootstrap intervals",
               fontsize=9)
  _save(fig, path)


def curves(results: Sequence[dict], arm_names: Sequence[str], path: pathlib.Path) -> None:
  """Per-step training metrics of every run, one colour per arm."""
  fig, axes = plt.subplots(1, len(CURVE_KEYS), figsize=(4 * len(CURVE_KEYS), 3.2))
  for ax, key in zip(axes, CURVE_KEYS):
    for r in results:
      rows = [row for row in r["steps"] if key in row]
      if rows:
        color = f"C{list(arm_names).index(r['arm'])}"
        ax.plot([row["step"] for row in rows], [row[key] for row in rows], color=color,
                alpha=0.7, marker=".", label=f"{r['arm']} s{r['seed']}")
    ax.set_title(key)
    ax.set_xlabel("RL step")
    ax.grid(alpha=0.3)
  axes[0].legend(fontsize=7)
  _save(fig, path)
