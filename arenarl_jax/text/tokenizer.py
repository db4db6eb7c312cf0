"""Text <-> token ids, from a Hugging Face tokenizer directory or a GGUF file (no torch needed).

A GGUF file carries no ``tokenizer.json``: its byte-level BPE vocabulary, merges, token types,
special ids and chat template live in ``tokenizer.ggml.*`` metadata. ``Tokenizer.from_gguf``
rebuilds a ``tokenizers`` BPE from them once and caches the result as an ordinary HF directory
(``tokenizer.json`` + ``tokenizer_config.json``) keyed by the file's name, size and mtime, because
parsing the GGUF takes seconds and loading the cache takes a fraction of one.
"""
from __future__ import annotations

import functools
import json
import os
import shutil
import tempfile
import warnings
from typing import Any, Iterable, Sequence

import tokenizers
from tokenizers import decoders, models, pre_tokenizers, processors

from arenarl_jax import cache_dirs

# Bump when the rebuilt tokenizer changes, so stale caches are not reused.
_CACHE_VERSION = 1
_CONTROL = 3  # llama.cpp token type: control (special) token
_USER_DEFINED = 4  # llama.cpp token type: added token matched whole, but not special
# `tokenizer.ggml.pre` values whose split is GPT-2's regex, optionally after single-digit splitting.
# Others (llama3, qwen2, ...) use different regexes: refuse them rather than mis-tokenize.
_GPT2_PRE = frozenset({"default", "gpt2", "gpt-2"})
_DIGITS_THEN_GPT2_PRE = frozenset({"smollm", "starcoder", "refact", "codeshell"})


def gguf_cache_key(path: str, split_digits: bool | None = None) -> str:
  """Cache folder name for a GGUF file: its name, size, mtime (ns), options and format version."""
  st = os.stat(path)
  stem = os.path.splitext(os.path.basename(path))[0]
  digits = {None: "auto", True: "digits", False: "nodigits"}[split_digits]
  return f"{stem}-{st.st_size}-{st.st_mtime_ns}-{digits}-v{_CACHE_VERSION}"


def _token_content(value: Any) -> str | None:
  """A special token given in tokenizer_config.json as a string or an AddedToken dict."""
  if isinstance(value, dict):
    return value.get("content")
  return value


