"""grain pipelines over a built dataset's splits: RL prompt batches and tokenised SFT batches.

Order of operations (every process runs the same code on the same records)::

  data source -> shuffle(seed) -> repeat(epochs) -> [process_index::process_count] -> decode/render
  -> batch(per-process batch) -> IterDataset (read threads, prefetch)

The shuffle is a seeded permutation that changes each epoch, applied to the global stream before
it is dealt out round-robin to processes, so for one seed every process sees a fixed, disjoint
share of each epoch, and the order does not depend on the number of read threads. The iterator's
position (``get_state()``: the number of batches taken) is all a checkpoint needs:
:func:`position` / :func:`restore` (or :func:`save_position` / :func:`load_position` with a JSON
file) resume exactly where a run stopped.

Prompt batches are lists of :class:`records.Example`. SFT batches are
``{"tokens_NT", "loss_mask_NT"}`` int32 arrays: each example is rendered and tokenised at read time
with the run's tokenizer (records store messages, not ids), cut to ``seq_len`` and right-padded
with the tokenizer's pad id (mask 0).
"""
from __future__ import annotations

import json
import os
import tempfile
from typing import Any, Mapping, Sequence

import grain
import numpy as np

from arenarl_jax.text import messages as messages_lib
from arenarl_jax.data import records, renaming
from arenarl_jax.data.settings import DataSettings
from arenarl_jax.sft.settings import SftSettings


def process_shard(process_index: int | None = None,
                  process_count: int | None = None) -> tuple[int, int]:
  """(index, count) of this process; defaults from ``jax.process_index()/process_count()``."""
  if process_index is None or process_count is None:
    import jax  # only when not given: building datasets must not need an initialised backend
    process_index = jax.process_index() if process_index is None else process_index
    process_count = jax.process_count() if process_count is None else process_count
  if not 0 <= process_index < process_count:
    raise ValueError(f"process_index {process_index} is outside [0, {process_count})")
  return int(process_index), int(process_count)


def local_batch_size(global_batch_size: int, process_count: int) -> int:
  """Each process's share of a global batch (which must divide evenly)."""
  if global_batch_size <= 0 or global_batch_size % process_count:
    raise ValueError(f"global batch size {global_batch_size} must be a positive multiple of the "
                     f"process count {process_count}")
  return global_batch_size // process_count


def examples(source: Any, *, seed: int, shuffle: bool = True, epochs: int = 0,
             process_index: int | None = None,
             process_count: int | None = None) -> grain.MapDataset:
  """This process's share of the (shuffled, repeated) records, decoded to ``records.Example``.

  ``epochs=0`` repeats forever; ``source`` is any random-access source of records
  (``builder.data_source(path, split)``).
  """
  if epochs < 0:
    raise ValueError(f"epochs must be >= 0 (0 = repeat forever), got {epochs}")
  if len(source) == 0:
    raise ValueError("the split holds no records")
  index, count = process_shard(process_index, process_count)
  ds = grain.MapDataset.source(source)
  if shuffle:
    ds = ds.shuffle(seed=seed)
  ds = ds.repeat(None if epochs == 0 else epochs)
  return ds[index::count].map(records.Example.from_record)


def _read_options(read_threads: int, prefetch: int) -> grain.ReadOptions:
  return grain.ReadOptions(num_threads=read_threads, prefetch_buffer_size=prefetch)


def prompt_batches(source: Any, *, batch_size: int, seed: int, shuffle: bool = True,
                   epochs: int = 0, drop_remainder: bool = True, process_index: int | None = None,
                   process_count: int | None = None, read_threads: int = 0,
                   prefetch: int = 0) -> grain.IterDataset:
  """Batches (lists) of ``batch_size`` prompts for this process (``batch_size`` is local)."""
  ds = examples(source, seed=seed, shuffle=shuffle, epochs=epochs, process_index=process_index,
                process_count=process_count)
  ds = ds.batch(batch_size, drop_remainder=drop_remainder, batch_fn=list)
  return ds.to_iter_dataset(_read_options(read_threads, prefetch))


REASONING = ("all", "calls", "none")


def keeps_reasoning(message: Mapping[str, Any], reasoning: str) -> bool:
  """Whether an SFT row keeps this message's reasoning under ``sft.reasoning``."""
  return (message.get("role") != "assistant" or reasoning == "all"
          or (reasoning == "calls" and bool(message.get("tool_calls"))))


def sft_messages(messages, reasoning: str) -> list:
  """The conversation as an SFT row shows it: reasoning kept only where ``sft.reasoning`` keeps it."""
  return [m if keeps_reasoning(m, reasoning) else
          {k: v for k, v in m.items() if k != "reasoning_content"} for m in messages]


