"""How a judge's verdicts on pairs of known order compare with the truth: per-pair values, their
means with 95% bootstrap intervals per quality-gap bin, the checks' verdicts, the README table and
the figure (``agreement.py`` runs the judges; this module only reads their result rows).

A result row is one pair (P, Q) of one judge: ``checker`` (the noise-free combined scores of P and
Q; never equal), ``length`` (their final answers' characters), ``bin`` (the quality-gap bin),
``forward`` = (Agent_A, Agent_B) scores with P shown first, ``backward`` with Q shown first (both
None when the match failed), and ``point`` = the pointwise scores of P and Q (None where failed).
Per pair, with ``truth`` = +1 when P is the better one and -1 when Q is:

  agreement          the final verdict (score_p = fwd.A + bwd.B against score_q = fwd.B + bwd.A,
                     as the tournament combines the orders) picks the better one: 1; a tie: 0.5
  order_flip         the two orders name different winners (P, Q or a tie): 1
  position_bias      (first-shown won in forward + first-shown won in backward) / 2 - 0.5, a tie
                     counting half: +0.5 for a judge that always picks the first-shown
  pairwise_tie       the final verdict is a tie: 1
  pointwise_tie      the two pointwise scores are equal (discriminative collapse): 1
  pointwise_agreement  the higher pointwise score is the better one's: 1; equal: 0.5

and over pairs ``length_corr``: Pearson's correlation of P's final outcome (1, 0.5, 0) with the
answer-length difference len(P) - len(Q) (point-biserial when there are no ties; unchanged by
swapping P and Q). A failed match or score leaves that pair out of the metrics that need it and is
counted (``failed_pairwise``, ``failed_pointwise``). Intervals: the percentile bootstrap over
pairs (``hierarchical.interval`` with one seed is ``eval/bootstrap.py``'s; every pair comes from
its own task, so pairs are independent draws).
"""
from __future__ import annotations

import csv
import dataclasses
import io
import math
import pathlib
import warnings
from typing import Any, Mapping, Sequence

import numpy as np

from arenarl_jax.eval import bootstrap
from arenarl_jax.experiments import claims, hierarchical

TOL = 1e-6  # scores this close are equal
METRICS = ("agreement", "order_flip", "position_bias", "pairwise_tie", "pointwise_tie",
           "pointwise_agreement")
LABELS = {"agreement": "agreement", "order_flip": "order flips", "position_bias": "position bias",
          "length_corr": "length corr.", "pointwise_tie": "pointwise ties",
          "pairwise_tie": "pairwise ties", "pointwise_agreement": "pointwise agreement"}
ALL = "all"
Interval = hierarchical.Interval


def side(x: float, y: float) -> int:
  """+1 when ``x`` wins, -1 when ``y`` wins, 0 for a tie."""
  return 0 if abs(x - y) <= TOL else 1 if x > y else -1


def credit(outcome: int, truth: int) -> float:
  """1 when ``outcome`` names ``truth``'s side, 0.5 for a tie, 0 otherwise."""
  return 1.0 if outcome == truth else 0.5 if outcome == 0 else 0.0


def pair_values(row: Mapping[str, Any]) -> dict[str, float]:
  """The per-pair values above (NaN where the judge failed), plus ``won_p`` (P's outcome)."""
  truth = side(*row["checker"])
  if truth == 0:
    raise ValueError(f"pair {row.get('pair')!r}: the checker ties it (such pairs are dropped)")
  out = dict.fromkeys(METRICS + ("won_p",), math.nan)
  if row.get("forward") is not None and row.get("backward") is not None:
    (fa, fb), (ba, bb) = row["forward"], row["backward"]
    final = side(fa + bb, fb + ba)
    out.update(agreement=credit(final, truth), won_p=credit(final, 1),
               order_flip=float(side(fa, fb) != side(bb, ba)),
               position_bias=(credit(side(fa, fb), 1) + credit(side(ba, bb), 1)) / 2 - 0.5,
               pairwise_tie=float(final == 0))
  point = row.get("point")
  if point is not None and None not in point:
    s = side(*point)
    out.update(pointwise_tie=float(s == 0), pointwise_agreement=credit(s, truth))
  return out


