"""How far each judge can be trusted: its verdicts on travel pairs whose better member is known.

  python -m arenarl_jax.experiments.agreement experiments/judge_agreement [--preset=smoke|full]
      [--out DIR] [--limit N] [--tables-only]

**Pairs.** A pair is one validation task (``valid_<subtask>``, never a test task) and two error
rates a < b of the travel expert. Both conversations come from the same generator, seeded by the
task (``records.task_rng(seed, task id)``, as the data pipeline seeds the expert), so the error
sets nest: the rate-b trajectory is the rate-a one with the extra errors that rate adds. The
noise-free checker (``env.checker``, combined by the rubric as a pointwise score) says which is
better; pairs it ties are dropped. The **quality gap** is the difference of the two combined
scores (0-10), binned by the study's upper bounds (e.g. small <= 1, medium <= 2.5, large). Each
task gives at most one pair, so pairs are independent draws. Each bin's pairs are spread evenly
over the subtasks; per subtask, tasks are taken in order and each one fills the bin that still
needs the most pairs among those it has a rate pair for (one chosen at random); which member is
shown first in the forward order is a fair coin. All from the study's seed: the set is fixed.

**Judges** (``JudgeSpec``): ``rubric`` (the checker with a noise model), ``flax`` (the local Flax
judge) and ``http`` (the HTTP judge against a llama.cpp server started on 127.0.0.1). Each judges
every pair in both orders (one match) and scores both trajectories alone (pointwise);
``agreement_metrics.py`` defines what is measured from that.

**Layout** under the output folder (``--out``; the study folder for ``full``, whose results are
committed, ``<study>/work/<preset>`` otherwise): ``results/<judge>.json`` per judge that finished
(written atomically; a rerun skips it, so a stopped run resumes with the next judge; a judge that
could not start is recorded with ``skipped`` and tried again on the next run), then from those
files alone ``summary.csv``, ``agreement.png`` and the block between the results markers of
``README.md``. The output ends with ``RESULT pairs=... judges=... agreement_<judge>=...
wall_s=...`` (``wall_s``: the judges' own times, summed from the result files). A result file
made with other options than its judge's now is stale: judged again (``--tables-only`` refuses
to table it); ``python -m arenarl_jax.experiments.run <study> --check`` says whether every
judge's file is current (``check``).
"""
from __future__ import annotations

import argparse
import contextlib
import dataclasses
import hashlib
import importlib.util
import json
import os
import pathlib
import sys
import time
from typing import Any, Callable, Mapping, Sequence

import numpy as np

from arenarl_jax import config_tree, judges
from arenarl_jax.data import env_examples
from arenarl_jax.envs import base
from arenarl_jax.experiments import agreement_metrics as am
from arenarl_jax.experiments import provenance, record, tables
from arenarl_jax.experiments import study as study_lib
from arenarl_jax.judges import local_server
from arenarl_jax.judges import rubric as rubric_lib
from arenarl_jax.models.embedded import find_smollm2_gguf
from arenarl_jax.text import messages
from arenarl_jax.types import Match, Trajectory

RATES = (0.0, 0.15, 0.3, 0.5, 0.75, 1.0)
BINS = (("small", 1.0), ("medium", 2.5), ("large", 10.0))  # (name, upper bound of the gap)
KINDS = ("rubric", "flax", "http")


@dataclasses.dataclass(frozen=True)
class PairSet:
  """Which pairs: ``per_bin`` per gap bin, spread evenly over ``subtasks`` (() = all)."""

  per_bin: int
  subtasks: tuple[str, ...] = ()
  rates: tuple[float, ...] = RATES
  bins: tuple[tuple[str, float], ...] = BINS
  seed: int = 0  # the expert's generators and the selection
  env_seed: int = 0