class SFTFeatures:
  """Example -> ``{"tokens_T": int32, "loss_mask_T": float32}`` (length ``seq_len``) at read time.

  The loss weight is 1 on what the policy writes (the render's mask) and ``context_weight`` on
  every other token after the first turn (the user's query, the tool results, the role headers):
  predicting a tool result means copying the call's names from a few lines up, which teaches a
  model trained from scratch to copy long before the few assistant tokens alone do. The first
  turn (the system prompt and its tool schemas, the same in every conversation) keeps weight 0.
  With ``first_turn_only`` a row ends where the first assistant turn does (the query and the
  calls it asks for: ``sft.first_turn_steps``). ``reasoning`` says which assistant turns keep
  their ``reasoning_content`` (``<think>`` block): ``all``, ``calls`` (the turns that call tools;
  the answer turn starts with the answer) or ``none``.
  """

  def __init__(self, tokenizer: Any, *, seq_len: int,
               tools: Sequence[Mapping[str, Any]] | None = None,
               render: messages_lib.RenderFn | None = None, context_weight: float = 0.0,
               first_turn_only: bool = False, reasoning: str = "all"):
    if seq_len <= 0:
      raise ValueError(f"seq_len must be positive, got {seq_len}")
    if not 0.0 <= context_weight <= 1.0:
      raise ValueError(f"sft.context_weight must be in [0, 1], got {context_weight}")
    if reasoning not in REASONING:
      raise ValueError(f"sft.reasoning={reasoning!r}; known: {', '.join(REASONING)}")
    self.reasoning = reasoning
    self.tokenizer, self.seq_len, self.tools = tokenizer, seq_len, list(tools or ())
    self.render = render or messages_lib.render_sft
    self.context_weight = float(context_weight)
    self.first_turn_only = bool(first_turn_only)

  def __call__(self, example: records.Example) -> dict[str, np.ndarray]:
    if not example.messages:
      raise ValueError(f"{example.task_id}: no messages to train on (is this the sft split?)")
    messages = sft_messages(example.messages, self.reasoning)
    ids, mask = self.render(messages, self.tokenizer, self.tools or None)
    if len(ids) != len(mask):
      raise ValueError(f"{example.task_id}: render gave {len(ids)} ids but {len(mask)} mask values")
    n = min(len(ids), self.seq_len)
    if self.first_turn_only:
      n = min(n, first_turn_end(mask))
    tokens_T = np.full(self.seq_len, self.tokenizer.pad_id, np.int32)
    loss_mask_T = np.zeros(self.seq_len, np.float32)
    tokens_T[:n] = ids[:n]
    loss_mask_T[:n] = mask[:n]
    if self.context_weight:
      first_end = ids.index(self.tokenizer.eos_id) if self.tokenizer.eos_id in ids else n
      context = np.arange(self.seq_len) > first_end
      context[n:] = False
      loss_mask_T[context & (loss_mask_T == 0)] = self.context_weight
    return {"tokens_T": tokens_T, "loss_mask_T": loss_mask_T}


def first_turn_end(mask: Sequence[int]) -> int:
  """The index after the first assistant turn (the end of the mask's first run of 1s)."""
  mask = np.asarray(mask)
  on = np.flatnonzero(mask == 1)
  if not len(on):
    return len(mask)
  off = np.flatnonzero(mask[on[0]:] != 1)
  return int(on[0] + (off[0] if len(off) else len(mask) - on[0]))


