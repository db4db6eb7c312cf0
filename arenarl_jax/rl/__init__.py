"""Reinforcement learning: one step's experience, its advantages, the update and the loop.

  experience.py   prompts -> rollouts -> advantage source -> advantages + the step's stats
  advantages.py   the sources ``advantage.source`` names (arena, pointwise) and their controls
  rollout_log.py  the step's groups as ``<workdir>/rollouts/step_<k>.jsonl`` (with match logs)
  batch.py        trajectories + advantages -> the training batch
  losses.py       the clipped objective with its KL penalty (``loss.*`` registries), as the
                  trainer's loss (``make_rl_loss``; the update is ``arenarl_jax/trainer.py``)
  loop.py         the RL loop: prompt cursor, updates, checkpoints, resume
  stats.py        the judge's work and the rewards and advantages of one step

Modules are imported by name (``from arenarl_jax.rl import loop``): most load jax.
"""
