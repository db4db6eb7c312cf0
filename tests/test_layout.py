"""The package's layout rules, read from its source (no module is imported).

Dependencies point down: main -> pipeline -> eval, sft -> rl -> rollout -> judges, tournament,
envs, data, sampling -> text, models -> types, config_tree. Backend-specific code stays behind
``models/`` (only ``models/`` may import ``models.cpu``), and private names stay with their owner.
"""
import ast
import os
import pathlib

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[1]
PACKAGE = ROOT / "arenarl_jax"

# Attribute names that start with "_" but are public API of the standard library or numpy.
_PUBLIC_UNDERSCORE = {"_replace", "_asdict", "_fields", "_exit", "_getframe"}


def _module_name(path: pathlib.Path) -> str:
  parts = list(path.relative_to(ROOT).with_suffix("").parts)
  if parts[-1] == "__init__":
    parts.pop()
  return ".".join(parts)


def _is_module(name: str) -> bool:
  rel = pathlib.Path(*name.split("."))
  return (ROOT / rel).with_suffix(".py").exists() or (ROOT / rel / "__init__.py").exists()


def _sources() -> dict[str, ast.Module]:
  return {_module_name(p): ast.parse(p.read_text(), str(p)) for p in sorted(PACKAGE.rglob("*.py"))}


SOURCES = _sources()


def _imports(tree: ast.Module) -> list[tuple[str, list[str]]]:
  """(module, imported names) of every import in the file, at any depth; a ``from m import x``
  where ``m.x`` is a module counts as importing ``m.x``."""
  out = []
  for node in ast.walk(tree):
    if isinstance(node, ast.Import):
      out.extend((a.name, []) for a in node.names)
    elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
      for a in node.names:
        full = f"{node.module}.{a.name}"
        out.append((full, []) if _is_module(full) else (node.module, [a.name]))
  return out


def _graph() -> dict[str, set[str]]:
  graph = {}
  for name, tree in SOURCES.items():
    graph[name] = {m for m, _ in _imports(tree) if m.startswith("arenarl_jax") and m != name}
  return graph


def _under(module: str, package: str) -> bool:
  return module == package or module.startswith(package + ".")


def test_the_package_has_no_import_cycles():
  graph = _graph()
  index, low, stack, on_stack, cycles = {}, {}, [], set(), []

  def visit(v):  # Tarjan's strongly connected components
    index[v] = low[v] = len(index)
    stack.append(v)
    on_stack.add(v)
    for w in graph.get(v, ()):
      if w not in graph:
        continue
      if w not in index:
        visit(w)
        low[v] = min(low[v], low[w])
      elif w in on_stack:
        low[v] = min(low[v], index[w])
    if low[v] == index[v]:
      component = []
      while True:
        w = stack.pop()
        on_stack.discard(w)
        component.append(w)
        if w == v:
          break
      if len(component) > 1:
        cycles.append(sorted(component))

  for v in sorted(graph):
    if v not in index:
      visit(v)
  assert not cycles, f"import cycles: {cycles}"


def test_only_models_imports_the_cpu_backend():
  offenders = sorted(
      (name, m) for name, deps in _graph().items() for m in deps
      if _under(m, "arenarl_jax.models.cpu") and not _under(name, "arenarl_jax.models"))
  assert not offenders, offenders


@pytest.mark.parametrize("lower, upper", [
    (lower, upper)
    for lower in ("arenarl_jax.envs", "arenarl_jax.tournament", "arenarl_jax.judges")
    for upper in ("arenarl_jax.rl", "arenarl_jax.eval", "arenarl_jax.sft", "arenarl_jax.pipeline")
] + [("arenarl_jax.eval", "arenarl_jax.rl"), ("arenarl_jax.rollout", "arenarl_jax.rl"),
     ("arenarl_jax.rollout", "arenarl_jax.eval"), ("arenarl_jax.sampling", "arenarl_jax.rollout"),
     ("arenarl_jax.models", "arenarl_jax.sampling"), ("arenarl_jax.text", "arenarl_jax.sampling")])
def test_dependencies_point_down(lower, upper):
  offenders = sorted((name, m) for name, deps in _graph().items() if _under(name, lower)
                     for m in deps if _under(m, upper))
  assert not offenders, f"{lower} must not import {upper}: {offenders}"


def test_no_private_name_is_imported_across_modules():
  offenders = sorted((name, module, n) for name, tree in SOURCES.items()
                     for module, names in _imports(tree) for n in names
                     if n.startswith("_") and not n.startswith("__") and module != name)
  assert not offenders, offenders


def _owned_names(tree: ast.Module) -> set[str]:
  """Private names this module defines itself: functions, classes and attributes it assigns."""
  owned = set()
  for node in ast.walk(tree):
    if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
      owned.add(node.name)
    elif isinstance(node, ast.Attribute) and isinstance(node.ctx, ast.Store):
      owned.add(node.attr)
    elif isinstance(node, ast.Name) and isinstance(node.ctx, ast.Store):
      owned.add(node.id)
  return owned


def _private_reach_ins(tree: ast.Module) -> list[str]:
  """``x._name`` where ``x`` is not ``self`` or ``cls`` and ``_name`` is not one this module
  defines: a private attribute of another module's object."""
  owned = _owned_names(tree)
  out = []
  for node in ast.walk(tree):
    if (isinstance(node, ast.Attribute) and node.attr.startswith("_")
        and not node.attr.startswith("__") and node.attr not in _PUBLIC_UNDERSCORE
        and node.attr not in owned
        and not (isinstance(node.value, ast.Name) and node.value.id in ("self", "cls"))):
      out.append(f"line {node.lineno}: .{node.attr}")
  return out


def test_nothing_touches_another_objects_private_names():
  offenders = {name: hits for name, tree in SOURCES.items() if (hits := _private_reach_ins(tree))}
  assert not offenders, offenders


def test_the_checks_see_what_they_look_for():
  """The readers above would find a violation (they are not vacuous)."""
  tree = ast.parse("from arenarl_jax.models.cpu import kernel\nfrom arenarl_jax.rl.loop import "
                   "_x\ny = tok._save\nz = self._ok\nw = other._mine\ndef _mine(): pass\n")
  assert ("arenarl_jax.models.cpu.kernel", []) in _imports(tree)
  assert ("arenarl_jax.rl.loop", ["_x"]) in _imports(tree)
  assert _private_reach_ins(tree) == ["line 3: ._save"]
  assert len(SOURCES) > 100 and "arenarl_jax.pipeline" in SOURCES
  assert os.path.isdir(PACKAGE / "models" / "cpu")
