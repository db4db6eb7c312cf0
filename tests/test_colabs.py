"""The colabs run on their smoke setting, and are stored clean (no outputs, ``smoke = True``).

Each notebook in ``colabs/`` is executed by a fresh ``python3`` kernel (this interpreter's
ipykernel) with the colabs folder as its working directory, on one fake CPU device (the suite's
eight make the pipeline notebook slow), and must finish within ``MAX_SECONDS``. A cell that raises
fails the test (nbclient's ``allow_errors=False``): each notebook has a "Checks" section whose
asserts say what it showed, and its install cell installs nothing where ``arenarl_jax`` imports.
"""
import os
import time

import nbclient
import nbformat
import pytest

from arenarl_jax.testing import xla_flags

COLABS = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "colabs")
NAMES = ("01_tournament", "02_quickstart", "03_custom_environment", "04_tpu_pod")
MAX_SECONDS = 60.0


def _read(name):
  path = os.path.join(COLABS, f"{name}.ipynb")
  if not os.path.isfile(path):
    pytest.fail(f"colabs/{name}.ipynb is missing (tests/test_colabs.py expects {NAMES})")
  return nbformat.read(path, as_version=4)


def _execute(nb):
  """Runs ``nb`` as the suite does; a cell that raises raises ``CellExecutionError`` here."""
  env = dict(os.environ, XLA_FLAGS=xla_flags.with_devices(1))
  client = nbclient.NotebookClient(nb, timeout=120, kernel_name="python3", allow_errors=False,
                                   resources={"metadata": {"path": COLABS}})
  client.execute(env=env)  # env is passed on to the kernel manager's start_kernel


@pytest.mark.parametrize("name", NAMES)
def test_notebook_runs_on_its_smoke_setting(name):
  nb = _read(name)
  start = time.perf_counter()
  _execute(nb)
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


def test_a_failed_check_fails_the_notebook():
  nb = nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell("x = 1"),
                                       nbformat.v4.new_code_cell("assert x == 2, 'a check'")])
  with pytest.raises(nbclient.exceptions.CellExecutionError, match="a check"):
    _execute(nb)


@pytest.mark.parametrize("name", NAMES)
def test_notebook_installs_from_a_clone_or_a_wheel_and_checks_what_it_shows(name):
  nb = _read(name)
  sources = [c.source for c in nb.cells]
  install = [s for s in sources if "pip wheel . -w dist" in s]
  assert len(install) == 1, f"colabs/{name}.ipynb: expected one install cell"
  assert "<org>" not in install[0] and 'if not _importable("arenarl_jax"):' in install[0], (
      f"colabs/{name}.ipynb: the install cell must install only where arenarl_jax does not import")
  heads = [k for k, c in enumerate(nb.cells)
           if c.cell_type == "markdown" and c.source.startswith("## Checks")]
  assert len(heads) == 1, f"colabs/{name}.ipynb: expected one '## Checks' section"
  checks = nb.cells[heads[0] + 1]
  assert checks.cell_type == "code" and "assert " in checks.source, (
      f"colabs/{name}.ipynb: the '## Checks' section must start with a code cell of asserts")