class Tokenizer:
  """A ``tokenizers.Tokenizer`` plus the special ids and chat template a model needs."""

  def __init__(self, backend: tokenizers.Tokenizer, *, eos_id: int, bos_id: int | None = None,
               pad_id: int | None = None, chat_template: str | None = None,
               add_bos: bool = False):
    self.backend = backend
    self._eos_id = int(eos_id)
    self._bos_id = None if bos_id is None else int(bos_id)
    # Padding defaults to EOS (what SmolLM2's GGUF and most chat models do).
    self._pad_id = self._eos_id if pad_id is None else int(pad_id)
    self.chat_template = chat_template
    self.add_bos = bool(add_bos)
    size = self.vocab_size
    for name, i in (("eos_id", self._eos_id), ("bos_id", self._bos_id), ("pad_id", self._pad_id)):
      if i is not None and not 0 <= i < size:
        raise ValueError(f"{name}={i} is outside the vocabulary (size {size})")

  # ---------------------------------------------------------------- construction
  @classmethod
  def from_hf_dir(cls, path: str) -> Tokenizer:
    """Loads ``tokenizer.json`` (+ ``tokenizer_config.json``, ``chat_template.jinja``) of a dir."""
    tok_file = os.path.join(path, "tokenizer.json")
    if not os.path.isfile(tok_file):
      raise FileNotFoundError(f"{tok_file} not found (a tokenizer directory needs tokenizer.json)")
    try:
      backend = tokenizers.Tokenizer.from_file(tok_file)
    except Exception as e:  # tokenizers raises a bare Exception on bad JSON.
      raise ValueError(f"{tok_file}: not a valid tokenizer.json: {e}") from e
    config = _read_json(os.path.join(path, "tokenizer_config.json"))
    model_config = _read_json(os.path.join(path, "config.json"))

    def resolve(key: str) -> int | None:
      content = _token_content(config.get(f"{key}_token"))
      if content is not None:
        i = backend.token_to_id(content)
        if i is None:
          raise ValueError(f"{path}/tokenizer_config.json: {key}_token {content!r} is not in the "
                           "vocabulary")
        return i
      i = model_config.get(f"{key}_token_id")
      if isinstance(i, list):  # some configs list several EOS ids; the first is the turn end.
        i = i[0] if i else None
      return i

    eos_id = resolve("eos")
    if eos_id is None:
      raise ValueError(f"{path}: no EOS token (tokenizer_config.json 'eos_token' or config.json "
                       "'eos_token_id')")
    template = config.get("chat_template")
    if isinstance(template, list):  # [{"name": ..., "template": ...}, ...]
      template = {t.get("name"): t.get("template") for t in template}.get("default")
    jinja_file = os.path.join(path, "chat_template.jinja")
    if template is None and os.path.isfile(jinja_file):
      with open(jinja_file, encoding="utf-8") as f:
        template = f.read()
    return cls(backend, eos_id=eos_id, bos_id=resolve("bos"), pad_id=resolve("pad"),
               chat_template=template, add_bos=bool(config.get("add_bos_token", False)))

  @classmethod
  def from_gguf(cls, path: str, *, cache_dir: str | None = None, use_cache: bool = True,
                split_digits: bool | None = None) -> Tokenizer:
    """Tokenizer of a GGUF file, built once and then loaded from ``cache_dir``.

    ``cache_dir`` defaults to ``$ARENARL_JAX_CACHE/tokenizers`` (else ``~/.cache/arenarl_jax/...``).
    ``split_digits``: see ``build_from_gguf``.
    """
    if not os.path.isfile(path):
      raise FileNotFoundError(f"GGUF file {path} not found")
    if not use_cache:
      return cls.build_from_gguf(path, split_digits=split_digits)
    cached = os.path.join(cache_dir or cache_dirs.cache_dir("tokenizers"),
                          gguf_cache_key(path, split_digits))
    if os.path.isfile(os.path.join(cached, "tokenizer.json")):
      try:
        return cls.from_hf_dir(cached)
      except (OSError, ValueError):
        shutil.rmtree(cached, ignore_errors=True)  # a broken cache is rebuilt, not trusted.
    tok = cls.build_from_gguf(path, split_digits=split_digits)
    try:
      tok.save_atomic(cached)
    except OSError as e:  # a read-only cache only costs speed.
      warnings.warn(f"could not cache the tokenizer of {path} in {cached}: {e}")
    return tok

  @classmethod
  def build_from_gguf(cls, path: str, *, split_digits: bool | None = None) -> Tokenizer:
    """Rebuilds the byte-level BPE described by a GGUF file's metadata (slow: parses the file).

    ``split_digits=None`` follows ``tokenizer.ggml.pre``: for "smollm" (and StarCoder-like) files
    every digit is split off before GPT-2's regex, as llama.cpp and SmolLM2's own tokenizer.json
    do. transformers' GGUF loader skips that step (``split_digits=False``); the two differ only
    where two or more whitespace characters directly precede a digit ("a  1", "\\n\\t0").
    """
    meta = _GGUFMetadata(path)
    kind = meta.get("tokenizer.ggml.model")
    if kind != "gpt2":
      raise ValueError(f"{path}: tokenizer.ggml.model={kind!r}; only byte-level BPE ('gpt2') "
                       "GGUF tokenizers are supported (load a HF directory instead)")
    pre = meta.get("tokenizer.ggml.pre", "default")
    if pre not in _GPT2_PRE | _DIGITS_THEN_GPT2_PRE:
      raise ValueError(f"{path}: tokenizer.ggml.pre={pre!r} is not supported (known: "
                       f"{sorted(_GPT2_PRE | _DIGITS_THEN_GPT2_PRE)})")
    tokens = meta.get("tokenizer.ggml.tokens")
    vocab = {t: i for i, t in enumerate(tokens)}
    if len(vocab) != len(tokens):
      raise ValueError(f"{path}: tokenizer.ggml.tokens has duplicate entries")
    merges = []
    for k, m in enumerate(meta.get("tokenizer.ggml.merges")):
      pair = m.split(" ")
      if len(pair) != 2:
        raise ValueError(f"{path}: tokenizer.ggml.merges[{k}]={m!r} is not 'left right'")
      merges.append((pair[0], pair[1]))
    types = meta.get("tokenizer.ggml.token_type")
    if len(types) != len(tokens):
      raise ValueError(f"{path}: tokenizer.ggml.token_type has {len(types)} entries for "
                       f"{len(tokens)} tokens")

    backend = tokenizers.Tokenizer(models.BPE(vocab=vocab, merges=merges, fuse_unk=False))
    byte_level = pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True)
    if split_digits is None:
      split_digits = pre in _DIGITS_THEN_GPT2_PRE
    if split_digits:
      backend.pre_tokenizer = pre_tokenizers.Sequence(
          [pre_tokenizers.Digits(individual_digits=True), byte_level])
    else:
      backend.pre_tokenizer = byte_level
    backend.decoder = decoders.ByteLevel()
    backend.add_special_tokens([
        tokenizers.AddedToken(t, special=True, normalized=False)
        for t, ty in zip(tokens, types) if ty == _CONTROL])
    backend.add_tokens([
        tokenizers.AddedToken(t, special=False, normalized=False)
        for t, ty in zip(tokens, types) if ty == _USER_DEFINED])

    eos_id = meta.get("tokenizer.ggml.eos_token_id")
    bos_id = meta.get("tokenizer.ggml.bos_token_id", None)
    add_bos = bool(meta.get("tokenizer.ggml.add_bos_token", False))
    if add_bos:
      if bos_id is None:
        raise ValueError(f"{path}: tokenizer.ggml.add_bos_token is set but "
                         "tokenizer.ggml.bos_token_id is missing")
      bos = tokens[bos_id]
      backend.post_processor = processors.TemplateProcessing(
          single=f"{bos} $A", pair=f"{bos} $A {bos} $B", special_tokens=[(bos, bos_id)])
    return cls(backend, eos_id=eos_id, bos_id=bos_id,
               pad_id=meta.get("tokenizer.ggml.padding_token_id", None),
               chat_template=meta.get("tokenizer.chat_template", None), add_bos=add_bos)

  # ---------------------------------------------------------------- persistence
  def save(self, path: str) -> None:
    """Writes ``tokenizer.json`` and ``tokenizer_config.json`` (loadable by us and transformers)."""
    os.makedirs(path, exist_ok=True)
    self.backend.save(os.path.join(path, "tokenizer.json"))
    config = {
        "tokenizer_class": "PreTrainedTokenizerFast",
        "bos_token": None if self._bos_id is None else self.id_to_token(self._bos_id),
        "eos_token": self.id_to_token(self._eos_id),
        "pad_token": self.id_to_token(self._pad_id),
        "add_bos_token": self.add_bos,
        "clean_up_tokenization_spaces": False,
    }
    if self.chat_template is not None:
      config["chat_template"] = self.chat_template
    with open(os.path.join(path, "tokenizer_config.json"), "w", encoding="utf-8") as f:
      json.dump(config, f, ensure_ascii=False, indent=2)

  def save_atomic(self, path: str) -> None:
    """Saves into a temp dir beside ``path`` and renames it, so readers never see half a cache."""
    parent = os.path.dirname(os.path.abspath(path))
    os.makedirs(parent, exist_ok=True)
    tmp = tempfile.mkdtemp(prefix=".tmp-", dir=parent)
    try:
      self.save(tmp)
      os.replace(tmp, path)
    except OSError:
      if not os.path.isfile(os.path.join(path, "tokenizer.json")):
        raise
    finally:
      shutil.rmtree(tmp, ignore_errors=True)  # another process won the race: theirs is equal.

  # ---------------------------------------------------------------- text <-> ids
  def encode(self, text: str, *, add_special_tokens: bool = False) -> list[int]:
    """Token ids of ``text``; special-token strings in it (``<|im_start|>``) map to their ids.

    ``add_special_tokens`` adds the model's own BOS (only where its config asks for one).
    """
    if not isinstance(text, str):
      raise TypeError(f"encode expects a str, got {type(text).__name__}")
    return self.backend.encode(text, add_special_tokens=add_special_tokens).ids

  def encode_batch(self, texts: Sequence[str], *,
                   add_special_tokens: bool = False) -> list[list[int]]:
    """``encode`` over a list of strings (unpadded, one list per text)."""
    for k, t in enumerate(texts):
      if not isinstance(t, str):
        raise TypeError(f"encode_batch: texts[{k}] is a {type(t).__name__}, not a str")
    return [e.ids for e in self.backend.encode_batch(list(texts),
                                                     add_special_tokens=add_special_tokens)]

  @functools.cached_property
  def plain_backend(self) -> tokenizers.Tokenizer:
    """A copy of ``backend`` that encodes control-token text (``<|im_end|>``) as plain text: what
    a tool result or a user message must become, so text cannot forge a turn boundary. Made on
    first use and kept (a copy per call would cost more than the encoding)."""
    plain = tokenizers.Tokenizer.from_str(self.backend.to_str())
    plain.encode_special_tokens = True
    return plain

  def decode(self, ids: Iterable[int], skip_special_tokens: bool = False) -> str:
    """Text of ``ids`` (a list or an int array); special tokens are kept unless skipped."""
    ids = [int(i) for i in ids]
    size = self.vocab_size
    for k, i in enumerate(ids):
      if not 0 <= i < size:
        raise ValueError(f"decode: ids[{k}]={i} is outside the vocabulary (size {size})")
    return self.backend.decode(ids, skip_special_tokens=skip_special_tokens)

  def decode_batch(self, rows: Iterable[Iterable[int]],
                   skip_special_tokens: bool = False) -> list[str]:
    """``decode`` over several rows."""
    return [self.decode(r, skip_special_tokens=skip_special_tokens) for r in rows]

  # ---------------------------------------------------------------- vocabulary
  @property
  def vocab_size(self) -> int:
    return self.backend.get_vocab_size(with_added_tokens=True)

  @property
  def bos_id(self) -> int | None:
    return self._bos_id

  @property
  def eos_id(self) -> int:
    return self._eos_id

  @property
  def pad_id(self) -> int:
    return self._pad_id

  @property
  def special_ids(self) -> frozenset[int]:
    """Ids of all special (control) tokens."""
    return frozenset(i for i, t in self.backend.get_added_tokens_decoder().items() if t.special)

  def id_to_token(self, i: int) -> str:
    """The vocabulary string of id ``i`` (byte-level spelling, e.g. ``Ġthe``)."""
    token = self.backend.id_to_token(int(i))
    if token is None:
      raise KeyError(f"token id {i} is outside the vocabulary (size {self.vocab_size})")
    return token

  def token_to_id(self, token: str) -> int:
    """The id of a vocabulary string (byte-level spelling)."""
    i = self.backend.token_to_id(token)
    if i is None:
      raise KeyError(f"token {token!r} is not in the vocabulary")
    return i

  def __repr__(self) -> str:
    return (f"Tokenizer(vocab_size={self.vocab_size}, bos_id={self._bos_id}, "
            f"eos_id={self._eos_id}, pad_id={self._pad_id})")


