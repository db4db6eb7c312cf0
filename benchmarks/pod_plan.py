"""A per-chip memory plan of a pod config, compiled ahead of time: does each chip kind hold it?

  .venv/bin/python benchmarks/pod_plan.py --config=configs/qwen3_8b_pod.py --libtpu_dir=/tmp/libtpu
  .venv/bin/python benchmarks/pod_plan.py --smoke   # seconds: a tiny model on 8 fake CPU devices

For each chip kind (``--chips``, default v5p and v4: 32 chips each, 4 per host, as
``configs/qwen3_8b_pod.py``'s mesh data 1 x fsdp 8 x tensor 4 expects) one worker process
compiles the RL train step, the sampler's prefill and its decode from abstract shapes
(``pod_plan_programs.py`` says which shapes and meshes) and reads XLA's per-device memory
analysis of each: arguments, outputs, aliased bytes, temporaries; peak = arguments + outputs -
aliased + temporaries. What else stays on the chips while a program runs is added to it:
- train_gb = the train step's peak + the sampler's parameter copy (the sampler keeps it between
  rollouts; ``sampling/policy_sampler.py``);
- sample_gb = the larger of prefill's and decode's peaks + the train state and the frozen
  reference in the training layout (they stay on the chips while the hosts sample).
A chip kind holds the config when both are at most the HBM the TPU compiler plans with (read
from its own out-of-memory message; on the CPU estimate, 95% of the chip's HBM). A TPU compile
that needs more than that fails, giving the temporaries it needed; that program's row is then
those temporaries plus its arguments. Where the config does not fit, the plan re-plans with suggested settings, one change at a
time and kept (first those that leave the algorithm as it is, then those that change it), until
the config fits or ``--max_suggestions`` changes are spent, and prints every re-plan.

HBM per chip (Google Cloud TPU documentation, "TPU v5p" and "TPU v4" system architecture
pages): v5p 95 GB, v4 32 GiB.

Targets. ``tpu`` compiles for the chip's TPU topology through libtpu's compile-only devices, on
a machine without TPUs: an importable ``libtpu`` package, or an unpacked libtpu wheel named by
``--libtpu_dir`` (or the ``POD_PLAN_LIBTPU_DIR`` environment variable). Get one with
``pip download libtpu --no-deps -d DIR && unzip -d DIR/libtpu_wheel DIR/libtpu-*.whl`` (then
``--libtpu_dir=DIR/libtpu_wheel``) or ``pip install --target DIR libtpu``; keep it out of the
project's environment (an importable libtpu changes which backend JAX picks). Without libtpu, or
when its compile fails, the worker compiles for 32 fake CPU devices instead and every number of
that chip is labelled ``target=cpu_estimate`` (XLA:CPU's buffer assignment, not the TPU's).
``--smoke`` plans a tiny model on 8 fake CPU devices (2 hosts of 4; mesh fsdp 4 x tensor 2) with
the config's algorithm and small rows (a test runs it).

Output: per chip kind and re-plan, a table of the three programs' memory, the parameter bytes per
device in the training and sampling layouts, and a verdict; it ends with one line per chip kind
``RESULT chip=... train_gb=... sample_gb=... param_gb_per_device=... hbm_gb=... target=...
train_rows=... train_len=... cache_len=... sample_rows_per_host=... decode_temp_gb=...
decode_temp_per_cache=...`` of the config as given (the workload it planned: train rows per
minibatch and their length, the decode's slots per row and sampling rows per host; decode's
temporaries, in GB and per byte of the KV cache: a second cache would make the ratio >= 1;
param_gb_per_device: the training layout's; the sampling layout's is in the table and in the
``PARAMS`` line).
"""
from __future__ import annotations

import argparse
import dataclasses
import importlib.util
import json
import os
import subprocess
import sys
import time

