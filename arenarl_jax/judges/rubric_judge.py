"""Programmatic rubric judge: ground-truth dimension scores from a task checker, plus a noise model.

For synthetic environments whose checker knows the truth. The noise model makes the judge as bad as
an experiment wants, so the discriminative collapse of pointwise scoring (and how bidirectional
pairwise play resists it) can be studied. Per request, for each agent and dimension::

  x = checker score (0-10)  ->  saturated: knee + (1 - saturation) * (x - knee) above the knee
    + N(0, pointwise_std)                    (every agent, every dimension, every request)
    + eps / 2 for A, - eps / 2 for B with eps ~ N(0, pairwise_std)   (pairwise requests)
    + position_bias for Agent_A                                      (pairwise requests)
  -> rounded to an integer (``integer_scores``) -> clipped to [0, 10]

then overall/combined exactly as for an LLM judge's reply. Saturation models a judge that gives
every good trajectory 8-9 when it scores one alone; by default it applies to pointwise requests only
(``saturate_pairwise`` applies it to both). Noise is drawn from ``seed``, the call number and the
match's position in the batch, so the same seed and the same calls give the same results.
"""
from __future__ import annotations

from typing import Any, Callable, Mapping, Sequence

import numpy as np

from arenarl_jax.judges import registry
from arenarl_jax.judges import rubric as rubric_lib
from arenarl_jax.judges.settings import NoiseModel  # noqa: F401 (re-exported)
from arenarl_jax.judges import stats
from arenarl_jax.judges import verdict as verdict_lib
from arenarl_jax.settings import settings_from_config
from arenarl_jax.types import Match, MatchResult, Trajectory

Checker = Callable[[Trajectory], Mapping[str, Mapping[str, float]]]