def pearson_R(x_RN: np.ndarray, y_RN: np.ndarray) -> np.ndarray:
  """Pearson's correlation of each row pair (NaN where either row is constant)."""
  x = x_RN - x_RN.mean(axis=-1, keepdims=True)
  y = y_RN - y_RN.mean(axis=-1, keepdims=True)
  den = np.sqrt((x * x).sum(-1) * (y * y).sum(-1))
  with np.errstate(invalid="ignore", divide="ignore"):
    return np.where(den > 1e-12, (x * y).sum(-1) / np.where(den > 0, den, 1.0), np.nan)


def length_corr(rows: Sequence[Mapping[str, Any]], samples: int, seed: int) -> Interval:
  """``length_corr`` over ``rows`` with its bootstrap interval (pairs resampled)."""
  won = np.array([pair_values(r)["won_p"] for r in rows], np.float64)
  diff = np.array([r["length"][0] - r["length"][1] for r in rows], np.float64)
  keep = np.isfinite(won)
  won, diff = won[keep], diff[keep]
  n = int(won.size)
  if n < 3:
    return Interval(math.nan, math.nan, math.nan, 1, n)
  value = float(pearson_R(won[None], diff[None])[0])
  idx = bootstrap.resamples(n, samples, seed)
  with warnings.catch_warnings():
    warnings.simplefilter("ignore", RuntimeWarning)  # a resample of constant outcomes
    low, high = bootstrap.percentile_interval(pearson_R(won[idx], diff[idx]))
  return Interval(value, low, high, 1, n)


def metric_interval(rows: Sequence[Mapping[str, Any]], metric: str, samples: int, seed: int,
                    minus: str | float = 0.0) -> Interval:
  """The mean of ``metric`` over ``rows`` (NaN values left out) minus ``minus`` (a constant, or
  another metric, pair by pair), with its bootstrap interval over pairs."""
  values = [pair_values(r) for r in rows]
  x = np.array([v[metric] for v in values], np.float64)
  x = x - (np.array([v[minus] for v in values], np.float64) if isinstance(minus, str)
           else float(minus))
  x = x[np.isfinite(x)]
  if x.size == 0:
    return Interval(math.nan, math.nan, math.nan, 1, 0)
  return hierarchical.interval(x[None, :], samples, seed)


def bins_of(rows: Sequence[Mapping[str, Any]], order: Sequence[str]) -> list[str]:
  """The bins of ``order`` that ``rows`` hold, then ``ALL``."""
  present = {r["bin"] for r in rows}
  return [b for b in order if b in present] + [ALL]


def summary(rows: Sequence[Mapping[str, Any]], bin_order: Sequence[str], samples: int = 2000,
            seed: int = 0) -> list[dict[str, Any]]:
  """Per bin (then ``ALL``): pairs, failures, every metric's Interval and ``length_corr``."""
  out = []
  for b in bins_of(rows, bin_order):
    sub = [r for r in rows if b == ALL or r["bin"] == b]
    entry: dict[str, Any] = {
        "bin": b, "pairs": len(sub),
        "failed_pairwise": sum(r.get("forward") is None for r in sub),
        "failed_pointwise": sum(r.get("point") is None or None in r["point"] for r in sub)}
    for m in METRICS:
      entry[m] = metric_interval(sub, m, samples, seed)
    entry["length_corr"] = length_corr(sub, samples, seed)
    out.append(entry)
  return out


@dataclasses.dataclass(frozen=True)
class Check:
  """A statement about one judge: ``metric`` minus ``versus`` (a constant or another metric, pair
  by pair) has the sign of ``direction``, over the pairs of ``gap_bin``; judged by the harness's
  verdict rule (``claims.verdict``)."""

  text: str
  judge: str
  metric: str
  versus: str | float = 0.0
  direction: int = 1
  gap_bin: str = ALL
  source: str = ""

  def __post_init__(self):
    if self.metric not in METRICS or (isinstance(self.versus, str) and self.versus not in METRICS):
      raise ValueError(f"check {self.text!r}: metric and versus must be constants or among "
                       f"{METRICS}, got {self.metric!r} and {self.versus!r}")
    if self.direction not in (1, -1):
      raise ValueError(f"check {self.text!r}: direction must be +1 or -1")