_MISSING = object()


class _GGUFMetadata:
  """Key/value metadata of a GGUF file, with errors that name the file and the key."""

  def __init__(self, path: str):
    import gguf  # pylint: disable=g-import-not-at-top  (heavy; only needed to build a cache)
    self.path = path
    try:
      self._reader = gguf.GGUFReader(path)
    except Exception as e:  # gguf raises ValueError, struct.error, IndexError, ... on bad files.
      raise ValueError(f"{path}: not a readable GGUF file ({type(e).__name__}: {e})") from e

  def get(self, key: str, default: Any = _MISSING) -> Any:
    field = self._reader.fields.get(key)
    if field is None:
      if default is _MISSING:
        raise ValueError(f"{self.path}: GGUF metadata key {key!r} is missing")
      return default
    try:
      return field.contents()
    except Exception as e:
      raise ValueError(f"{self.path}: GGUF metadata key {key!r} is unreadable: {e}") from e


def _read_json(path: str) -> dict[str, Any]:
  """A JSON object from ``path``, or {} when the file does not exist."""
  if not os.path.isfile(path):
    return {}
  try:
    with open(path, encoding="utf-8") as f:
      data = json.load(f)
  except (OSError, json.JSONDecodeError) as e:
    raise ValueError(f"{path}: not valid JSON: {e}") from e
  if not isinstance(data, dict):
    raise ValueError(f"{path}: expected a JSON object, got {type(data).__name__}")
  return data
