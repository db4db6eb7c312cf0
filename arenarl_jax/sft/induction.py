"""Induction drills: a copy circuit learned before SFT, on rows of random ids said twice.

Copying a place from the query into a tool call needs a head that finds an earlier token and an
output that writes that token's own id (an induction circuit). A small model trained from
scratch on the expert's conversations rarely needs one: the world is small and fixed, so most
of its tokens can be recalled from memory, and the few that cannot (a place named in the query,
written about a dozen times in the whole SFT set) are too rare to pay for the circuit. On rows
that are a random run of ids followed by the same run again, copying is the only thing that
lowers the loss on the second half, and the circuit forms after a plateau at the unigram
entropy (a sharp drop, as in the induction-head literature: Olsson et al. 2022).

``sft.induction_steps`` > 0 runs these updates first, with their own optimizer
(``sft.induction_lr``, warmup and cosine over the drills alone), then the SFT stage starts from
the result with a fresh optimizer. Rows are ``sft.induction_rows`` x (2 x
``sft.induction_len``) tokens drawn uniformly from the tokenizer's ordinary ids (no special or
chat ids), so an update costs about a hundredth of an SFT update. The drills are a function of
(``data.seed``, step, host), so a rerun draws the same rows.
"""
from __future__ import annotations

from typing import Any

import jax
import numpy as np

from arenarl_jax import metrics as metrics_lib
from arenarl_jax.sft import loss as sft_loss
from arenarl_jax.sft.settings import SftSettings
from arenarl_jax.trainer import Trainer, make_optimizer

DRILL_DIR = "sft/induction"


def ordinary_ids(tokenizer: Any, vocab_size: int) -> np.ndarray:
  """The ids a drill draws from: every id below ``vocab_size`` that is not a special id."""
  special = set(tokenizer.special_ids)
  ids = np.asarray([i for i in range(min(vocab_size, tokenizer.vocab_size)) if i not in special],
                   np.int32)
  if ids.size < 2:
    raise ValueError(f"induction drills need at least 2 ordinary ids; the tokenizer has {ids.size}")
  return ids


def drill_batch(ids: np.ndarray, rows: int, length: int,
                rng: np.random.Generator) -> dict[str, np.ndarray]:
  """``rows`` drills of 2 x ``length`` tokens: a random run of ``ids``, then the same run.

  The loss weight is 1 on the second run's tokens after its first (the first repeated token
  could follow any id; every later one is determined by the first run), 0 elsewhere."""
  if rows < 1 or length < 2:
    raise ValueError(f"induction drills need rows >= 1 and length >= 2, got {rows} and {length}")
  run_NL = ids[rng.integers(0, ids.size, size=(rows, length))]
  tokens_NT = np.concatenate([run_NL, run_NL], axis=1).astype(np.int32)
  mask_NT = np.zeros(tokens_NT.shape, np.float32)
  mask_NT[:, length + 1:] = 1.0
  return {"tokens_NT": tokens_NT, "loss_mask_NT": mask_NT,
          "temperature_N": np.ones((rows,), np.float32)}


def run(s: SftSettings, graphdef, params, mesh, tokenizer: Any, vocab_size: int,
        out_dir: str | None = None):
  """``sft.induction_steps`` drill updates from ``params`` (a pure dict); returns the new
  parameters and the last logged metrics (the loss on the repeated runs, in nats per token)."""
  steps, rows = int(s.induction_steps), int(s.induction_rows)
  if steps <= 0:
    return params, {}
  if rows % jax.process_count():
    raise ValueError(f"sft.induction_rows={rows} must divide over {jax.process_count()} hosts")
  optim = {"lr": s.induction_lr, "schedule": "cosine", "warmup_steps": min(10, steps),
           "weight_decay": 0.0, "b1": s.b1, "b2": s.b2, "grad_clip": s.grad_clip}
  trainer = Trainer(graphdef, params, mesh, sft_loss.make_sft_loss(),
                    make_optimizer(optim, steps), chunk=s.logprob_chunk)
  state = trainer.init_state(params)
  del params
  ids = ordinary_ids(tokenizer, vocab_size)
  local_rows = rows // jax.process_count()
  writer = None if out_dir is None else metrics_lib.MetricsWriter(
      out_dir, tensorboard=False, jsonl=s.metrics.jsonl)
  last: dict[str, float] = {}
  try:
    for step in range(steps):
      rng = np.random.default_rng([int(s.data.seed), 7_001, step, jax.process_index()])
      batch = trainer.put_batch(drill_batch(ids, local_rows, int(s.induction_len), rng))
      state, m = trainer.step(state, None, batch)
      done = step + 1
      # Fetched every sft.log_every updates even unlogged: a bounded queue of dispatched steps.
      if done % max(int(s.log_every), 1) == 0 or done == steps:
        last = {k: float(v) for k, v in jax.device_get(m).items()}
        if writer is not None:
          last = writer.write(done, last)
  finally:
    if writer is not None:
      writer.close()
  return state.params, last

