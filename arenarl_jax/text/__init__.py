"""Text: tokenizers, the chat format and the messages a trajectory is made of.

  tokenizer.py       text <-> ids from an HF tokenizer directory or a GGUF file
  task_tokenizer.py  a small BPE trained on an environment's own text (models from scratch)
  chat_format.py     ChatML with tools, for models whose own template ignores them
  tool_calls.py      one generated turn -> reasoning, content and tool calls
  messages.py        reference messages <-> ``Trajectory.steps``; SFT ids and loss mask

Modules are imported by name (``from arenarl_jax.text import tokenizer``).
"""
