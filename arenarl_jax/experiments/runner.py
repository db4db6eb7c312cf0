"""Runs what a study is missing: its shared SFT stages, then each run without a result file.

Layout under the output folder (``run.py``'s ``--out``):

    results/<run>.json      one per finished run (small; committed, so a clone resumes)
    work/sft_<sft_hash>/    a shared SFT stage: ``main --mode=sft`` (not committed); its DONE
                            names the dataset it trained on, and a stage whose dataset is not
                            the one the config now reads is trained again (and a half-finished
                            run seeded from the old stage starts again)
    work/<run>/             a run's workdir; its ``stdout.log`` (not committed)

A run that shares an SFT stage gets a copy of the stage's ``sft/`` (checkpoint and curve),
``tokenizer/`` and ``model_config.json`` in its workdir before ``main --mode=pipeline``: the
pipeline's SFT stage then finds its finished checkpoint and trains nothing (``sft/stage.py``
resumes from ``<workdir>/sft``), so RL and both evaluations run as in a fresh pipeline. Copies,
not links: the pipeline appends to files in ``sft/``.
A run whose result file exists and is current is skipped without starting anything; a run
whose result file is stale (``staleness.py``: a value that shapes its result differs from what
its study resolves to now, or the file predates those records) runs again in a fresh workdir; a
run that stopped half way resumes from its workdir, unless the workdir's config holds other
settings than the run's now (then it starts again).
"""
from __future__ import annotations

import json
import os
import pathlib
import shutil
import subprocess
import sys
import time
from typing import Callable

from arenarl_jax import config_tree, run_config
from arenarl_jax.experiments import provenance, record, staleness
from arenarl_jax.experiments import study as study_lib
from arenarl_jax.experiments.study import Run

# What a run's workdir takes from a shared SFT stage.
SFT_PARTS = ("sft", "tokenizer", "model_config.json")
DONE = "DONE"
SEEDED = "SEEDED"  # in a run's workdir: the DONE of the SFT stage it was seeded from


def result_path(out: pathlib.Path, run: Run) -> pathlib.Path:
  return out / "results" / f"{run.name}.json"


def command(config: str, workdir: pathlib.Path, overrides: dict, mode: str,
            seed: int | None = None) -> list[str]:
  """The ``main`` command line of a stage."""
  cmd = [sys.executable, "-m", "arenarl_jax.main", f"--config={study_lib.config_path(config)}",
         f"--workdir={workdir}", f"--mode={mode}"]
  if seed is not None:
    cmd.append(study_lib.flag("seed", seed))
  return cmd + [study_lib.flag(k, v) for k, v in overrides.items()]


def execute(cmd: list[str], log: pathlib.Path, what: str) -> str:
  """Runs ``cmd`` (from the repository root, in this environment), its output streamed to
  ``log`` (follow a long run with ``tail -f``); returns the output, or raises naming the log and
  showing its end."""
  log.parent.mkdir(parents=True, exist_ok=True)
  with open(log, "w", encoding="utf-8") as f:
    code = subprocess.run(cmd, cwd=study_lib.ROOT, stdout=f, stderr=subprocess.STDOUT,
                          check=False).returncode
  output = log.read_text(encoding="utf-8", errors="replace")
  if code != 0:
    tail = "\n".join(output.splitlines()[-30:])
    raise RuntimeError(f"{what} failed (exit {code}); log: {log}\n{tail}")
  return output


def sft_data(run: Run) -> str:
  """The name of the dataset ``run``'s SFT stage trains on. It digests the code that writes the
  records (``data/builder.py``), so a stage trained before the environment or its expert was
  edited does not match it."""
  from arenarl_jax.data import builder  # pylint: disable=g-import-not-at-top  (pulls in tfds)
  from arenarl_jax.data.settings import DataSettings  # pylint: disable=g-import-not-at-top
  config = study_lib.resolve(run.config, run.overrides)
  return builder.make_source_config(DataSettings.from_config(config.data), config.env).name


