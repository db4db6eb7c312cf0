"""Shared fixtures: one corpus (built into a temporary cache), its index and an environment."""
from __future__ import annotations

import pytest

from arenarl_jax.envs.research import corpus as corpus_lib
from arenarl_jax.envs.research import environment, search


@pytest.fixture(scope="session")
def cache_dir(tmp_path_factory):
  return str(tmp_path_factory.mktemp("research_cache"))


@pytest.fixture(scope="session")
def corpus(cache_dir):
  return corpus_lib.load_corpus(cache_dir)


@pytest.fixture(scope="session")
def index(corpus):
  return search.make_index(corpus)


@pytest.fixture(scope="session")
def env(corpus):
  return environment.ResearchEnvironment(seed=0, corpus=corpus)
