"""Fakes and helpers shared by the tests and the benchmarks; not used by the library.

``xla_flags`` (the test suite's compile flags), ``rollout_fakes`` (tool sources, a scripted
sampler, a real model steered into tool calls), ``mcp_fakes`` (the ``mcp_fake`` environment
and a slow tool source), ``lookup_world`` (a tool-use world a 2-layer model learns in seconds)
and ``closed_loop`` (twin RL runs in it, on the judge's advantages and on a control). Import them as ``from arenarl_jax.testing import rollout_fakes``; a
helper that only one test folder needs stays in that folder, next to its tests.
"""