_HERE = os.path.dirname(os.path.abspath(__file__))
_ROOT = os.path.dirname(_HERE)
GB = 1e9
FIT_FRACTION = 0.95  # of HBM; the rest for the runtime and fragmentation
LIBTPU_ENV = "POD_PLAN_LIBTPU_DIR"
# Settings that change only the train step: a re-plan with them compiles only that.
TRAIN_ONLY = ("rl.accumulation_steps", "model.remat", "rl.minibatches_per_rollout")


@dataclasses.dataclass(frozen=True)
class Chip:
  topology: str  # libtpu's topology name: 32 chips
  hbm_bytes: float
  chips_per_host: int = 4


CHIPS = {"v5p": Chip("v5p:2x4x4", 95e9), "v4": Chip("v4:2x4x4", 32 * 2**30)}
SMOKE = {"preset": "tiny", "devices": 8, "prompt_len": 32,
         "overrides": {"mesh.fsdp": 4, "mesh.tensor": 2, "rl.prompts_per_step": 8,
                       "sampling.group_size": 2, "sampling.cache_len": 128,
                       "sampling.max_new_tokens": 16, "rl.bucket": 64,
                       "rl.minibatches_per_rollout": 2, "rl.logprob_chunk": 32}}


def find_libtpu(libtpu_dir: str) -> str | None:
  """The directory to put on PYTHONPATH for libtpu ("" when it is importable already), or None."""
  if libtpu_dir:
    return libtpu_dir if os.path.isdir(os.path.join(libtpu_dir, "libtpu")) else None
  return "" if importlib.util.find_spec("libtpu") is not None else None


def run_worker(spec: dict, libtpu: str | None, timeout_s: int) -> dict:
  """``pod_plan_programs.plan(spec)`` in a fresh process (the device count and libtpu are fixed
  when JAX starts); its result, or {"error": ...}."""
  env = dict(os.environ, JAX_PLATFORMS="cpu")
  env["PYTHONPATH"] = os.pathsep.join(p for p in (_ROOT, libtpu or "", env.get("PYTHONPATH", ""))
                                      if p)
  if spec["target"] == "cpu":
    flags = [f for f in env.get("XLA_FLAGS", "").split()
             if not f.startswith("--xla_force_host_platform_device_count")]
    env["XLA_FLAGS"] = " ".join(flags + [f"--xla_force_host_platform_device_count="
                                         f"{spec['devices']}"])
  cmd = [sys.executable, os.path.abspath(__file__), "--worker", json.dumps(spec)]
  try:
    proc = subprocess.run(cmd, cwd=_ROOT, env=env, capture_output=True, text=True,
                          timeout=timeout_s, check=False)
  except subprocess.TimeoutExpired:
    return {"error": f"timed out after {timeout_s} s"}
  for line in reversed(proc.stdout.splitlines()):
    if line.startswith("PLAN_JSON "):
      return json.loads(line[len("PLAN_JSON "):])
  return {"error": f"exit {proc.returncode}: " + "\n".join(proc.stderr.splitlines()[-15:])}


def totals(plan: dict) -> dict:
  """train_gb, sample_gb (see the module docstring) and the parameter GB per device."""
  train = plan["train"]
  resident = train["state_bytes"] + train["ref_bytes"]
  sample_peak = max(plan["prefill"]["peak"], plan["decode"]["peak"])
  return {"train_gb": (train["memory"]["peak"] + plan["params_bytes"]) / GB,
          "sample_gb": (sample_peak + resident) / GB,
          "param_gb": plan["train_params_bytes"] / GB,
          "sample_param_gb": plan["params_bytes"] / GB}