@dataclasses.dataclass(frozen=True)
class JudgeSpec:
  """One judge of the study. ``options``: rubric: ``noise`` (NoiseModel fields), ``seed``;
  flax: ``model`` ("smollm2" or "tiny"), ``flax`` (FlaxJudgeSettings fields), ``compact``,
  ``render``; http: ``server`` ("python": llama-cpp-python's, the one the test setup installs,
  or "native"), ``n_threads``, ``n_ctx``, ``http`` (HttpJudgeSettings fields), ``render``. Any
  kind: ``chunk`` (pairs per judge call; 0 = all at once)."""

  name: str
  kind: str
  label: str = ""
  options: Mapping[str, Any] = dataclasses.field(default_factory=dict)

  def __post_init__(self):
    if self.kind not in KINDS:
      raise ValueError(f"judge {self.name!r}: kind must be one of {KINDS}, got {self.kind!r}")


@dataclasses.dataclass(frozen=True)
class Pair:
  task_id: str
  subtask: str
  rates: tuple[float, float]  # (P's, Q's)
  p: Trajectory
  q: Trajectory
  checker: tuple[float, float]
  gap: float
  bin: str

  @property
  def id(self) -> str:
    return f"{self.task_id}@{self.rates[0]:g}-{self.rates[1]:g}"

  def record(self) -> dict[str, Any]:
    return {"pair": self.id, "task_id": self.task_id, "subtask": self.subtask,
            "rates": list(self.rates), "checker": list(self.checker), "gap": self.gap,
            "bin": self.bin, "length": [len(self.p.final_answer), len(self.q.final_answer)]}


def gap_bin(gap: float, bins: Sequence[tuple[str, float]]) -> str:
  for name, upper in bins:
    if gap <= upper + 1e-9:
      return name
  raise ValueError(f"quality gap {gap} is above the last bin's bound {bins[-1][1]}")


def build_pairs(ps: PairSet, env=None) -> list[Pair]:
  """The study's fixed pair set (module docstring)."""
  env = env or base.make_environment("travel", seed=ps.env_seed)
  rubric = rubric_lib.load_rubric(env.rubric)

  def combined(traj) -> float:
    s = env.checker(traj)
    return rubric.combine([s["path"][d.name] for d in rubric.path],
                          [s["answer"][d.name] for d in rubric.answer])[2]

  names = [b for b, _ in ps.bins]
  subtasks = ps.subtasks or env.subtasks
  n, extra = divmod(ps.per_bin, len(subtasks))
  out = []
  for k, sub in enumerate(subtasks):
    if sub not in env.subtasks:
      raise ValueError(f"PairSet.subtasks: {sub!r} is not a subtask of {env.subtasks}")
    rng = np.random.default_rng([ps.seed, k])
    # The bin's pairs beyond n per subtask go to the next subtasks in turn, bin after bin.
    need = {b: n + int((k - i * extra) % len(subtasks) < extra) for i, b in enumerate(names)}
    for task in env.tasks(f"valid_{sub}"):
      if not any(need.values()):
        break
      trajs = [messages.trajectory_from_messages(
          env_examples.expert_messages(env, task, r, ps.seed),
          metadata={"task_id": task.id, "subtask": sub}) for r in ps.rates]
      scores = [combined(t) for t in trajs]
      cands: dict[str, list] = {b: [] for b in names}
      for i in range(len(ps.rates)):
        for j in range(i + 1, len(ps.rates)):
          gap = round(abs(scores[i] - scores[j]), 6)
          if gap > 0:
            cands[gap_bin(gap, ps.bins)].append((i, j, gap))
      open_bins = [b for b in names if need[b] and cands[b]]
      if not open_bins:
        continue
      b = max(open_bins, key=lambda b: need[b])  # the first such bin on a tie
      i, j, gap = cands[b][int(rng.integers(len(cands[b])))]
      if rng.random() < 0.5:
        i, j = j, i
      need[b] -= 1
      out.append(Pair(task.id, sub, (ps.rates[i], ps.rates[j]), trajs[i], trajs[j],
                      (scores[i], scores[j]), gap, b))
  return out


