"""A copy of a study folder's definition (study.py, README.md) in a fresh temporary folder, so a
test's runs write their results there and never into the repository's study."""
import shutil


def copy_study(tmp_path_factory, study):
  folder = tmp_path_factory.mktemp("study") / study.name
  folder.mkdir()
  for name in ("study.py", "README.md"):
    shutil.copy(study / name, folder / name)
  return folder