def report(chip: str, hbm: float, plan: dict, settings: dict) -> dict:
  """Prints one plan's table and verdict; returns its totals with ``fits_train``/``fits_sample``."""
  t = totals(plan)
  mesh = " x ".join(f"{k} {v}" for k, v in plan["mesh"].items())
  smesh = " x ".join(f"{k} {v}" for k, v in plan["sampling_mesh"].items())
  changed = ", ".join(f"{k}={v}" for k, v in settings.items()) or "the config as given"
  print(f"\n== {chip} (target={plan['target']}): {changed}")
  print(f"mesh {mesh} over {plan['hosts']} hosts; sampling mesh per host {smesh}; "
        f"train minibatch {plan['train_rows']} rows x {plan['train_tokens']} tokens; "
        f"sampling {plan['prompts_per_host']} prompts x G = {plan['rows_per_host']} rows per "
        f"host, {plan['prompt_len']}-token prompt bucket, decode over {plan['decode_slots']} "
        f"slots per row (KV cache {plan['cache_bytes'] / GB:.2f} GB per device)")
  train = plan["train"]
  resident = {"train_step": plan["params_bytes"],
              "prefill": train["state_bytes"] + train["ref_bytes"]}
  resident["decode"] = resident["prefill"]
  print("| program | layout | args GB | out GB | alias GB | temp GB | peak GB | + resident GB "
        "| total GB |")
  print("|---|---|---|---|---|---|---|---|---|")
  for name, mem, where in (("train_step", train["memory"], "training"),
                           ("prefill", plan["prefill"], "sampling"),
                           ("decode", plan["decode"], "sampling")):
    print(f"| {name} | {where} | {mem['args'] / GB:.2f} | {mem['out'] / GB:.2f} | "
          f"{mem['alias'] / GB:.2f} | {mem['temp'] / GB:.2f} | {mem['peak'] / GB:.2f} | "
          f"{resident[name] / GB:.2f} | {(mem['peak'] + resident[name]) / GB:.2f} |")
  print(f"parameters per device: training layout {t['param_gb']:.2f} GB, sampling layout "
        f"{t['sample_param_gb']:.2f} GB (of {plan['params_total_bytes'] / GB:.2f} GB float32; "
        f"{plan['params_replicated_bytes'] / GB:.4f} GB of it replicated in the sampling layout)")
  for name, mem in (("train_step", train["memory"]), ("prefill", plan["prefill"]),
                    ("decode", plan["decode"])):
    if mem.get("over_hbm"):
      print(f"{name}: the compile failed: {mem['over_hbm']} (its row: those temporaries plus "
            "its arguments)")
  if plan.get("hbm_available"):
    limit, of = plan["hbm_available"] / GB, "the HBM the TPU compiler plans with"
  else:
    limit, of = FIT_FRACTION * hbm / GB, f"{FIT_FRACTION:.0%} of {hbm / GB:.2f} GB HBM"
  t["fits_train"], t["fits_sample"] = t["train_gb"] <= limit, t["sample_gb"] <= limit
  verdict = "fits" if t["fits_train"] and t["fits_sample"] else "does NOT fit"
  print(f"verdict: {verdict} on {chip}: train {t['train_gb']:.2f} GB, sample "
        f"{t['sample_gb']:.2f} GB per chip against {limit:.2f} GB ({of})")
  return t


def next_change(config, plan: dict, t: dict, settings: dict) -> tuple[str, object] | None:
  """The next setting to try for the side that does not fit, or None when none is left.

  Train side: more accumulation steps (the same update in smaller micro-batches) down to one row
  per shard per micro-batch, then full rematerialisation, then more minibatches per rollout (more,
  smaller updates: changes the algorithm). Sampling side: a shorter ``sampling.cache_len``
  (shorter conversations), then fewer prompts per step (fewer rows per host)."""
  value = lambda key: settings.get(key, config[key.split(".")[0]][key.split(".")[1]])
  if not t["fits_train"]:
    shards = plan["mesh"]["data"] * plan["mesh"]["fsdp"]
    acc = value("rl.accumulation_steps")
    if plan["train_rows"] // (2 * acc) >= shards and plan["train_rows"] % (2 * acc * shards) == 0:
      return "rl.accumulation_steps", 2 * acc
    if value("model.remat") != "full":
      return "model.remat", "full"
    if plan["train_rows"] // 2 >= shards:
      return "rl.minibatches_per_rollout", 2 * value("rl.minibatches_per_rollout")
  if not t["fits_sample"] or not t["fits_train"]:
    cache_len = value("sampling.cache_len")
    if cache_len // 2 > plan["prompt_len"] + value("sampling.max_new_tokens"):
      return "sampling.cache_len", cache_len // 2
    prompts = value("rl.prompts_per_step")
    if prompts // 2 >= plan["hosts"]:
      return "rl.prompts_per_step", prompts // 2
  return None


