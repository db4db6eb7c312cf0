"""Where the package caches what it builds once: converted params, tokenizers, kernels, datasets.

Each cache is a folder named for its kind under one root, ``$ARENARL_JAX_CACHE``, else
``$XDG_CACHE_HOME/arenarl_jax``, else ``~/.cache/arenarl_jax`` (an empty variable counts as
unset). A cache with its own variable (``ARENARL_KERNEL_CACHE``, ``ARENARL_RESEARCH_CACHE``) is
that folder when it is set. Standard library only, so anything may import it.
"""
from __future__ import annotations

import os

ROOT_ENV = "ARENARL_JAX_CACHE"


def cache_dir(name: str, env_var: str | None = None) -> str:
  """The folder of the ``name`` cache (not created here: each cache sets its own permissions)."""
  own = os.environ.get(env_var) if env_var else None
  if own:
    return os.path.expanduser(own)
  root = os.environ.get(ROOT_ENV) or os.path.join(
      os.environ.get("XDG_CACHE_HOME") or os.path.expanduser("~/.cache"), "arenarl_jax")
  return os.path.join(root, name)
