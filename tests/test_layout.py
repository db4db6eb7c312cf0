"""The package's layout rules, read from its source (no module is imported).

Dependencies point down ``LAYERS`` (the README's layout map shows the same order): a module imports
only modules of its own package and of packages in lower layers, at any depth (an import inside a
function counts). Packages that share a layer import nothing of each other, except the base modules
(the last layer), which may import each other (today only ``metrics`` imports ``jsonl``; the
no-cycle test keeps them acyclic). A ``<pkg>/settings.py`` (import-free section declarations) may
be imported from anywhere. Every package needs a layer; a listed package that does not exist yet is
skipped. Backend-specific code stays behind ``models/`` (only ``models/`` may import
``models.cpu``), ``sft`` imports nothing of ``rl``, and private names stay with their owner.
"""
import ast
import os
import pathlib
import re
from typing import Iterable, Mapping

ROOT = pathlib.Path(__file__).resolve().parents[1]
PACKAGE = ROOT / "arenarl_jax"

# The layers, top first: a package may import only its own modules and those of lower layers.
BASE = ("types", "settings", "hosts", "checkpoint", "metrics", "curves", "sharding", "jsonl",
        "cache_dirs")
LAYERS = [
    ("main", "tools", "testing"),
    ("experiments",),
    ("pipeline",),
    ("view",),
    ("sft",),
    ("rl",),
    ("trainer",),
    ("eval",),
    ("data",),
    ("rollout",),
    ("judges",),
    ("sampling",),
    ("envs",),
    ("models",),
    ("text",),
    ("tournament",),
    ("run_config",),
    ("config_tree",),
    BASE,
]
LEVEL = {name: k for k, names in enumerate(LAYERS) for name in names}

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


def _graph(sources: Mapping[str, ast.Module] | None = None) -> dict[str, set[str]]:
  """module -> the package's modules it imports (``SOURCES`` unless ``sources`` is given)."""
  graph = {}
  for name, tree in (SOURCES if sources is None else sources).items():
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


def test_sft_imports_nothing_of_rl():
  """Both stages train through ``trainer``, each with its own loss: SFT needs no RL module."""
  offenders = sorted((name, m) for name, deps in _graph().items() for m in deps
                     if _under(name, "arenarl_jax.sft") and _under(m, "arenarl_jax.rl"))
  assert not offenders, offenders


def test_only_models_imports_the_cpu_backend():
  offenders = sorted(
      (name, m) for name, deps in _graph().items() for m in deps
      if _under(m, "arenarl_jax.models.cpu") and not _under(name, "arenarl_jax.models"))
  assert not offenders, offenders


def _top(module: str) -> str | None:
  """The package (or top-level module) of ``arenarl_jax`` that ``module`` belongs to."""
  parts = module.split(".")
  return parts[1] if parts[0] == "arenarl_jax" and len(parts) > 1 else None


def _is_settings(module: str) -> bool:
  """A package's section declarations (``arenarl_jax.<pkg>.settings``): importable from anywhere."""
  parts = module.split(".")
  return len(parts) == 3 and parts[2] == "settings"


def upward_edges(graph: Mapping[str, Iterable[str]]) -> list[str]:
  """Every import in ``graph`` (module -> modules it imports) that does not point down
  ``LAYERS``, as "importer -> imported (why)"."""
  out = []
  for name in sorted(graph):
    for dep in sorted(graph[name]):
      src, dst = _top(name), _top(dep)
      if src is None or dst is None or src == dst or _is_settings(dep):
        continue
      if src not in LEVEL or dst not in LEVEL:
        out.append(f"{name} -> {dep} ({dst if dst not in LEVEL else src} has no layer)")
      elif LEVEL[dst] < LEVEL[src]:
        out.append(f"{name} -> {dep} ({dst} is above {src})")
      elif LEVEL[dst] == LEVEL[src] and LAYERS[LEVEL[src]] is not BASE:
        out.append(f"{name} -> {dep} ({dst} shares {src}'s layer)")
  return out


def _present() -> set[str]:
  return {top for name in SOURCES if (top := _top(name)) is not None}


def test_every_package_has_a_layer():
  assert not _present() - set(LEVEL), f"add these to LAYERS: {sorted(_present() - set(LEVEL))}"


def test_dependencies_point_down_the_layers():
  offenders = upward_edges(_graph())
  assert not offenders, "imports up the layers:\n" + "\n".join(offenders)


def test_the_layer_check_names_what_breaks_the_order():
  """A planted upward import is reported, also from inside a function; downward imports,
  settings modules and base modules importing each other pass."""
  sources = {"arenarl_jax.envs.x": ast.parse(
      "from arenarl_jax.text import tokenizer\nfrom arenarl_jax.eval import settings\n"
      "def f():\n  from arenarl_jax.eval import y\n")}
  assert upward_edges(_graph(sources)) == [
      "arenarl_jax.envs.x -> arenarl_jax.eval (eval is above envs)"]
  assert upward_edges({
      "arenarl_jax.envs.x": {"arenarl_jax.eval.y", "arenarl_jax.models.z"},
      "arenarl_jax.main": {"arenarl_jax.tools.t", "arenarl_jax.pipeline"},
      "arenarl_jax.metrics": {"arenarl_jax.jsonl"},
      "arenarl_jax.hosts": {"arenarl_jax.newpkg.a"},
  }) == ["arenarl_jax.envs.x -> arenarl_jax.eval.y (eval is above envs)",
         "arenarl_jax.hosts -> arenarl_jax.newpkg.a (newpkg has no layer)",
         "arenarl_jax.main -> arenarl_jax.tools.t (tools shares main's layer)"]


