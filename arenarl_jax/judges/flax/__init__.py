"""The local Flax judge: a model the loaders produce judges a round's matches in-process, jitted.

  judge       FlaxJudge, make_flax_judge (``backend="flax"``), load_judge_model
  programs    the logit mode's device programs: shared prefix, row extension, score reads
  reads       what logit mode reads: one key-path branch per score, and how scores combine
  sharing     which prompt tokens run once for several rows of a call (pure Python)
  generation  generative mode: the model writes verdicts, parsed like HTTP replies
  grammar     constrained decoding of the compact verdict (every reply parses)

Importing this package loads jax, flax and the model code.
"""
from arenarl_jax.judges.flax.judge import (FlaxJudge, FlaxJudgeSettings, load_judge_model,
                                          make_flax_judge)

__all__ = ["FlaxJudge", "FlaxJudgeSettings", "load_judge_model", "make_flax_judge"]