def sft_stage(out: pathlib.Path, run: Run, say: Callable[[str], None]) -> pathlib.Path:
  """The finished shared SFT workdir of ``run`` (trained now unless it is already done on the
  same data: a stage whose ``DONE`` names another dataset is stale and trained again)."""
  workdir = out / "work" / f"sft_{study_lib.sft_hash(run)}"
  data, done = sft_data(run), workdir / DONE
  if done.is_file():
    trained_on = json.loads(done.read_text()).get("data")
    if trained_on == data:
      return workdir
    say(f"sft stage {workdir.name}: trained on dataset {trained_on}, the config now reads "
        f"{data}: training again")
    shutil.rmtree(workdir)
  say(f"sft stage {workdir.name}: training (for {run.name} and every run sharing it)")
  t0 = time.perf_counter()
  execute(command(run.config, workdir, study_lib.sft_overrides(run), "sft"),
          workdir / "stdout.log", f"SFT stage {workdir.name}")
  done.write_text(json.dumps({"wall_s": round(time.perf_counter() - t0, 1), "data": data}))
  return workdir


def seed_workdir(sft_dir: pathlib.Path, workdir: pathlib.Path) -> bool:
  """Copies the shared SFT stage's parts into ``workdir`` (once; a resumed run keeps its own),
  with the stage's ``DONE`` as ``SEEDED``. A half-finished run seeded from a stage trained on other
  data (``SEEDED`` names another dataset than the stage's ``DONE``) is stale: its workdir is
  cleared and seeded again. Returns whether that happened."""
  stage = json.loads((sft_dir / DONE).read_text())
  seeded = workdir / SEEDED
  stale = seeded.is_file() and json.loads(seeded.read_text()).get("data") != stage.get("data")
  if stale:
    shutil.rmtree(workdir)
  workdir.mkdir(parents=True, exist_ok=True)
  for part in SFT_PARTS:
    src, dst = sft_dir / part, workdir / part
    if dst.exists() or not src.exists():
      continue
    if src.is_dir():
      shutil.copytree(src, dst)
    else:
      shutil.copy2(src, dst)
  if not seeded.is_file():
    seeded.write_text(json.dumps(stage))
  return stale


def ran_config_hash(workdir: pathlib.Path, drop: tuple[str, ...] = ()) -> str:
  """``study.digest`` of the config ``main`` wrote to ``<workdir>/config.json``."""
  tree = run_config.read_tree(str(workdir))
  return study_lib.tree_digest(study_lib.without(tree, drop))


def clear_other_settings(workdir: pathlib.Path, run: Run) -> bool:
  """Removes a half-finished ``workdir`` whose ``config.json`` holds other settings than
  ``run``'s now (resuming it would finish a run the study no longer defines). Returns whether it
  did."""
  if not (workdir / run_config.CONFIG_FILE).is_file():
    return False
  ran = staleness.settings(run_config.read_tree(str(workdir)))
  now = staleness.settings(study_lib.resolve(run.config, run.overrides, run.seed))
  if not config_tree.stale_keys(ran, now, staleness.defaults()):
    return False
  shutil.rmtree(workdir)
  return True


