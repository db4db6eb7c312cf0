"""Local Flax judge: any model the loaders produce scores a round's matches in-process, jitted.

Both modes render exactly the HTTP judge's prompt (``render.py``: rubric system message, tagged
user message) in the model's ChatML format and judge every match in both orders (ARENARL §3):
score_p = fwd.A + bwd.B, score_q = fwd.B + bwd.A, each in [0, 20].

**Logit mode** (default; no generation). The system prompt (the compact verdict shape: dimension
scores only) is the same for every request, so it is prefilled once into a KV cache and copied to
all rows; each row adds its match-specific text. Each (agent, section, dimension) score is read
from its own branch, the verdict's JSON key path up to that score, e.g.
``{"Agent_B": {"answer": {"clarity": `` — never after the model's other scores, so no score is
anchored on another one. Score = the expected value of the model's distribution over the score
tokens 0..10, renormalised over them (``programs`` explains how a two-token "10" is read).
Overall per section = the mean of its dimension expectations and combined = the rubric's weighted
sum, *without* the rubric's rounding: rounding an expectation throws away the graded preference the
logits carry (two agents at 6.4 and 6.6 would both become 6 and tie), recreating the ties a
pairwise judge exists to break. Identical prompts (e.g. both orders of a self-match) are computed
once, so a self-match ties exactly, and distinct prompts run in a canonical order (a function of
the set of prompts alone), so swapping P and Q swaps the two sums exactly. Rows of one call that
begin with the same tokens (in a tournament, every match that shows the same trajectory first)
run that beginning once (``sharing``, ``min_shared_tokens``). Rows run in chunks of at most
``max_rows``, cut where they run the fewest padded tokens, with their text right-padded to length
buckets (``bucket_step``): one compiled program per (rows, bucket, shared beginnings, their
bucket). The programs are not sharded: they run on the default device. The model's own
API does the work (``fill``, ``branch_hidden``, ``head``), so attention runs on the model's chosen
implementation (``model.attention``; on CPU the compiled kernel, which reads only each query's
visible slots).

    judge = make_judge({"backend": "flax", "rubric": "travel", "flax": {"model": "smollm2"}})
    judge = FlaxJudge(model, tokenizer, FlaxJudgeSettings(max_rows=16), rubric="travel")
    results = judge.judge(matches)          # list[MatchResult], aligned with matches

**Generative mode**: the sampler (prefix prefilled once, rows extended, greedy by default)
writes the verdict, which is parsed strictly like an HTTP reply. By default decoding follows the
compact verdict's grammar (``grammar``: fixed text forced, scores restricted to 0..10),
so every reply parses; with ``constrained=False`` it decodes freely and an unparseable verdict
makes the match ``ok=False`` (neither player is ranked or trained on, never a tie:
``types.MatchResult``).

Prompts whose match-specific part exceeds ``max_user_tokens`` are re-rendered with smaller
character limits (so truncation keeps ``render.py``'s visible markers) until they fit.
"""
from __future__ import annotations

import collections
import dataclasses
import time
from typing import Any, Callable, Sequence

import jax
import numpy as np
from flax import nnx
from jax.sharding import Mesh

from arenarl_jax import sharding
from arenarl_jax.judges import registry, render
from arenarl_jax.judges import rubric as rubric_lib
from arenarl_jax.judges import stats
from arenarl_jax.judges import verdict as verdict_lib
from arenarl_jax.judges.flax import programs, reads, sharing
from arenarl_jax.judges.settings import FlaxJudgeSettings
from arenarl_jax.sampling import buckets
from arenarl_jax.settings import section_dict, settings_from_config
from arenarl_jax.text import chat_format
from arenarl_jax.types import Match, MatchResult, Stateless, Trajectory

_MAX_REFITS = 6  # re-renders with smaller character limits before a prompt counts as too long