def pairs_hash(pairs: Sequence[Pair]) -> str:
  """12 hex digits naming the pair set (its pairs, scores and the answers' text)."""
  h = hashlib.sha256()
  for p in pairs:
    h.update(json.dumps([p.record(), p.p.final_answer, p.q.final_answer]).encode())
  return h.hexdigest()[:12]


# ------------------------------------------------------------------------------ judges
def unavailable(spec: JudgeSpec) -> str | None:
  """Why ``spec``'s judge cannot run here (None when it can)."""
  if spec.kind != "http":
    return None
  if spec.options.get("server", "python") == "native":
    if local_server.find_native_server() is None:
      return ("no llama-server binary ($LLAMA_SERVER_BIN, PATH or "
              "scripts/build_llama_server.sh's output)")
  elif importlib.util.find_spec("llama_cpp") is None:
    return "llama-cpp-python is not installed (bash scripts/setup.sh --judge)"
  return None


@contextlib.contextmanager
def open_judge(spec: JudgeSpec, env):
  """The judge ``spec`` describes, with its server running while the block runs."""
  o = spec.options
  base_cfg = {"rubric": env.rubric, "render": dict(o.get("render", {}))}
  if spec.kind == "rubric":
    yield judges.make_judge({**base_cfg, "backend": "rubric", "noise": dict(o.get("noise", {})),
                             "seed": int(o.get("seed", 0))}, checker=env.checker)
    return
  if spec.kind == "flax":
    from arenarl_jax.judges.flax import make_flax_judge  # pylint: disable=g-import-not-at-top
    cfg = {**base_cfg, "compact": bool(o.get("compact", True)), "flax": dict(o.get("flax", {}))}
    model = tokenizer = None
    if o.get("model", "smollm2") == "tiny":  # a random 2-layer model: the mechanics, not a judge
      from arenarl_jax.models import config as model_config  # pylint: disable=g-import-not-at-top
      from arenarl_jax.models.transformer import make_model  # pylint: disable=g-import-not-at-top
      from arenarl_jax.text.tokenizer import Tokenizer  # pylint: disable=g-import-not-at-top
      model = make_model(model_config.PRESETS["tiny"], seed=int(o.get("seed", 0)))
      tokenizer = Tokenizer.from_gguf(find_smollm2_gguf())
    yield make_flax_judge(cfg, model=model, tokenizer=tokenizer)
    return
  kw = dict(n_ctx=int(o.get("n_ctx", 8192)), n_threads=int(o.get("n_threads", 2)))
  server = (local_server.NativeLlamaServer(local_server.find_native_server(), find_smollm2_gguf(),
                                           parallel=1, **kw)
            if o.get("server", "python") == "native"
            else local_server.LlamaServer(find_smollm2_gguf(), **kw))
  with server:
    http = {"model": "smollm2", "response_format": "gbnf", "max_tokens": 192,
            "max_concurrency": 2, "timeout_s": 900.0, "parse_retries": 0,
            **dict(o.get("http", {})), "base_url": server.base_url}
    yield judges.make_judge({**base_cfg, "backend": "http", "compact": True, "http": http})


def _error(e: BaseException) -> str:
  return f"{type(e).__name__}: {e}"[:300]