def check(c: Check, rows_by_judge: Mapping[str, Sequence[Mapping[str, Any]]], samples: int = 2000,
          seed: int = 0) -> tuple[Interval, str]:
  """The check's gap and verdict; KeyError when its judge has no result."""
  rows = [r for r in rows_by_judge[c.judge] if c.gap_bin == ALL or r["bin"] == c.gap_bin]
  gap = metric_interval(rows, c.metric, samples, seed, c.versus)
  return gap, claims.verdict(gap, c.direction)


# ------------------------------------------------------------------------------ report
def summary_csv(results: Sequence[Mapping[str, Any]], bin_order: Sequence[str], samples: int,
                seed: int) -> str:
  """One row per (judge, bin): counts, each metric's value and interval."""
  names = [*METRICS, "length_corr"]
  header = ["judge", "bin", "pairs", "failed_pairwise", "failed_pointwise"] + [
      f"{m}{s}" for m in names for s in ("", "_low", "_high")]
  buf = io.StringIO()
  w = csv.DictWriter(buf, header, lineterminator="\n")
  w.writeheader()
  for r in results:
    for s in summary(r["rows"], bin_order, samples, seed) if not r.get("skipped") else ():
      row = {"judge": r["judge"], **{k: s[k] for k in header[1:5]}}
      for m in names:
        iv = s[m]
        row.update({m: f"{iv.value:.4f}", f"{m}_low": f"{iv.low:.4f}",
                    f"{m}_high": f"{iv.high:.4f}"})
      w.writerow(row)
  return buf.getvalue()


def header(command: str, judges: int, pairs: Sequence[Mapping[str, Any]],
           results: Sequence[Mapping[str, Any]], samples: int) -> str:
  """The block's first paragraph: the command, the pair set, each judge's time, the code."""
  counts: dict[str, dict[str, int]] = {}
  for p in pairs:
    counts.setdefault(p["subtask"], {}).setdefault(p["bin"], 0)
    counts[p["subtask"]][p["bin"]] += 1
  per = "; ".join(f"{s}: " + ", ".join(f"{n} {b}" for b, n in c.items())
                  for s, c in counts.items())
  commits = sorted({r["provenance"]["commit"][:10] + (" (dirty)" if r["provenance"]["dirty"]
                                                      else "") for r in results})
  times = ", ".join(f"{r['label']} {r['provenance']['wall_s']:.0f} s" for r in results)
  return (f"Generated by `{command}` from {len(results)} of {judges} result files (code "
          f"{', '.join(commits) or '-'}). **{len(pairs)} pairs** ({per}); wall time per judge: "
          f"{times or '-'}; {sum(r['provenance']['wall_s'] for r in results):.0f} s in all. "
          f"Means over pairs [95% bootstrap interval over pairs, {samples} resamples].")


def result_line(results: Sequence[Mapping[str, Any]], pairs: int, samples: int, seed: int,
                command_s: float) -> str:
  """``RESULT pairs=... judges=... agreement_<judge>=... flips_<judge>=... failed_<judge>=...
  wall_s=... command_s=...`` (``wall_s``: the judges' times from their result files)."""
  done = [r for r in results if not r.get("skipped")]
  keys = [f"pairs={pairs}", f"judges={len(done)}"]
  for r in results:
    if r.get("skipped"):
      keys.append(f"skipped_{r['judge']}=1")
      continue
    s = summary(r["rows"], [], samples, seed)[-1]
    keys += [f"agreement_{r['judge']}={s['agreement'].value:.4g}",
             f"flips_{r['judge']}={s['order_flip'].value:.4g}",
             f"failed_{r['judge']}={s['failed_pairwise'] + s['failed_pointwise']}"]
  wall = sum(r["provenance"]["wall_s"] for r in results)
  return "RESULT " + " ".join(keys + [f"wall_s={wall:.1f}", f"command_s={command_s:.1f}"])


def cell(iv: Interval, signed: bool = False) -> str:
  """``value [low, high]`` (3 decimals; n/a where undefined)."""
  def num(x):
    return "n/a" if x is None or math.isnan(x) else f"{x:+.3f}" if signed else f"{x:.3f}"
  if math.isnan(iv.value):
    return "n/a"
  return f"{num(iv.value)} [{num(iv.low)}, {num(iv.high)}]"


