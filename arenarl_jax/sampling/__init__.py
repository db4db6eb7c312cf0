"""Internals of the group sampler; the public API is arenarl_jax.sampling.sampler."""