class RubricJudge:
  """Pairwise ``judge(matches)`` and pointwise ``score(trajectories)`` from a task checker."""

  def __init__(self, checker: Checker, rubric: rubric_lib.Rubric | str = "travel",
               noise: NoiseModel = NoiseModel(), seed: int = 0):
    if not callable(checker):
      raise TypeError(f"checker must be callable (trajectory -> scores), got {type(checker)}")
    self.checker = checker
    self.rubric = rubric_lib.load_rubric(rubric)
    self.noise = noise
    self.seed = int(seed)
    self.metrics = stats.JudgeMetrics()
    self._calls = 0  # batches judged or scored so far: part of every noise draw's seed

  def __repr__(self) -> str:
    return f"RubricJudge(rubric={self.rubric.name!r}, noise={self.noise}, seed={self.seed})"

  def judge(self, matches: Sequence[Match], *, offset: int = 0) -> list[MatchResult]:
    """Both orders of every match (two simulated requests each); aligned with ``matches``.

    ``offset``: the position of ``matches[0]`` in the whole batch when this is one host's share
    of it, so the share draws the noise the whole batch would draw for those matches."""
    call = self._next_call()
    truth = _TruthCache(self, "matches")
    results = []
    for k, m in enumerate(matches):
      if m.p is None or m.q is None:
        raise ValueError(f"matches[{k}] (group {m.group}, {m.i} vs {m.j}) has no trajectories")
      p, q = truth.get(m.p, f"matches[{k}].p"), truth.get(m.q, f"matches[{k}].q")
      fwd = self._pairwise(p, q, np.random.default_rng([self.seed, 0, call, offset + k, 0]))
      bwd = self._pairwise(q, p, np.random.default_rng([self.seed, 0, call, offset + k, 1]))
      results.append(verdict_lib.combine(fwd, bwd, requests=2))
      self.metrics.orders((fwd.a.combined, fwd.b.combined), (bwd.a.combined, bwd.b.combined))
    self.metrics.add("matches", len(results))
    self.metrics.add("requests", 2 * len(results))
    return results

  def score(self, trajectories: Sequence[Trajectory], *,
            offset: int = 0) -> verdict_lib.PointwiseScores:
    """Pointwise combined scores in [0, 10] (GRPO/GSPO baselines), float32 [N]; ``offset`` as in
    ``judge``."""
    call = self._next_call()
    truth = _TruthCache(self, "trajectories")
    scores = np.empty(len(trajectories), np.float32)
    for k, t in enumerate(trajectories):
      path, answer = truth.get(t, f"trajectories[{k}]")
      rng = np.random.default_rng([self.seed, 1, call, offset + k])
      scores[k] = self._agent(path, answer, rng, saturate=True, shift=0.0).combined
    self.metrics.add("matches", len(trajectories))
    self.metrics.add("requests", len(trajectories))
    return verdict_lib.PointwiseScores(scores, np.ones(len(trajectories), bool),
                                       (None,) * len(trajectories))

  def state_dict(self) -> dict[str, Any]:
    """The batches judged so far: every noise draw's seed includes it, so a resumed run that
    restores it draws the noise an uninterrupted run would."""
    return {"calls": self._calls}

  def load_state_dict(self, state: Mapping[str, Any]) -> None:
    self._calls = int(state.get("calls", 0))

  def _next_call(self) -> int:
    self._calls += 1
    return self._calls - 1

  def _pairwise(self, a, b, rng: np.random.Generator) -> verdict_lib.PairVerdict:
    eps = rng.normal(0.0, self.noise.pairwise_std) if self.noise.pairwise_std else 0.0
    sat = self.noise.saturate_pairwise
    va = self._agent(*a, rng, saturate=sat, shift=eps / 2 + self.noise.position_bias)
    vb = self._agent(*b, rng, saturate=sat, shift=-eps / 2)
    return verdict_lib.PairVerdict(va, vb)

  def _agent(self, path: np.ndarray, answer: np.ndarray, rng: np.random.Generator,
             saturate: bool, shift: float) -> verdict_lib.AgentScores:
    n = self.noise
    x = np.concatenate([path, answer])
    if saturate and n.saturation:
      x = np.where(x > n.saturation_knee, n.saturation_knee + (1 - n.saturation) *
                   (x - n.saturation_knee), x)
    if n.pointwise_std:
      x = x + rng.normal(0.0, n.pointwise_std, size=x.shape)
    x = x + shift
    if n.integer_scores:
      x = np.floor(x + 0.5)  # half-up, like rubric.round_half_up
    x = np.clip(x, rubric_lib.MIN_SCORE, rubric_lib.MAX_SCORE)
    return verdict_lib.score_agent(self.rubric, x[:len(path)].tolist(), x[len(path):].tolist())


def make_rubric_judge(cfg: Mapping[str, Any], checker: Checker | None = None) -> RubricJudge:
  """``backend="rubric"``: a programmatic judge; ``checker`` comes from the environment."""
  if checker is None:
    raise ValueError("judge.backend='rubric' needs make_judge(config, checker=...): a callable "
                     "trajectory -> {'path': {dim: 0-10}, 'answer': {dim: 0-10}}")
  noise = settings_from_config(NoiseModel, cfg.get("noise"), "judge.noise")
  return RubricJudge(checker, rubric=registry.rubric_name(cfg), noise=noise,
                     seed=int(cfg.get("seed", 0)))


class _TruthCache:
  """Checker results for one batch (each trajectory object checked once)."""

  def __init__(self, judge: RubricJudge, what: str):
    self._judge, self._what = judge, what
    self._seen: dict[int, tuple[Any, tuple[np.ndarray, np.ndarray]]] = {}

  def get(self, traj: Trajectory, where: str) -> tuple[np.ndarray, np.ndarray]:
    hit = self._seen.get(id(traj))
    if hit is not None:
      return hit[1]
    raw = self._judge.checker(traj)
    scores = verdict_lib.scores_from_mapping(self._judge.rubric, raw, where=f"checker({where})")
    value = (np.asarray(scores.path, np.float64), np.asarray(scores.answer, np.float64))
    self._seen[id(traj)] = (traj, value)  # keep traj alive so its id is not reused
    return value
