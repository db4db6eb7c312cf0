"""Datasets: TFDS builders writing array_record (no TensorFlow), grain pipelines, a jsonl importer.

- ``records``: the record every split holds (ARCHITECTURE.md, "Datasets") and its JSON encoding.
- ``env_examples``: records from an environment's tasks and expert (built from ``env.seed``).
- ``importer``: records from the reference jsonl layout in a user directory, validated row by row.
- ``builder``: the TFDS builder (``ArenaDataset``) over either source; ``build`` / ``load``.
- ``render``: SFT rendering (messages -> ids + loss mask) used by the pipeline at read time.
- ``pipeline``: grain pipelines (seeded shuffle, process sharding, prompt and SFT batches) and the
  checkpointable iterator position.
- ``cli``: ``python -m arenarl_jax.data.cli build|show --config=...``.

Nothing here imports TensorFlow; ``tensorflow_datasets`` is used through its array_record data
sources only.
"""