def _readme_map() -> list[str]:
  """The package's entries in the README's layout map, in order (``main.py`` -> ``main``)."""
  text = (ROOT / "README.md").read_text()
  block = text.split("\n## Layout\n", 1)[1].split("```\narenarl_jax/\n", 1)[1]
  names = []
  for line in block.splitlines():
    if not line.startswith(" "):  # the next top-level folder (configs/) or the block's end
      break
    if line.startswith("   "):  # a description's continuation
      continue
    for token in re.split(r"\s{2,}", line.strip()):
      if not (m := re.fullmatch(r"(\w+)(?:/|\.py)", token)):
        break
      names.append(m.group(1))
  return names


def test_the_readme_layout_map_follows_the_layers():
  text = (ROOT / "README.md").read_text()
  order = text.split("\n## Layout\n", 1)[1].split("in this order:", 1)[1].split("(which may", 1)[0]
  assert re.findall(r"`(\w+)`", order) == [name for layer in LAYERS for name in layer]
  names = _readme_map()
  assert set(names) == _present(), sorted(set(names) ^ _present())
  levels = [LEVEL[n] for n in names]
  assert levels == sorted(levels), f"the README's layout map is out of LAYERS' order: {names}"

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


# The door and what stands above it: the only modules that may hold the whole config tree.
# Everything below ``pipeline`` takes frozen settings objects (``<pkg>/settings.py``), plain
# values or a built mesh.
CONFIG_HOLDERS = ("arenarl_jax.main", "arenarl_jax.pipeline", "arenarl_jax.config_tree",
                  "arenarl_jax.run_config", "arenarl_jax.tools", "arenarl_jax.experiments",
                  "arenarl_jax.testing")


def config_takers(tree: ast.Module) -> list[str]:
  """Where a module imports ``ml_collections`` (at any depth) or annotates a function
  parameter as a ``ConfigDict``."""
  out = [f"line {node.lineno}: imports ml_collections" for node in ast.walk(tree)
         if (isinstance(node, ast.Import)
             and any(a.name.split(".")[0] == "ml_collections" for a in node.names))
         or (isinstance(node, ast.ImportFrom) and node.level == 0 and node.module
             and node.module.split(".")[0] == "ml_collections")]
  for node in ast.walk(tree):
    if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
      a = node.args
      for arg in a.posonlyargs + a.args + a.kwonlyargs + [a.vararg, a.kwarg]:
        if arg is not None and arg.annotation is not None and (
            "ConfigDict" in ast.unparse(arg.annotation)):
          out.append(f"line {node.lineno}: {node.name}({arg.arg}: "
                     f"{ast.unparse(arg.annotation)})")
  return out


def test_below_the_pipeline_no_module_takes_the_whole_config():
  offenders = {name: hits for name, tree in SOURCES.items()
               if not any(_under(name, m) for m in CONFIG_HOLDERS)
               and (hits := config_takers(tree))}
  assert not offenders, ("take settings objects (<pkg>/settings.py) built in pipeline.py, not "
                         f"the config: {offenders}")


def test_the_config_check_sees_imports_and_annotations():
  tree = ast.parse("import ml_collections\ndef f(a, *, c: 'ml_collections.ConfigDict'):\n"
                   "  from ml_collections import config_dict\n"
                   "def g(s: Settings, config: ConfigDict = None): pass\n")
  assert config_takers(tree) == [
      "line 1: imports ml_collections", "line 3: imports ml_collections",
      "line 2: f(c: 'ml_collections.ConfigDict')", "line 4: g(config: ConfigDict)"]
  assert config_takers(ast.parse("def f(rl: RlSettings, mesh: Mesh): pass\n")) == []
  assert all(name in SOURCES for name in CONFIG_HOLDERS if "." in name[len("arenarl_jax."):]
             or _is_module(name))


def test_the_checks_see_what_they_look_for():
  """The readers above would find a violation (they are not vacuous)."""
  tree = ast.parse("from arenarl_jax.models.cpu import kernel\nfrom arenarl_jax.rl.loop import "
                   "_x\ny = tok._save\nz = self._ok\nw = other._mine\ndef _mine(): pass\n")
  assert ("arenarl_jax.models.cpu.kernel", []) in _imports(tree)
  assert ("arenarl_jax.rl.loop", ["_x"]) in _imports(tree)
  assert _private_reach_ins(tree) == ["line 3: ._save"]
  assert len(SOURCES) > 100 and "arenarl_jax.pipeline" in SOURCES
  assert len(_readme_map()) >= len(_present()) > 15
  assert os.path.isdir(PACKAGE / "models" / "cpu")
