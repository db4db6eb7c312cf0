"""Does RL at the quickstart's own settings learn where learning is possible?

  .venv/bin/python benchmarks/closed_loop.py                       # the quickstart's RL settings
  .venv/bin/python benchmarks/closed_loop.py --settings=test       # the suite's (as the test)
  .venv/bin/python benchmarks/closed_loop.py --steps=20 --seeds=0  # a short look

Twin runs in the lookup world (``arenarl_jax/testing/closed_loop.py``: a 2-layer model, a value
that only reading the tool's result answers, a warm start that reads it some of the time), one on
the judge's advantages and one with them permuted within each group, for every seed. The
quickstart's RL keys (``configs/quickstart.py``: lr 5e-5 constant, KL 0.02, the greedy anchor
trained, temperature 0.8, groups of 4, 4 prompts a step, 2 minibatches) move a model far more
slowly than the suite's test settings, so this runs 600 steps, about 2 minutes on 2 cores; the
suite's ``tests/rl/test_closed_loop.py`` runs the test settings.

Prints each run's curve (solved rate of held-out rollouts by step) and ends with
``RESULT settings=... steps=... gain_s<seed>=... permute_change_s<seed>=...
margin_min=... learned=...``: ``gain`` is the learning run's end minus its start,
``permute_change`` the permuted twin's, ``margin_min`` the smallest (over seeds) end of the
learning run minus the end of its twin; ``learned`` is 1 when every gain is at least 0.1 and
every permuted twin ends no higher than it started.
"""
import argparse
import dataclasses
import json
import os
import tempfile
import time

os.environ.setdefault("XLA_FLAGS", "")  # one CPU device, XLA's default flags

from arenarl_jax.models import backend  # noqa: E402  pylint: disable=wrong-import-position
from arenarl_jax.testing import closed_loop  # noqa: E402  pylint: disable=wrong-import-position


def summary(curves: dict, seeds) -> dict:
  """The RESULT keys of ``curves`` ({"none_s0": [(step, rate), ...], "permute_s0": ...})."""
  out, margins, learned = {}, [], True
  for seed in seeds:
    run, twin = curves[f"none_s{seed}"], curves[f"permute_s{seed}"]
    gain, change = run[-1][1] - run[0][1], twin[-1][1] - twin[0][1]
    out[f"gain_s{seed}"], out[f"permute_change_s{seed}"] = gain, change
    margins.append(run[-1][1] - twin[-1][1])
    learned &= gain >= 0.1 and change <= 0
  out["margin_min"], out["learned"] = min(margins), int(learned)
  return out


def main(argv=None):
  parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
  parser.add_argument("--settings", default="quickstart", choices=sorted(closed_loop.SETTINGS))
  parser.add_argument("--steps", type=int, default=0, help="RL steps (0: the settings' own)")
  parser.add_argument("--seeds", default="0,1")
  parser.add_argument("--out", default="", help="also write the curves here (JSON)")
  args = parser.parse_args(argv)
  settings = closed_loop.SETTINGS[args.settings]
  if args.steps:
    settings = dataclasses.replace(
        settings, steps=args.steps, eval_every=max(args.steps // 6, 1))
  seeds = [int(s) for s in args.seeds.split(",")]
  t0 = time.perf_counter()
  with tempfile.TemporaryDirectory() as workdir:
    curves = closed_loop.run_twins(settings, seeds, workdir)
  wall = time.perf_counter() - t0
  for name, curve in curves.items():
    print(f"{name}: " + " ".join(f"{s}:{r:.3f}" for s, r in curve))
  if args.out:
    with open(args.out, "w", encoding="utf-8") as f:
      json.dump(curves, f)
  result = summary(curves, seeds)
  print(f"{len(curves)} runs in {wall:.0f} s on {backend.cpu_kind(amx=True)}")
  keys = " ".join(f"{k}={v:.4f}" if isinstance(v, float) else f"{k}={v}"
                  for k, v in result.items())
  print(f"RESULT settings={args.settings} steps={settings.steps} {keys} wall_s={wall:.1f} "
        f"cpu={backend.cpu_kind(amx=True)}")
  return result


if __name__ == "__main__":
  main()
