"""Loading any config imports neither jax nor a backend: checked in a fresh interpreter.

A config is read by the CLI, by colabs and by tools that only inspect it; its settings live in
standard-library modules (``arenarl_jax/settings.py``, ``*/settings.py``) so that reading it costs
milliseconds. One subprocess loads every config file with and without ``:smoke`` and reports
which heavy modules got imported.
"""
import glob
import json
import os
import subprocess
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
HEAVY = ("jax", "flax", "optax", "mcp", "httpx", "scipy", "numpy", "grain", "tensorflow")

_SCRIPT = r"""
import importlib.util, json, os, sys
loaded = []
for path in json.loads(sys.argv[1]):
  name = os.path.basename(path)[:-3]
  spec = importlib.util.spec_from_file_location(name, path)
  module = importlib.util.module_from_spec(spec)
  spec.loader.exec_module(module)
  args = [None] + (["smoke"] if "smoke" in module.ARGS else [])
  for arg in args:
    assert module.get_config(arg).is_locked
    loaded.append(f"{name}:{arg}")
heavy = sorted(m for m in json.loads(sys.argv[2]) if m in sys.modules)
print(json.dumps({"loaded": loaded, "heavy": heavy}))
"""


def test_every_config_loads_without_jax_or_any_backend():
  paths = sorted(glob.glob(os.path.join(ROOT, "configs", "*.py")))
  out = subprocess.run([sys.executable, "-c", _SCRIPT, json.dumps(paths), json.dumps(HEAVY)],
                       cwd=ROOT, capture_output=True, text=True, timeout=120, check=False)
  assert out.returncode == 0, out.stderr
  report = json.loads(out.stdout.strip().splitlines()[-1])
  for name in ("quickstart", "smollm2_travel", "research_quickstart", "qwen3_8b_pod"):
    assert {f"{name}:None", f"{name}:smoke"} <= set(report["loaded"]), report["loaded"]
  assert report["heavy"] == [], f"loading a config imported {report['heavy']}"
