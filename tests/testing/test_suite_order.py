"""tests/conftest.py's schedule: the long files it names exist, and pytest-xdist keeps their order."""
import os

TESTS = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def _root_conftest(pytestconfig):
  """tests/conftest.py as pytest loaded it (``import conftest`` may find another folder's)."""
  path = os.path.join(TESTS, "conftest.py")
  (module,) = [p for p in pytestconfig.pluginmanager.get_plugins()
               if os.path.abspath(getattr(p, "__file__", "") or "") == path]
  return module


def test_every_long_file_named_exists_once(pytestconfig):
  longest = _root_conftest(pytestconfig).LONGEST_FIRST
  missing = [name for name in longest if not os.path.isfile(os.path.join(TESTS, name))]
  assert not missing, f"tests/conftest.py LONGEST_FIRST names no file: {missing}"
  assert len(set(longest)) == len(longest)


def test_xdist_hands_out_files_in_collection_order(pytestconfig):
  # With reordering on, xdist would hand out the files with the most tests first.
  assert getattr(pytestconfig.option, "loadscopereorder", False) is False
