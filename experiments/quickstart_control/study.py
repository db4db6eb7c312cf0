"""Does the quickstart's gain come from the tournament's ranking? The quickstart against two
controls that keep every advantage's magnitude and remove its information.

  python -m arenarl_jax.experiments.run experiments/quickstart_control            # full (hours)
  python -m arenarl_jax.experiments.run experiments/quickstart_control --preset=smoke

Arms, all from one shared SFT checkpoint (the runs' configs differ only in RL keys):
  arena    configs/quickstart.py:start=plain (``rl.advantage_control=none``): the quickstart
           with the SFT start that was its default when this study ran
  permute  the advantages shuffled within each group (``rl.advantage_control=permute``)
  flip     the advantages negated (``rl.advantage_control=flip``)
"""
from arenarl_jax.experiments import Claim, Run

ARMS = {"arena": "none", "permute": "permute", "flip": "flip"}
# The method's premise: the advantages carry the tournament's ranking.
PREMISE = "arXiv 2601.06487, method: advantages from the tournament's ranking"

CLAIMS = (
    Claim("RL with ArenaRL improves on its SFT start", "win_vs_reference", "arena", "start",
          source="arXiv 2601.06487, main results: ArenaRL 41.8 after RL"),
    Claim("RL with ArenaRL improves on its SFT start", "met", "arena", "start",
          source="arXiv 2601.06487, main results"),
    Claim("the ranking carries the gain: arena above permuted advantages", "met", "arena",
          "permute", source=PREMISE),
    Claim("the ranking carries the gain: arena above flipped advantages", "met", "arena", "flip",
          source=PREMISE),
)


def runs(preset):
  if preset == "full":
    return [Run(f"{arm}_s{seed}", arm, "configs/quickstart.py:start=plain", seed,
                {"rl.advantage_control": control})
            for arm, control in ARMS.items() for seed in (0, 1, 2)]
  if preset == "smoke":  # seconds per run: sharing, skipping and pooling two seeds, two arms
    return [Run(f"{arm}_s{seed}", arm, "configs/quickstart.py:smoke", seed,
                {"rl.advantage_control": ARMS[arm], "rl.steps": 1})
            for arm, seed in (("arena", 0), ("arena", 1), ("permute", 0))]
  raise ValueError(f"unknown preset {preset!r}; known: full, smoke")