TABLE = (("agreement", False), ("order_flip", False), ("position_bias", True),
         ("length_corr", True), ("pointwise_tie", False), ("pointwise_agreement", False))


def markdown(results: Sequence[Mapping[str, Any]], bin_order: Sequence[str],
             checks: Sequence[Check], samples: int, seed: int, header: str,
             figures: Sequence[str] = ()) -> str:
  """The README block: ``header``, one row per (judge, bin), the checks, the figures."""
  head = ["judge", "gap bin", "pairs", "failed (pairwise / pointwise)"] + [
      LABELS[m] for m, _ in TABLE]
  lines = [header, "", "| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
  for r in results:
    if r.get("skipped"):
      lines.append(f"| {r['label']} | - | - | - | skipped: {r['skipped']} |" + " |" * (
          len(TABLE) - 1))
      continue
    for s in summary(r["rows"], bin_order, samples, seed):
      lines.append(f"| {r['label']} | {s['bin']} | {s['pairs']} | {s['failed_pairwise']} / "
                   f"{s['failed_pointwise']} | " + " | ".join(cell(s[m], sg) for m, sg in TABLE)
                   + " |")
  if checks:
    rows = {r["judge"]: r["rows"] for r in results if not r.get("skipped")}
    lines += ["", "| check | where it comes from | gap bin | gap [95%] | pairs | verdict |",
              "|---|---|---|---|---|---|"]
    for c in checks:
      try:
        gap, word = check(c, rows, samples, seed)
        cells = f"{cell(gap, True)} | {gap.tasks} | **{word}**"
      except KeyError:
        cells = "- | - | not run yet"
      lines.append(f"| {c.text} | {c.source or '-'} | {c.gap_bin} | {cells} |")
  lines += [""] + [f"![{pathlib.Path(f).stem}]({f})" for f in figures]
  return "\n".join(lines).rstrip()


def figure(results: Sequence[Mapping[str, Any]], bin_order: Sequence[str], path: pathlib.Path,
           samples: int, seed: int) -> None:
  """Per metric of ``TABLE``, each judge's value per gap bin with its 95% interval."""
  import matplotlib  # pylint: disable=g-import-not-at-top
  matplotlib.use("Agg")
  import matplotlib.pyplot as plt  # pylint: disable=g-import-not-at-top
  done = [r for r in results if not r.get("skipped")]
  fig, axes = plt.subplots(2, (len(TABLE) + 1) // 2, figsize=(11, 6.4))
  axes = list(axes.flat)
  width = 0.6 / max(len(done), 1)
  for k, r in enumerate(done):
    stats = summary(r["rows"], bin_order, samples, seed)
    for ax, (m, _) in zip(axes, TABLE):
      xs, ys, err = [], [], [[], []]
      for x, s in enumerate(stats):
        iv = s[m]
        if math.isnan(iv.value):
          continue
        xs.append(x + width * (k - (len(done) - 1) / 2))
        ys.append(iv.value)
        lo, hi = (iv.value, iv.value) if math.isnan(iv.low) else (iv.low, iv.high)
        err[0].append(iv.value - lo)
        err[1].append(hi - iv.value)
      ax.errorbar(xs, ys, yerr=err, fmt="o", capsize=3, color=f"C{k}", label=r["label"])
  names = bins_of([row for r in done for row in r["rows"]], bin_order)
  for ax, (m, _) in zip(axes, TABLE):
    ax.set_xticks(range(len(names)), names)
    ax.set_xlim(-0.5, len(names) - 0.5)
    ax.set_title(LABELS[m])
    ax.grid(alpha=0.3)
  if done:
    fig.legend(*axes[0].get_legend_handles_labels(), loc="lower center", ncol=len(done),
               fontsize=8)
  fig.suptitle("each judge against the noise-free checker, per quality gap; 95% bootstrap "
               "intervals over pairs", fontsize=10)
  fig.tight_layout(rect=(0, 0.05, 1, 1))
  fig.savefig(path, dpi=100, metadata={"Software": None})
  plt.close(fig)