def worker_spec(args, chip: Chip, target: str, overrides: dict) -> dict:
  spec = {"config": args.config, "preset": args.preset, "topology": chip.topology,
          "devices": 32, "chips_per_host": chip.chips_per_host, "prompt_len": args.prompt_len,
          "train_tokens": args.train_tokens, "target": target, "overrides": dict(overrides)}
  if args.smoke:
    spec.update({k: v for k, v in SMOKE.items() if k != "overrides"})
    spec["overrides"] = dict(SMOKE["overrides"], **overrides)
  return spec


def plan_chip(args, name: str, libtpu: str | None, config) -> dict:
  """Plans one chip kind (and re-plans it with suggested settings where it does not fit)."""
  chip = CHIPS[name]
  base = dict(kv.split("=", 1) for kv in args.set)
  base = {k: _typed(config, k, v) for k, v in base.items()}
  target = "tpu" if libtpu is not None and not args.smoke and args.target != "cpu" else "cpu"
  start = time.perf_counter()
  plan = run_worker(worker_spec(args, chip, target, base), libtpu, args.timeout_s)
  if "error" in plan and target == "tpu":
    print(f"[{name}] the TPU compile failed ({plan['error']}); falling back to fake CPU devices")
    target = "cpu"
    plan = run_worker(worker_spec(args, chip, target, base), libtpu, args.timeout_s)
  if "error" in plan:
    raise RuntimeError(f"[{name}] plan failed: {plan['error']}")
  print(f"[{name}] planned in {time.perf_counter() - start:.0f} s")
  t = first = report(name, chip.hbm_bytes, plan, base)
  settings = dict(base)
  for _ in range(args.max_suggestions if args.suggest else 0):
    if t["fits_train"] and t["fits_sample"]:
      break
    change = next_change(config, plan, t, settings)
    if change is None:
      print(f"[{name}] no suggestion left")
      break
    settings[change[0]] = change[1]
    start = time.perf_counter()
    spec = worker_spec(args, chip, target, settings)
    if change[0] in TRAIN_ONLY:
      spec["programs"] = ["train"]
    replan = run_worker(spec, libtpu, args.timeout_s)
    if "error" in replan:
      print(f"[{name}] re-plan with {change[0]}={change[1]} failed: {replan['error']}")
      break
    print(f"[{name}] re-planned with {change[0]}={change[1]} in "
          f"{time.perf_counter() - start:.0f} s")
    plan = dict(plan, **replan)
    t = report(name, chip.hbm_bytes, plan, settings)
  if not (first["fits_train"] and first["fits_sample"]):
    extra = {k: v for k, v in settings.items() if base.get(k) != v}
    fixed = t["fits_train"] and t["fits_sample"]
    print(f"[{name}] suggestion: {', '.join(f'{k}={v}' for k, v in extra.items()) or 'none'}"
          f" -> {'fits' if fixed else 'still does not fit'}")
  first.update(target=target, chip=name, hbm_gb=chip.hbm_bytes / GB, plan=plan)
  return first


def _typed(config, key: str, value: str):
  """``value`` parsed as the type of ``config``'s ``key``."""
  section, name = key.split(".", 1)
  current = config[section][name]
  return type(current)(value) if not isinstance(current, bool) else value in ("1", "true", "True")


