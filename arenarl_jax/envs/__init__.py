"""Environments (worlds with tools, tasks, checkers, experts) and tool sources; see base.py."""