def judge_rows(judge, pairs: Sequence[Pair], chunk: int,
               say: Callable[[str], None]) -> tuple[list[dict], dict[str, float]]:
  """Every pair judged in both orders and scored pointwise; a failed call fails its pairs only."""
  rows = [p.record() for p in pairs]
  times = {"pairwise_s": 0.0, "pointwise_s": 0.0}
  size = chunk or len(pairs) or 1
  for part in (range(k, min(len(pairs), k + size)) for k in range(0, len(pairs), size)):
    t0 = time.perf_counter()
    try:
      results = judge.judge([Match(k, 0, 1, pairs[k].p.query, pairs[k].p, pairs[k].q)
                             for k in part])
    except Exception as e:  # pylint: disable=broad-except
      results = [None] * len(part)
      for k in part:
        rows[k]["error"] = _error(e)
    for k, r in zip(part, results):
      if r is not None and r.ok:
        d = r.detail or {}
        rows[k].update(forward=list(d["forward"]), backward=list(d["backward"]), error=None)
      else:
        rows[k].update(forward=None, backward=None)
        rows[k].setdefault("error", r.error if r is not None else None)
    t1 = time.perf_counter()
    try:
      got = judge.score([t for k in part for t in (pairs[k].p, pairs[k].q)])
      scores = [float(s) if ok else None for s, ok in zip(got.scores, got.ok)]
      errors = list(got.errors)
    except Exception as e:  # pylint: disable=broad-except
      scores, errors = [None] * (2 * len(part)), [_error(e)] * (2 * len(part))
    for n, k in enumerate(part):
      rows[k]["point"] = scores[2 * n:2 * n + 2]
      rows[k]["point_error"] = next((e for e in errors[2 * n:2 * n + 2] if e), None)
    times["pairwise_s"] += t1 - t0
    times["pointwise_s"] += time.perf_counter() - t1
    say(f"  {part.stop}/{len(pairs)} pairs, {times['pairwise_s'] + times['pointwise_s']:.0f} s")
  return rows, times


def result_path(out: pathlib.Path, spec: JudgeSpec) -> pathlib.Path:
  return out / "results" / f"{spec.name}.json"


def write_atomic(path: pathlib.Path, obj: Any) -> None:
  path.parent.mkdir(parents=True, exist_ok=True)
  tmp = path.with_suffix(".tmp")
  tmp.write_text(json.dumps(record.clean(obj), indent=1, sort_keys=True) + "\n")
  os.replace(tmp, path)  # a result file exists only once complete


def run_judge(spec: JudgeSpec, pairs: Sequence[Pair], env, out: pathlib.Path, digest: str,
              say: Callable[[str], None]) -> dict[str, Any]:
  """Runs one judge on every pair and writes its result file (also when it cannot start)."""
  rec = {"judge": spec.name, "label": spec.label or spec.name, "kind": spec.kind,
         "options": dict(spec.options), "pairs_hash": digest, "skipped": unavailable(spec)}
  state, load_start, t0 = provenance.git_state(out), provenance.load(), time.perf_counter()
  times, metrics = {}, {}
  if rec["skipped"] is None:
    say(f"judge {spec.name}: {len(pairs)} pairs")
    try:
      with open_judge(spec, env) as judge:
        rec["rows"], times = judge_rows(judge, pairs, int(spec.options.get("chunk", 0)), say)
        snap = getattr(judge, "snapshot", None) or judge.metrics.snapshot
        metrics = {k: v for k, v in snap().items() if isinstance(v, (int, float))}
    except Exception as e:  # pylint: disable=broad-except  (a server or model that cannot start)
      rec["skipped"] = f"could not start: {_error(e)}"
  if rec["skipped"]:
    say(f"judge {spec.name}: skipped, {rec['skipped']}")
    rec["rows"] = []
  wall = time.perf_counter() - t0
  rec["metrics"] = metrics
  rec["provenance"] = {**state, **provenance.versions(), "load_start": load_start,
                       "load_end": provenance.load(), "wall_s": round(wall, 1),
                       **{k: round(v, 1) for k, v in times.items()}}
  write_atomic(result_path(out, spec), rec)
  return rec