def main(argv=None):
  parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
  parser.add_argument("--config", default="configs/qwen3_8b_pod.py")
  parser.add_argument("--preset", default="qwen3_8b", help="models/config.py preset: the shapes")
  parser.add_argument("--chips", default="v5p,v4", help=f"comma-separated, of {sorted(CHIPS)}")
  parser.add_argument("--libtpu_dir", default=os.environ.get(LIBTPU_ENV, ""),
                      help=f"an unpacked libtpu wheel (default: ${LIBTPU_ENV})")
  parser.add_argument("--target", default="auto", choices=("auto", "cpu"),
                      help="auto: the TPU when libtpu is found, else fake CPU devices")
  parser.add_argument("--prompt_len", type=int, default=0,
                      help="prefill's prompt bucket; 0 = the config's largest "
                      "(sampling.prompt_buckets: the longest prompt the sampler takes)")
  parser.add_argument("--train_tokens", type=int, default=0,
                      help="tokens per training row (0: sampling.cache_len, the longest)")
  parser.add_argument("--set", action="append", default=[],
                      help="a config override KEY=VALUE (e.g. rl.accumulation_steps=4)")
  parser.add_argument("--suggest", action=argparse.BooleanOptionalAction, default=True,
                      help="re-plan chips that do not fit with suggested settings")
  parser.add_argument("--max_suggestions", type=int, default=4)
  parser.add_argument("--timeout_s", type=int, default=3600, help="per worker process")
  parser.add_argument("--smoke", action="store_true",
                      help="a tiny model on 8 fake CPU devices (seconds)")
  parser.add_argument("--worker", default="", help=argparse.SUPPRESS)
  args = parser.parse_args(argv)
  if args.worker:
    import pod_plan_programs  # pylint: disable=g-import-not-at-top
    print("PLAN_JSON " + json.dumps(pod_plan_programs.plan(json.loads(args.worker))), flush=True)
    return None

  from arenarl_jax import config_tree  # pylint: disable=g-import-not-at-top
  config = config_tree.load_config_file(args.config)
  libtpu = None if args.target == "cpu" else find_libtpu(args.libtpu_dir)
  chips = ["v5p"] if args.smoke else args.chips.split(",")
  print(f"pod plan of {args.config} ({args.preset}); target: "
        f"{'fake CPU devices' if args.smoke or libtpu is None else 'TPU via libtpu'}; "
        f"load average at start {os.getloadavg()}")
  start = time.perf_counter()
  results = [plan_chip(args, name, libtpu, config) for name in chips]
  print(f"\nwall {time.perf_counter() - start:.0f} s; load average at end {os.getloadavg()}")
  for r in results:
    p = r["plan"]
    print(f"PARAMS chip={r['chip']} total_bytes={p['params_total_bytes']} "
          f"train_bytes_per_device={p['train_params_bytes']} "
          f"sample_bytes_per_device={p['params_bytes']} "
          f"replicated_bytes={p['params_replicated_bytes']} tensor={p['sampling_mesh']['tensor']} "
          f"fsdp={p['mesh']['fsdp']}")
  for r in results:
    p = r["plan"]
    print(f"RESULT chip={r['chip']} train_gb={r['train_gb']:.4g} sample_gb={r['sample_gb']:.4g} "
          f"param_gb_per_device={r['param_gb']:.4g} hbm_gb={r['hbm_gb']:.4g} "
          f"target={'tpu' if r['target'] == 'tpu' else 'cpu_estimate'} "
          f"train_rows={p['train_rows']} train_len={p['train_tokens']} "
          f"cache_len={p['decode_slots']} sample_rows_per_host={p['rows_per_host']} "
          f"decode_temp_gb={p['decode']['temp'] / GB:.4g} "
          f"decode_temp_per_cache={p['decode']['temp'] / max(p['cache_bytes'], 1):.3g}")
  return results


if __name__ == "__main__":
  main()