def run_one(out: pathlib.Path, run: Run, say: Callable[[str], None]) -> dict:
  """Runs ``run``'s pipeline and writes its result file; returns the record."""
  workdir = out / "work" / run.name
  if clear_other_settings(workdir, run):
    say(f"run {run.name}: its workdir ran other settings; starting it again")
  sft_dir = sft_stage(out, run, say) if run.share_sft else None
  if sft_dir is not None and seed_workdir(sft_dir, workdir):
    say(f"run {run.name}: its workdir was seeded from an SFT stage trained on other data; "
        "starting it again")
  say(f"run {run.name}: pipeline")
  state, load_start, t0 = provenance.git_state(out), provenance.load(), time.perf_counter()
  stdout = execute(command(run.config, workdir, dict(run.overrides), "pipeline", run.seed),
                   workdir / "stdout.log", f"run {run.name}")
  wall = time.perf_counter() - t0
  rec = {
      "run": run.name, "arm": run.arm, "seed": run.seed, "config": run.config,
      "overrides": dict(run.overrides), "share_sft": run.share_sft,
      "result": record.parse_result_line(stdout),
      "final_step": record.final_step(str(workdir)),
      "steps": record.step_rows(str(workdir)),
      "tasks": record.tasks(str(workdir)),
      "finish": record.finishes(str(workdir)),
      # The hash of the config ``main`` wrote (what ran); ``study.config_hash`` predicts it.
      # ``settings``, ``start``, ``dataset``: what staleness.py compares with the study now.
      "provenance": {**state, "config_hash": ran_config_hash(workdir),
                     **staleness.facts(run_config.read(str(workdir)),
                                       run_config.read_tree(str(workdir))),
                     "sft_hash": study_lib.sft_hash(run) if run.share_sft else None,
                     "seed": run.seed, **provenance.versions(), "load_start": load_start,
                     "load_end": provenance.load(), "wall_s": round(wall, 1)},
  }
  path = result_path(out, run)
  path.parent.mkdir(parents=True, exist_ok=True)
  tmp = path.with_suffix(".tmp")
  tmp.write_text(json.dumps(record.clean(rec), indent=1, sort_keys=True) + "\n")
  os.replace(tmp, path)  # a result file exists only once complete
  return rec


def stale_reasons(out: pathlib.Path, run: Run,
                  base: dict | None = None) -> list[str] | None:
  """Why ``run``'s result file is stale (``staleness.reasons``; ``[]``: it is current), or
  None when it has none."""
  path = result_path(out, run)
  if not path.is_file():
    return None
  rec = json.loads(path.read_text())
  return staleness.reasons(rec.get("provenance", {}),
                           study_lib.resolve(run.config, run.overrides, run.seed), base)


def stale(out: pathlib.Path, runs: tuple[Run, ...]) -> dict[str, list[str]]:
  """{run: why} for every run whose result file exists and is stale, in the study's order."""
  base = staleness.defaults()
  found = {run.name: stale_reasons(out, run, base) for run in runs}
  return {name: why for name, why in found.items() if why}


def run_missing(out: pathlib.Path, runs: tuple[Run, ...],
                say: Callable[[str], None] = print) -> dict[str, str]:
  """Runs every run without a current result file, in order: missing ones, and stale ones again
  from a fresh workdir (their old result file stays until the new one replaces it). Returns
  {run: "skipped" | "ran" | "stale"} ("stale": ran again)."""
  status, base = {}, staleness.defaults()
  for run in runs:
    why = stale_reasons(out, run, base)
    if why == []:
      status[run.name] = "skipped"
      continue
    if why:
      say(f"run {run.name}: its result file is stale ({'; '.join(why)}); running it again")
      shutil.rmtree(out / "work" / run.name, ignore_errors=True)
    run_one(out, run, say)
    status[run.name] = "ran" if why is None else "stale"
  return status


def refresh(out: pathlib.Path, runs: tuple[Run, ...]) -> list[str]:
  """Re-reads what a result file takes from its run's workdir (steps, tasks, finishes), for the
  result files whose workdir is still there: a file written before the record grew a field
  gains it from the same evaluation logs. Its RESULT keys and provenance stay as they were.
  Returns the refreshed runs' names."""
  done = []
  for run in runs:
    path, workdir = result_path(out, run), out / "work" / run.name
    if not path.is_file() or not (workdir / "eval").is_dir():
      continue
    rec = json.loads(path.read_text())
    rec.update({"final_step": record.final_step(str(workdir)),
                "steps": record.step_rows(str(workdir)), "tasks": record.tasks(str(workdir)),
                "finish": record.finishes(str(workdir))})
    tmp = path.with_suffix(".tmp")
    tmp.write_text(json.dumps(record.clean(rec), indent=1, sort_keys=True) + "\n")
    os.replace(tmp, path)
    done.append(run.name)
  return done


def load_results(out: pathlib.Path, runs: tuple[Run, ...]) -> list[dict]:
  """The result files of ``runs`` that exist, in the study's order."""
  return [json.loads(result_path(out, r).read_text()) for r in runs
          if result_path(out, r).is_file()]
