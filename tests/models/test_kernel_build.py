"""The CPU kernel's build cache loads only what this user built (ownership, permissions, recorded
hash), and ARENARL_REQUIRE_KERNEL turns a failed build into a failing test run."""
import logging
import os
import pathlib
import stat
import subprocess
import sys
import tempfile

import pytest

from arenarl_jax.models.cpu import build

REPO = pathlib.Path(__file__).resolve().parents[2]


@pytest.fixture
def fake_compiler(tmp_path, monkeypatch):
  """$CXX = a script that writes a stand-in library to its -o path and counts its runs."""
  script = tmp_path / "fake-cxx"
  count = tmp_path / "runs"
  script.write_text("#!/bin/sh\n"
                    f'echo x >> "{count}"\n'
                    'while [ "$1" != "-o" ]; do shift; done\n'
                    'echo "stand-in library" > "$2"\n')
  script.chmod(0o755)
  monkeypatch.setenv("CXX", str(script))
  monkeypatch.setenv(build.CACHE_ENV, str(tmp_path / "kernels"))
  return lambda: len(count.read_text().split()) if count.exists() else 0


def test_cache_dir_is_private_and_a_tampered_library_is_rebuilt(fake_compiler):
  lib = build.build()
  folder = lib.parent
  assert stat.S_IMODE(os.stat(folder).st_mode) == 0o700 and fake_compiler() == 1
  recorded = lib.with_suffix(".sha256").read_text().strip()
  assert recorded == build._sha256(lib)  # pylint: disable=protected-access
  assert build.build() == lib and fake_compiler() == 1  # verified cache hit
  lib.write_text("tampered")
  assert build.build() == lib and fake_compiler() == 2  # refused, rebuilt in place
  assert lib.read_text() == "stand-in library\n"
  lib.chmod(0o777)  # writable by others: refused as well
  assert build.build() == lib and fake_compiler() == 3


def test_a_foreign_writable_cache_dir_is_refused(fake_compiler, tmp_path, caplog, monkeypatch):
  monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))  # the fallback directory goes here
  folder = tmp_path / "kernels"
  lib = build.build()
  assert lib.parent == folder and fake_compiler() == 1
  folder.chmod(0o777)  # anyone may now replace the library (and its recorded hash)
  with caplog.at_level(logging.WARNING):
    other = build.build()
  assert "not private" in caplog.text
  assert other.parent != folder and build.is_private(other.parent) and fake_compiler() == 2
  assert other.parent.parent == tmp_path


def _pytest_with_failing_compiler(tmp_path, require: bool):
  env = dict(os.environ, CXX="/bin/false", PYTHONPATH=str(REPO),
             **{build.CACHE_ENV: str(tmp_path / "kernels")})
  env.pop(build.REQUIRE_ENV, None)
  if require:
    env[build.REQUIRE_ENV] = "1"
  return subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider",
                         str(REPO / "tests/models/test_cache_attention.py")],
                        cwd=REPO, env=env, capture_output=True, text=True, timeout=300, check=False)


def test_a_failed_build_fails_the_kernel_tests_only_when_required(tmp_path):
  """With the compiler forced to fail: the kernel tests skip (the reference attention is used)
  without ARENARL_REQUIRE_KERNEL, and the run fails with it (as CI sets it)."""
  skipped = _pytest_with_failing_compiler(tmp_path, require=False)
  assert skipped.returncode == 0 and "skipped" in skipped.stdout, skipped.stdout[-2000:]
  failed = _pytest_with_failing_compiler(tmp_path, require=True)
  assert failed.returncode != 0, failed.stdout[-2000:]
  assert build.REQUIRE_ENV in failed.stdout + failed.stderr
