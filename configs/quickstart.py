"""The README's main job: everything embedded (SmolLM2 from its wheel), a few minutes on 2 CPU cores.

  python -m arenarl_jax.main --config=configs/quickstart.py --workdir=runs/quickstart

Args (after a colon, comma-separated): method=arenarl|grpo|gspo, topology=<tournament topology>,
group_size=<G>, runlocal (the smallest possible smoke run), e.g.
  --config=configs/quickstart.py:topology=round_robin,group_size=4
"""
from arenarl_jax import config_tree

ARGS = {"method": "arenarl", "topology": "single_elimination", "group_size": 4, "runlocal": False}


def get_config(arg=None):
  args = config_tree.parse_arg(arg, ARGS)
  c = config_tree.make_base_config()
  config_tree.apply_preset(c, args.method)
  c.tournament.topology = args.topology
  c.sampling.group_size = args.group_size
  c.sampling.max_new_tokens = 48
  c.sampling.cache_len = 512
  c.judge.backend = "rubric"  # programmatic rubric judge: no judge server needed
  c.rl.prompts_per_step = 2
  if args.runlocal:
    c.sampling.group_size = 2
    c.sampling.max_new_tokens = 16
    c.rl.prompts_per_step = 1
  c.lock()
  return c