def stale_reasons(rec: Mapping[str, Any], spec: JudgeSpec, digest: str | None) -> list[str]:
  """Why a judge's result file is not what ``spec`` would write now: another kind, another
  option (by dotted key) or, with ``digest``, another pair set. ``[]``: it is current."""
  out = [] if rec.get("kind") == spec.kind else [f"kind: {rec.get('kind')} -> {spec.kind}"]
  recorded = config_tree.flat(rec.get("options") or {})
  now = config_tree.flat(json.loads(json.dumps(dict(spec.options))))
  for key in sorted(set(recorded) | set(now)):
    if recorded.get(key, "<absent>") != now.get(key, "<absent>"):
      out.append(f"options.{key}: {recorded.get(key, '<absent>')!r} -> "
                 f"{now.get(key, '<absent>')!r}")
  if digest is not None and rec.get("pairs_hash") != digest:
    out.append(f"pair set: {rec.get('pairs_hash')} -> {digest}")
  return out


def check(directory: str | pathlib.Path, preset: str = "full", out: str = "",
          say: Callable[[str], None] = print) -> int:
  """``python -m arenarl_jax.experiments.run <agreement study> --check``: 0 when every judge of
  the preset has a result file made on the study's pair set with its options now (and not
  skipped) and every check names judges that ran; otherwise 1, saying why. Builds the pair set
  (seconds), runs no judge, writes nothing."""
  study = load_study(directory, preset)
  folder = pathlib.Path(out).resolve() if out else (
      study.directory if preset == "full" else study.directory / "work" / preset)
  digest = pairs_hash(build_pairs(study.pair_set))
  missing, stale, ran = [], [], set()
  for spec in study.judges:
    path = result_path(folder, spec)
    if not path.is_file():
      missing.append(f"missing {spec.name}: no result file")
      continue
    rec = json.loads(path.read_text())
    if rec.get("skipped"):
      missing.append(f"missing {spec.name}: skipped ({rec['skipped']})")
      continue
    why = stale_reasons(rec, spec, digest)
    if why:
      stale.append(f"stale {spec.name}: " + "; ".join(why))
    else:
      ran.add(spec.name)
  not_run = [f"not run yet: {c.text} ({c.judge})" for c in study.checks
             if c.judge not in ran]
  for line in missing + stale + not_run:
    say(line)
  ok = not (missing or stale or not_run)
  say(f"{study.directory.name} ({preset}): {len(study.judges)} judges on pair set {digest}, "
      f"{len(missing)} missing, {len(stale)} stale; {len(study.checks)} checks, "
      f"{len(not_run)} not run yet: " + ("current" if ok else "NOT current"))
  return 0 if ok else 1


def load_result(out: pathlib.Path, spec: JudgeSpec, digest: str) -> dict[str, Any] | None:
  """``spec``'s result file, or None; an error when it was made on another pair set."""
  path = result_path(out, spec)
  if not path.is_file():
    return None
  rec = json.loads(path.read_text())
  if rec.get("pairs_hash") != digest:
    raise ValueError(f"{path}: made on pair set {rec.get('pairs_hash')}, but the study's is "
                     f"{digest} (the pairs or the environment changed): delete it to rerun")
  return rec


# ------------------------------------------------------------------------------ the study
@dataclasses.dataclass(frozen=True)
class Study:
  directory: pathlib.Path
  preset: str
  pair_set: PairSet
  judges: tuple[JudgeSpec, ...]
  checks: tuple[am.Check, ...]
  samples: int = 2000
  seed: int = 0


def load_study(directory: str | pathlib.Path, preset: str) -> Study:
  """``<directory>/study.py``: ``pair_set(preset)``, ``judges(preset)``, optional ``CHECKS``,
  ``BOOTSTRAP_SAMPLES``, ``BOOTSTRAP_SEED``."""
  directory, path, module = study_lib.study_module(directory,
                                                   "pair_set(preset) and judges(preset)")
  specs = tuple(module.judges(preset))
  names = [j.name for j in specs]
  if len(set(names)) != len(names):
    raise ValueError(f"{path}: preset {preset!r} repeats judge names: {names}")
  return Study(directory, preset, module.pair_set(preset), specs,
               tuple(getattr(module, "CHECKS", ())),
               int(getattr(module, "BOOTSTRAP_SAMPLES", 2000)),
               int(getattr(module, "BOOTSTRAP_SEED", 0)))


