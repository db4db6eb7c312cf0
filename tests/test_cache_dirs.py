"""The one cache-folder lookup: a cache's own variable, else the shared root, else XDG / ~/.cache."""
import os

import pytest

from arenarl_jax import cache_dirs


@pytest.fixture
def clean_env(monkeypatch):
  for name in ("ARENARL_JAX_CACHE", "XDG_CACHE_HOME", "ARENARL_KERNEL_CACHE"):
    monkeypatch.delenv(name, raising=False)
  return monkeypatch


def test_default_is_under_the_home_cache(clean_env):
  home = os.path.expanduser("~/.cache")
  assert cache_dirs.cache_dir("params") == os.path.join(home, "arenarl_jax", "params")
  clean_env.setenv("XDG_CACHE_HOME", "")  # empty counts as unset
  assert cache_dirs.cache_dir("kernels", "ARENARL_KERNEL_CACHE") == os.path.join(
      home, "arenarl_jax", "kernels")


def test_xdg_then_shared_root_then_own_variable(clean_env, tmp_path):
  clean_env.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
  assert cache_dirs.cache_dir("datasets") == str(tmp_path / "xdg" / "arenarl_jax" / "datasets")
  clean_env.setenv("ARENARL_JAX_CACHE", str(tmp_path / "root"))
  assert cache_dirs.cache_dir("tokenizers") == str(tmp_path / "root" / "tokenizers")
  # A cache's own variable names the whole folder (no kind appended), "~" expanded.
  clean_env.setenv("ARENARL_KERNEL_CACHE", "~/kernels")
  assert cache_dirs.cache_dir("kernels", "ARENARL_KERNEL_CACHE") == os.path.expanduser(
      "~/kernels")
  clean_env.setenv("ARENARL_KERNEL_CACHE", "")
  assert cache_dirs.cache_dir("kernels", "ARENARL_KERNEL_CACHE") == str(
      tmp_path / "root" / "kernels")
