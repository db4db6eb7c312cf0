"""Which rows each SFT update trains on (sft.copy_steps, first_turn_steps, first_turn_every)."""
from arenarl_jax.sft.stage import phase_at


def test_first_turn_updates_come_back_every_kth_update_after_their_phase():
  phases = [phase_at(step, 2, 3, 4) for step in range(14)]
  assert phases == ["copy"] * 2 + ["first_turn"] * 3 + [
      "whole", "whole", "whole", "first_turn", "whole", "whole", "whole", "first_turn", "whole"]
  assert {phase_at(step, 0, 3, 0) for step in range(3, 50)} == {"whole"}  # the default: never