def main(argv: list[str] | None = None) -> int:
  parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
  parser.add_argument("study", help="the study folder (holds study.py)")
  parser.add_argument("--preset", default="full")
  parser.add_argument("--out", default="", help="output folder (module docstring)")
  parser.add_argument("--limit", type=int, default=0,
                      help="N pairs spread over the set (a timing sample; its own output folder)")
  parser.add_argument("--tables-only", action="store_true")
  args = parser.parse_args(argv)
  t_start = time.perf_counter()
  study = load_study(args.study, args.preset)
  default = (study.directory if args.preset == "full" and not args.limit else
             study.directory / "work" / (args.preset + (f"_sample{args.limit}" if args.limit
                                                         else "")))
  out = pathlib.Path(args.out).resolve() if args.out else default
  out.mkdir(parents=True, exist_ok=True)
  say = lambda text: print(text, flush=True)  # noqa: E731
  env = base.make_environment("travel", seed=study.pair_set.env_seed)
  pairs = build_pairs(study.pair_set, env)
  if args.limit:  # spread over the set (its order is subtask by subtask)
    pairs = [pairs[k] for k in sorted(set(np.linspace(0, len(pairs) - 1, args.limit).round()
                                          .astype(int).tolist()))]
  if not pairs:
    raise SystemExit(f"{args.study}: preset {args.preset!r} selects no pairs")
  digest = pairs_hash(pairs)
  say(f"{len(pairs)} pairs (pair set {digest}); judges: {', '.join(j.name for j in study.judges)}")
  results, ran = [], 0
  for spec in study.judges:
    rec = load_result(out, spec, digest)
    why = stale_reasons(rec, spec, None) if rec is not None else []
    if why and args.tables_only:
      raise SystemExit(f"{result_path(out, spec)}: made with other settings than the study's "
                       f"now ({'; '.join(why)}): run without --tables-only to judge again")
    if why:
      say(f"judge {spec.name}: its result file is stale ({'; '.join(why)}); judging again")
      rec = None
    if rec is None or (rec.get("skipped") and not args.tables_only):
      if args.tables_only:
        continue
      rec = run_judge(spec, pairs, env, out, digest, say)
      ran += 1
    else:
      say(f"judge {spec.name}: result file found, skipped")
    results.append(rec)
  bins = [b for b, _ in study.pair_set.bins]
  done = [r for r in results if not r.get("skipped")]
  (out / "summary.csv").write_text(am.summary_csv(results, bins, study.samples, study.seed))
  drawn = []
  if done:
    am.figure(done, bins, out / "agreement.png", study.samples, study.seed)
    drawn = ["agreement.png"]
  command = (f"python -m arenarl_jax.experiments.agreement experiments/{study.directory.name} "
             f"--preset={study.preset}" + (f" --limit={args.limit}" if args.limit else ""))
  head = am.header(command, len(study.judges), [p.record() for p in pairs], results,
                   study.samples)
  tables.write_block(out / "README.md", am.markdown(results, bins, study.checks, study.samples,
                                                    study.seed, head, drawn),
                     f"{study.directory.name} ({study.preset})")
  say(f"ran {ran} judge(s), found {len(results) - ran} result file(s); wrote {out}/summary.csv, "
      f"agreement.png and the README block")
  say(am.result_line(results, len(pairs), study.samples, study.seed,
                     time.perf_counter() - t_start))
  return 0


if __name__ == "__main__":
  from arenarl_jax.models import backend  # pylint: disable=g-import-not-at-top
  backend.prepare_process()  # as the CLI does, before any thread starts
  sys.exit(main())