@dataclasses.dataclass(frozen=True)
class _Row:
  """One prompt's match-specific token ids (or why it has none)."""

  ids: tuple[int, ...] | None
  error: str | None = None


class FlaxJudge(Stateless):
  """Pairwise ``judge(matches)`` and pointwise ``score(trajectories)`` with a local Flax model."""

  def __init__(self, model: nnx.Module, tokenizer, config: FlaxJudgeSettings = FlaxJudgeSettings(),
               rubric: rubric_lib.Rubric | str = "travel", compact: bool = False,
               limits: render.RenderLimits = render.RenderLimits(), mesh: Mesh | None = None):
    """``mesh``: the parameters are placed by ``sharding.py``'s partition rules (as
    ``load_model(mesh=...)`` places them) and the compiled programs run over it."""
    self.config = config
    self.tokenizer = tokenizer
    self.rubric = rubric_lib.load_rubric(rubric)
    # Logit mode reads the compact verdict and constrained decoding writes it, so the
    # instructions must describe that shape.
    self.compact = True if self.reads_compact(config) else bool(compact)
    self.limits = limits
    self.metrics = stats.JudgeMetrics()
    self.counts: collections.Counter = collections.Counter()  # flax-only counters, see snapshot()
    self.model = model
    self.mesh = mesh
    self.graphdef, self.params = nnx.split(model)
    if mesh is not None:
      self.params = sharding.shard_params(self.params, mesh)
    self.buckets = buckets.stepped_buckets(config.max_user_tokens, config.min_bucket,
                                             config.bucket_step)
    self.row_buckets = buckets.power_of_two_buckets(config.max_rows, 1)
    self._prefix: dict[str, tuple[list[int], Any]] = {}  # verdict mode -> (ids, cache)
    self._layouts: dict[str, programs.BranchLayout] = {}
    self.grammars: dict[str, Any] = {}  # verdict mode -> grammar.VerdictGrammar
    self.calls = 0

  @staticmethod
  def reads_compact(config: FlaxJudgeSettings) -> bool:
    return config.mode == "logit" or config.constrained

  def __repr__(self) -> str:
    return (f"FlaxJudge(model={type(self.model).__name__}, mode={self.config.mode!r}, "
            f"rubric={self.rubric.name!r})")

  # ------------------------------------------------------------------ public API
  def judge(self, matches: Sequence[Match], *, offset: int = 0) -> list[MatchResult]:
    """Both orders of every match; results align with ``matches``."""
    del offset  # greedy verdicts do not depend on a match's position
    rows: list[_Row] = []
    for k, m in enumerate(matches):
      if m.p is None or m.q is None:
        raise ValueError(f"matches[{k}] (group {m.group}, {m.i} vs {m.j}) has no trajectories")
      query = m.query or m.p.query
      for a, b in ((m.p, m.q), (m.q, m.p)):
        rows.append(self.prompt_row("pairwise", lambda lim, a=a, b=b, query=query: (
            render.render_pairwise(self.rubric, query, a, b, lim, self.compact))))
    agents = self._evaluate("pairwise", rows)
    results = []
    for k in range(len(matches)):
      (fwd, e1, d1), (bwd, e2, d2) = agents[2 * k], agents[2 * k + 1]
      if fwd is None or bwd is None:
        results.append(verdict_lib.failed(e1, e2, requests=2))
        continue
      self.metrics.orders(fwd, bwd)
      results.append(verdict_lib.combine_scores(fwd, bwd, requests=2, detail=_merge(d1, d2)))
    self._account(len(results), sum(not r.ok for r in results), requests=2 * len(results))
    return results

  def score(self, trajectories: Sequence[Trajectory], *,
            offset: int = 0) -> verdict_lib.PointwiseScores:
    """Pointwise 0-10 scores (the same rubric, one trajectory per prompt)."""
    del offset
    rows = [self.prompt_row("pointwise", lambda lim, t=t: (
        render.render_pointwise(self.rubric, t.query, t, lim, self.compact)))
            for t in trajectories]
    agents = self._evaluate("pointwise", rows)
    scores = np.array([a[0][0] if a[0] is not None else np.nan for a in agents], np.float32)
    ok = np.array([a[0] is not None for a in agents], bool)
    self._account(len(agents), int((~ok).sum()), requests=len(agents))
    return verdict_lib.PointwiseScores(scores, ok, tuple(a[1] for a in agents))

  def set_params(self, params: nnx.State) -> None:
    """New weights of the same structure (e.g. a judge sharing the policy's model)."""
    self.params = params
    self._prefix.clear()  # the prefix caches were computed with the old weights

  def snapshot(self) -> dict[str, float]:
    """``metrics.snapshot()`` (latency = one compiled call) plus the flax counters: rows
    (distinct prompts run), tokens (their real tokens), shared_tokens (of those, the ones not run
    because another row of the call ran the same beginning), padded_tokens (the tokens the
    compiled calls ran for them, padding included), branch_tokens (the score branches' tokens
    run after them), calls (compiled-program calls), compiles (programs traced during this
    judge's calls), refits (prompts re-rendered to fit the budget)."""
    out = self.metrics.snapshot()
    for name in ("rows", "tokens", "shared_tokens", "padded_tokens", "branch_tokens", "calls",
                 "compiles", "refits", "generated_tokens"):
      out[name] = self.counts[name]
    return out

  # ------------------------------------------------------------------ prompts
  def _prefix_text(self, verdict_mode: str) -> str:
    system = render.system_prompt(self.rubric, verdict_mode, self.compact)
    return chat_format.render_turn("system", system) + chat_format.IM_START + "user\n"

  def prompt_row(self, verdict_mode: str,
                 render_fn: Callable[[render.RenderLimits], render.Prompt]) -> _Row:
    """The tokens after the shared prefix, re-rendered with smaller limits until they fit."""
    budget, limits = self.config.max_user_tokens, self.limits
    prefix = self._prefix_text(verdict_mode)
    for attempt in range(_MAX_REFITS + 1):
      prompt = render_fn(limits)
      text = chat_format.render_messages(prompt.messages, add_generation_prompt=True)
      if not text.startswith(prefix):
        raise RuntimeError("the rendered prompt does not start with the judge's shared prefix")
      ids = self.tokenizer.encode(text[len(prefix):])
      if len(ids) <= budget:
        self.metrics.add("truncations", prompt.truncations)
        self.metrics.add("repairs", prompt.repairs)
        self.counts["refits"] += attempt
        return _Row(tuple(ids))
      smaller = _scaled(limits, 0.9 * budget / len(ids))
      if smaller == limits:
        break
      limits = smaller
    self.counts["refits"] += attempt
    return _Row(None, f"prompt needs {len(ids)} tokens after truncating every field to "
                      f"{dataclasses.asdict(limits)}; judge.flax.max_user_tokens={budget}")

  def prefix_state(self, verdict_mode: str):
    """(prefix ids, its one-row KV cache in logit mode) — built once per verdict mode."""
    if verdict_mode not in self._prefix:
      ids = self.tokenizer.encode(self._prefix_text(verdict_mode))
      if getattr(self.tokenizer, "add_bos", False) and self.tokenizer.bos_id is not None:
        ids = [self.tokenizer.bos_id] + ids
      cache = None
      if self.config.mode == "logit":
        before = sum(programs.TRACES.values())
        cache = programs.prefill_prefix(self.graphdef, self.params, np.asarray([ids]))
        self.counts["compiles"] += sum(programs.TRACES.values()) - before
      self._prefix[verdict_mode] = (ids, cache)
    return self._prefix[verdict_mode]

  def _layout(self, verdict_mode: str) -> programs.BranchLayout:
    if verdict_mode not in self._layouts:
      self._layouts[verdict_mode] = reads.branch_layout(
          self.tokenizer, reads.branch_texts(self.rubric, verdict_mode))
    return self._layouts[verdict_mode]

  # ------------------------------------------------------------------ evaluation
  def _evaluate(self, verdict_mode: str, rows: list[_Row]):
    """Per row: (per-agent combined scores or None, error or None, detail dict)."""
    self.calls += 1
    unique = sorted({r.ids for r in rows if r.ids is not None}, key=lambda ids: (len(ids), ids))
    if not unique:
      got = {}
    elif self.config.mode == "logit":
      got = self._logit_rows(verdict_mode, unique)
    else:
      from arenarl_jax.judges.flax import generation  # pylint: disable=g-import-not-at-top
      got = generation.verdict_rows(self, verdict_mode, unique)
    return [(None, r.error, {}) if r.ids is None else got[r.ids] for r in rows]

  def chunks(self, unique: list[tuple[int, ...]]):
    """(row ids, tokens [n, t] int32, lengths [n]) per chunk of rows by length, padded to its
    buckets (generative mode: nothing shared beyond the system prompt)."""
    for chunk in sharing.plan_chunks(unique, self.config.max_rows, 0):
      yield list(chunk.rows), *self._chunk_arrays(chunk)

  def _logit_rows(self, verdict_mode: str, unique: list[tuple[int, ...]]) -> dict:
    _, prefix = self.prefix_state(verdict_mode)
    layout = self._layout(verdict_mode)
    values = np.arange(programs.N_SCORES, dtype=np.float64)
    out = {}
    for chunk in self._plan(unique):
      arrays = self._chunk_arrays(chunk)
      before = sum(programs.TRACES.values())
      start = time.perf_counter()
      probs, mass = jax.device_get(programs.score_rows(
          self.graphdef, self.params, prefix, *arrays, layout=layout,
          block=self.config.block_tokens))
      self.metrics.latency(time.perf_counter() - start)
      self.counts["calls"] += 1
      self.counts["compiles"] += sum(programs.TRACES.values()) - before
      self.counts["branch_tokens"] += len(arrays[0]) * len(layout.tokens)
      expected = np.asarray(probs, np.float64) @ values  # [n, B]
      for r, ids in enumerate(chunk.rows):
        if not np.all(np.isfinite(expected[r])):
          out[ids] = (None, "the model's score distribution is not finite", {})
          continue
        out[ids] = (reads.combine_agents(self.rubric, verdict_mode, expected[r]), None,
                    {"score_mass": float(np.min(mass[r]))})
    return out

  def _plan(self, unique: list[tuple[int, ...]]) -> list[sharing.Chunk]:
    """The chunks for ``unique``, cut where they run the fewest padded tokens under this judge's
    buckets, with shared beginnings when that runs fewer of them (``sharing.plan_chunks``)."""
    # A call's fixed costs (dispatch, the prefix copy, smaller products per token, one more
    # program to compile) are charged as two blocks of tokens, so the plan does not trade a few
    # padded tokens for many small calls.
    return sharing.plan_chunks(unique, self.config.max_rows, self.config.min_shared_tokens,
                                    self._pad, self._pad_rows, 2 * self.config.block_tokens)

  def _pad(self, length: int) -> int:
    return buckets.bucket_length(length, self.buckets, what="prompt")

  def _pad_rows(self, rows: int) -> int:
    return buckets.bucket_length(rows, self.row_buckets, what="chunk rows")

  def _shape(self, chunk: sharing.Chunk) -> tuple[int, int, int, int]:
    """(rows, tail tokens, shared beginnings, their tokens) of ``chunk``'s padded arrays."""
    return sharing.padded_shape(chunk, self._pad, self._pad_rows)

  def _chunk_arrays(self, chunk: sharing.Chunk) -> tuple:
    """score_rows' arrays for ``chunk``, padded to its buckets: (tokens [n, t], lengths [n]) of
    what each row runs itself, then with shared beginnings (shared [B, L], group [n], offset
    [n]). Padding rows run one token and their results are dropped."""
    tails = chunk.tails()
    n, t, b, l = self._shape(chunk)
    tokens = np.zeros((n, t), np.int32)
    lengths = np.ones((n,), np.int32)
    for r, ids in enumerate(tails):
      tokens[r, :len(ids)] = ids
      lengths[r] = len(ids)
    self.counts["rows"] += len(tails)
    self.counts["tokens"] += int(sum(map(len, chunk.rows)))
    self.counts["padded_tokens"] += n * t + b * l
    if not chunk.shared:
      return tokens, lengths
    self.counts["shared_tokens"] += int(sum(chunk.offset) - sum(map(len, chunk.shared)))
    shared = np.zeros((b, l), np.int32)
    for g, ids in enumerate(chunk.shared):
      shared[g, :len(ids)] = ids
    group, offset = np.zeros((n,), np.int32), np.zeros((n,), np.int32)
    group[:len(tails)], offset[:len(tails)] = chunk.group, chunk.offset
    return tokens, lengths, shared, group, offset

  def _account(self, n: int, failed: int, requests: int) -> None:
    """``requests`` counts judge prompts (2 per match), as the HTTP judge counts requests."""
    self.metrics.add("matches", n)
    self.metrics.add("requests", requests)
    self.metrics.add("failed_matches", failed)