def trained_width(loss_mask_NT: np.ndarray, bucket: int) -> int:
  """Where an SFT batch can be cut: just after its last trained token (nonzero weight), rounded
  up to a multiple of ``bucket`` and never past the rows' length (``bucket`` 0: no cut).

  Attention is causal and every trained position lies before the cut, so the loss and its
  gradient are those of the whole rows; only the trailing padding goes. A quickstart
  conversation averages about 780 of its row's 1,856 tokens, so the whole-row update spends more
  than half its work on padding. Rounding to a bucket keeps the number of compiled shapes at
  ``seq_len / bucket``.
  """
  t = loss_mask_NT.shape[1]
  if bucket <= 0:
    return t
  cols = np.flatnonzero(np.asarray(loss_mask_NT).any(axis=0))
  last = int(cols[-1]) + 1 if cols.size else 1
  return min(t, -(-last // bucket) * bucket)


def cut(batch: Mapping[str, np.ndarray], width: int) -> dict[str, np.ndarray]:
  """An SFT batch's rows cut to their first ``width`` tokens (``trained_width``), as the
  trainer takes them: int32 tokens, float32 loss weights, temperature 1."""
  n = batch["tokens_NT"].shape[0]
  return {"tokens_NT": batch["tokens_NT"][:, :width].astype(np.int32),
          "loss_mask_NT": batch["loss_mask_NT"][:, :width].astype(np.float32),
          "temperature_N": np.ones((n,), np.float32)}


def _stack(rows: Sequence[Mapping[str, np.ndarray]]) -> dict[str, np.ndarray]:
  return {"tokens_NT": np.stack([r["tokens_T"] for r in rows]),
          "loss_mask_NT": np.stack([r["loss_mask_T"] for r in rows])}


def sft_batches(source: Any, *, tokenizer: Any, seq_len: int, batch_size: int, seed: int,
                tools: Sequence[Mapping[str, Any]] | None = None,
                render: messages_lib.RenderFn | None = None, shuffle: bool = True,
                epochs: int = 0, process_index: int | None = None,
                process_count: int | None = None, read_threads: int = 0,
                prefetch: int = 0, context_weight: float = 0.0,
                first_turn_only: bool = False, reasoning: str = "all",
                renamer: renaming.Renamer | None = None) -> grain.IterDataset:
  """Batches of ``batch_size`` tokenised SFT conversations for this process; with ``renamer``,
  a share of them in a renamed world (``data/renaming.py``; random per row and epoch, seeded)."""
  features = SFTFeatures(tokenizer, seq_len=seq_len, tools=tools, render=render,
                         context_weight=context_weight, first_turn_only=first_turn_only,
                         reasoning=reasoning)
  ds = examples(source, seed=seed, shuffle=shuffle, epochs=epochs, process_index=process_index,
                process_count=process_count)
  if renamer is not None and renamer.share > 0:
    ds = ds.random_map(renamer, seed=seed)
  ds = ds.map(features)
  ds = ds.batch(batch_size, drop_remainder=True, batch_fn=_stack)
  return ds.to_iter_dataset(_read_options(read_threads, prefetch))


def prompt_batches_for(d: DataSettings, prompts_per_step: int, source: Any, *,
                       process_index: int | None = None,
                       process_count: int | None = None) -> grain.IterDataset:
  """RL prompts read as ``data.*`` says: ``prompts_per_step`` (``rl.prompts_per_step``) is the
  global batch, split evenly over processes."""
  index, count = process_shard(process_index, process_count)
  return prompt_batches(source, batch_size=local_batch_size(prompts_per_step, count),
                        seed=d.seed, shuffle=d.shuffle, epochs=d.epochs, process_index=index,
                        process_count=count, read_threads=d.read_threads, prefetch=d.prefetch)


def sft_batches_for(d: DataSettings, s: SftSettings, source: Any, *, tokenizer: Any,
                    tools: Sequence[Mapping[str, Any]] | None = None,
                    render: messages_lib.RenderFn | None = None,
                    process_index: int | None = None,
                    process_count: int | None = None,
                    first_turn: bool = False,
                    name_groups: Mapping[str, Sequence[str]] | None = None
                    ) -> grain.IterDataset:
  """SFT batches read as ``data.*`` and shaped as ``sft.*`` says: ``data.sft_batch_size`` is
  the global batch, split evenly over processes. ``first_turn``: the first-turn phase's rows
  instead (``sft.first_turn_rows`` of ``sft.first_turn_seq_len`` tokens, each cut after its
  first assistant turn). ``name_groups`` (the environment's ``name_groups()``) lets
  ``sft.rename_share`` of the rows be renamed."""
  index, count = process_shard(process_index, process_count)
  seq_len, rows = ((s.first_turn_seq_len, s.first_turn_rows) if first_turn else
                   (d.sft_seq_len, d.sft_batch_size))
  return sft_batches(source, tokenizer=tokenizer, seq_len=seq_len,
                     batch_size=local_batch_size(rows, count), seed=d.seed,
                     tools=tools, render=render, shuffle=d.shuffle, epochs=d.epochs,
                     process_index=index, process_count=count, read_threads=d.read_threads,
                     prefetch=d.prefetch, context_weight=s.context_weight,
                     first_turn_only=first_turn, reasoning=s.reasoning,
                     renamer=(renaming.Renamer(name_groups, s.rename_share)
                              if name_groups and s.rename_share > 0 else None))


def position(iterator: grain.DatasetIterator) -> dict[str, Any]:
  """The iterator's position as a JSON-serialisable dict (store it with the checkpoint)."""
  return json.loads(json.dumps(iterator.get_state()))


def restore(iterator: grain.DatasetIterator, state: Mapping[str, Any]) -> None:
  """Moves a fresh iterator of the same pipeline to a saved position."""
  iterator.set_state(dict(state))


def save_position(path: str, iterator: grain.DatasetIterator) -> None:
  """Writes :func:`position` as JSON, atomically (a crash never leaves half a file)."""
  directory = os.path.dirname(os.path.abspath(path))
  os.makedirs(directory, exist_ok=True)
  fd, tmp = tempfile.mkstemp(dir=directory, prefix=".position-")
  with os.fdopen(fd, "w") as f:
    json.dump(position(iterator), f)
  os.replace(tmp, path)


def load_position(path: str, iterator: grain.DatasetIterator) -> None:
  """Restores an iterator from a file written by :func:`save_position`."""
  with open(path) as f:
    restore(iterator, json.load(f))
