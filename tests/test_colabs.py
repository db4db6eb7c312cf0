"""The colabs run on their smoke setting, and are stored clean (no outputs, ``smoke = True``).

Each notebook in ``colabs/`` is executed by a fresh ``python3`` kernel (this interpreter's
ipykernel) with the colabs folder as its working directory, on one fake CPU device (the suite's
eight make the pipeline notebook slow), and must finish within ``MAX_SECONDS``.
"""
import os
import time

import nbclient
import nbformat
import pytest

import xla_flags

COLABS = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "colabs")
NAMES = ("01_tournament", "02_quickstart", "03_custom_environment", "04_tpu_pod")
MAX_SECONDS = 60.0


def _read(name):
  path = os.path.join(COLABS, f"{name}.ipynb")
  if not os.path.isfile(path):
    pytest.fail(f"colabs/{name}.ipynb is missing (tests/test_colabs.py expects {NAMES})")
  return nbformat.read(path, as_version=4)


@pytest.mark.parametrize("name", NAMES)
def test_notebook_runs_on_its_smoke_setting(name):
  nb = _read(name)
  env = dict(os.environ, XLA_FLAGS=xla_flags.with_devices(1))
  client = nbclient.NotebookClient(nb, timeout=120, kernel_name="python3",
                                   resources={"metadata": {"path": COLABS}})
  start = time.perf_counter()
  client.execute(env=env)  # passed on to the kernel manager's start_kernel
  seconds = time.perf_counter() - start
  assert seconds <= MAX_SECONDS, f"colabs/{name}.ipynb took {seconds:.1f} s > {MAX_SECONDS} s"
  print(f"colabs/{name}.ipynb: {seconds:.1f} s")


@pytest.mark.parametrize("name", NAMES)
def test_stored_notebook_has_no_outputs(name):
  nb = _read(name)
  first = nb.cells[0]
  assert first.cell_type == "code" and "smoke = True" in first.source, (
      f"colabs/{name}.ipynb: the first cell must set `smoke = True`, got {first.source!r}")
  for k, cell in enumerate(nb.cells):
    if cell.cell_type == "code":
      assert cell.outputs == [] and cell.execution_count is None, (
          f"colabs/{name}.ipynb cell {k} is stored with outputs or an execution count")