def _scaled(limits: render.RenderLimits, factor: float) -> render.RenderLimits:
  """Every character limit times ``factor`` (at least 16)."""
  values = {f.name: max(16, int(getattr(limits, f.name) * factor))
            for f in dataclasses.fields(limits)}
  return dataclasses.replace(limits, **values)


def _merge(d1: dict, d2: dict) -> dict:
  """Both orders' diagnostics: the smaller score mass, the summed arithmetic mismatches."""
  out = {}
  if "score_mass" in d1 and "score_mass" in d2:
    out["score_mass"] = min(d1["score_mass"], d2["score_mass"])
  if "mismatches" in d1 and "mismatches" in d2:
    out["mismatches"] = d1["mismatches"] + d2["mismatches"]
  return out


def make_flax_judge(cfg: Any, model: nnx.Module | None = None, tokenizer=None,
                    mesh: Mesh | None = None) -> FlaxJudge:
  """``backend="flax"``: ``judge.flax`` settings; ``model``/``tokenizer`` given or loaded.

  ``mesh`` (the pipeline passes this host's sampling mesh, ``sampling/layout.py``): the model is
  loaded straight into its partition rules' shardings there and the judge runs over it."""
  cfg = section_dict(cfg, "judge")
  config = settings_from_config(FlaxJudgeSettings, cfg.get("flax"), "judge.flax")
  limits = settings_from_config(render.RenderLimits, cfg.get("render"), "judge.render")
  if (model is None) != (tokenizer is None):
    raise ValueError("make_judge(backend='flax'): pass both model= and tokenizer=, or neither "
                     "(then judge.flax.model is loaded)")
  rubric = registry.rubric_name(cfg)  # before loading a model for nothing
  if model is None:
    model, tokenizer = load_judge_model(config.model, config.attention, mesh=mesh)
  return FlaxJudge(model, tokenizer, config, rubric=rubric,
                   compact=bool(cfg.get("compact", False)), limits=limits, mesh=mesh)


def load_judge_model(source: str, attention: str = "auto", mesh: Mesh | None = None):
  """(model, tokenizer) from "smollm2" (the embedded GGUF), a .gguf file or an HF directory;
  with ``mesh``, every parameter lands in its partition rule's sharding there."""
  from arenarl_jax.models import loading  # pylint: disable=g-import-not-at-top
  return (loading.load_model(source, attention=attention, mesh=mesh)[1],
          loading.load_tokenizer(source))
