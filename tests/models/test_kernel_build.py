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

from arenarl_jax.models.cpu import build, isa

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


# The kernel variants: built for the widest instruction set the CPU reports (AVX-512, else AVX2,
# else portable loops), never -march=native; a narrower one can be forced to keep its code path
# tested on a wider machine.
AVX512_CPU = frozenset("fpu avx2 fma avx512f avx512bw".split())
AVX2_CPU = frozenset("fpu avx2 fma".split())


@pytest.mark.parametrize("flags, want", [(AVX512_CPU, ("avx512", "avx2", "portable")),
                                         (AVX2_CPU, ("avx2", "portable")),
                                         (frozenset({"avx2"}), ("portable",)),  # FMA missing
                                         (frozenset(), ("portable",))])
def test_supported_variants_follow_the_cpu_flags(flags, want):
  assert isa.supported_isas(flags) == want
  kind = isa.cpu_kind(amx=True, flags=flags | {"amx_tile"})
  assert kind == ({"avx512": "avx512", "avx2": "avx2"}.get(want[0], isa.platform.machine())
                  + "+amx")


def test_the_variant_is_the_best_supported_unless_forced(monkeypatch):
  monkeypatch.setattr(isa, "cpu_flags", lambda: AVX2_CPU)
  monkeypatch.delenv(build.ISA_ENV, raising=False)
  assert build.variant() == "avx2"
  monkeypatch.setenv(build.ISA_ENV, "portable")
  assert build.variant() == "portable"
  assert "-mavx2" not in build._flags("portable")  # pylint: disable=protected-access
  assert "-mavx512f" in build._flags("avx512")  # pylint: disable=protected-access
  monkeypatch.setenv(build.ISA_ENV, "avx512")
  with pytest.raises(ValueError, match=f"{build.ISA_ENV}='avx512'.*supports only"):
    build.variant()
  monkeypatch.setenv(build.ISA_ENV, "sse9")
  with pytest.raises(ValueError, match="expected auto or one of"):
    build.variant()


@pytest.mark.skipif(not build.registered(), reason="no C++ compiler / not a CPU backend")
def test_the_loaded_library_is_the_variant_the_cpu_supports_best():
  """The library answers which instruction set it was compiled as: the machine's best, unless
  ARENARL_KERNEL_ISA narrows it."""
  assert build.loaded_variant() == build.variant()
  if not os.environ.get(build.ISA_ENV):
    assert build.loaded_variant() == isa.supported_isas()[0]


# One case of each kernel's agreement with the reference: the cache attention with a shared
# prefix (register tiles and a masked tail), the training forward and backward.
AGREEMENT = ["tests/models/test_cache_attention.py::test_kernel_equals_xla_attention_with_a_shared_prefix[7-128]",
             "tests/models/test_cache_attention.py::test_kernel_equals_xla_attention_with_a_shared_prefix[2-32]",
             "tests/models/test_causal_blocks.py::test_kernel_forward_equals_blocked_forward[37-64]",
             "tests/models/test_causal_blocks.py::test_kernel_backward_equals_blocked_backward[37-64]",
             "tests/models/test_kernel_build.py::test_the_loaded_library_is_the_variant_the_cpu_supports_best"]


@pytest.mark.skipif(not build.registered(), reason="no C++ compiler / not a CPU backend")
@pytest.mark.parametrize("variant", ["avx2", "portable"])
def test_a_narrower_variant_loads_and_agrees_with_the_reference(variant):
  """On a wider CPU, the narrower variants still build, load as themselves and agree with the
  reference attention (the machines here are AVX2 or AVX-512 Xeons: both paths stay tested)."""
  if variant not in isa.supported_isas() or variant == build.variant():
    pytest.skip(f"{variant} is this machine's own variant (the suite's kernel tests cover it)")
  env = dict(os.environ, PYTHONPATH=str(REPO), **{build.ISA_ENV: variant, build.REQUIRE_ENV: "1"})
  done = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider",
                         *AGREEMENT], cwd=REPO, env=env, capture_output=True, text=True,
                        timeout=600, check=False)
  assert done.returncode == 0 and f"{len(AGREEMENT)} passed" in done.stdout, done.stdout[-3000:]
