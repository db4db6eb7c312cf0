"""The research corpus: the standard library's own documentation, as titled pages and passages.

Built offline on first use from the docstrings and signatures (``inspect``) of an explicit allowlist
of standard-library modules (importing the whole standard library has side effects, and some of it
differs between machines), so nothing is downloaded. One page per module and one per public class
or function defined in it; a class page lists its documented methods. Text is sanitised (memory
addresses and machine paths replaced by placeholders) and split into passages of a few paragraphs.

The build is deterministic for one Python version: members are visited in sorted order, and the
cache file (``<cache_dir>/corpus-v<VERSION>-py<X.Y.Z>.json``) stores a SHA-256 of the pages that is
re-checked on load, so a damaged or stale file is rebuilt rather than trusted.
"""
from __future__ import annotations

import dataclasses
import hashlib
import importlib
import inspect
import json
import os
import re
import subprocess
import sys
import sysconfig
from typing import Any, Iterable, Sequence

CORPUS_VERSION = 1
CACHE_ENV = "ARENARL_RESEARCH_CACHE"  # overrides the cache folder

# Pure-Python or built-in modules whose import has no side effects and whose docs do not depend on
# the machine (no os, sys, platform, socket, ...).
MODULES = (
    "abc", "argparse", "array", "ast", "base64", "binascii", "bisect", "bz2", "calendar", "cmath",
    "codecs", "collections", "colorsys", "contextlib", "copy", "csv", "dataclasses", "datetime",
    "decimal", "difflib", "enum", "filecmp", "fnmatch", "fractions", "functools", "getopt",
    "gettext", "glob", "graphlib", "gzip", "hashlib", "heapq", "hmac", "html", "inspect", "io",
    "ipaddress", "itertools", "json", "keyword", "linecache", "locale", "logging", "lzma", "math",
    "numbers", "operator", "pathlib", "pickle", "pprint", "queue", "quopri", "random", "re",
    "reprlib", "sched", "secrets", "shelve", "shlex", "shutil", "statistics", "string",
    "stringprep", "struct", "tarfile", "tempfile", "textwrap", "threading", "timeit", "tokenize",
    "tomllib", "traceback", "types", "typing", "unicodedata", "uuid", "warnings", "weakref",
    "zipfile", "zlib",
)
MIN_DOC_CHARS = 40  # members with less documentation than this get no page
MAX_METHODS = 12  # documented methods listed on a class page
PASSAGE_CHARS = 600  # passages hold whole paragraphs up to about this many characters


@dataclasses.dataclass(frozen=True)
class Page:
  """One titled page: ``id`` is the dotted name (``"json.dumps"``), kind module|class|function."""

  id: str
  title: str
  module: str
  kind: str
  signature: str  # "" for modules
  text: str  # the page body as the open_page tool shows it
  passages: tuple[str, ...]

  def summary(self) -> str:
    """The first sentence of the documentation (after the signature line)."""
    body = self.text.split("\n\n", 1)[1] if self.signature else self.text
    first = body.strip().split("\n\n", 1)[0].replace("\n", " ")
    m = re.match(r"(.+?[.!?])(\s|$)", first)
    return (m.group(1) if m else first).strip()


@dataclasses.dataclass(frozen=True)
class Corpus:
  pages: tuple[Page, ...]
  digest: str  # SHA-256 of the pages' content (see page_digest)
  version: str

  def __post_init__(self):
    object.__setattr__(self, "_by_id", {p.id: p for p in self.pages})

  def page(self, page_id: str) -> Page | None:
    return self._by_id.get(page_id)  # type: ignore[attr-defined]

  def __len__(self) -> int:
    return len(self.pages)


def version_stamp() -> str:
  """What the cached corpus depends on: this module's version, the Python version, the allowlist."""
  allow = hashlib.sha256(",".join(MODULES).encode()).hexdigest()[:8]
  return f"v{CORPUS_VERSION}-py{'.'.join(map(str, sys.version_info[:3]))}-{allow}"


# --- sanitising -------------------------------------------------------------------------------

_ADDRESS_RE = re.compile(r"\b0x[0-9a-fA-F]{6,}\b")
_OBJECT_AT_RE = re.compile(r"<([\w.]+) object at [^>]*>")


# Folders that documentation names on purpose (examples), never replaced.
_GENERIC_DIRS = frozenset({"/", ".", "/tmp", "/usr", "/usr/local", "/opt", "/home", "/var"})


def _machine_prefixes() -> list[str]:
  """This installation's folders (interpreter, environment, home), longest first."""
  paths = {sys.prefix, sys.base_prefix, sys.exec_prefix, os.path.expanduser("~")}
  paths.update(v for v in sysconfig.get_paths().values() if v)
  # Longest first, so that /usr/lib/python3.11 wins over /usr.
  return sorted((p for p in paths if p and p not in _GENERIC_DIRS), key=len, reverse=True)


_PREFIXES = _machine_prefixes()


def sanitise(text: str) -> str:
  """``text`` without memory addresses or this machine's paths (both vary between runs)."""
  text = _OBJECT_AT_RE.sub(r"<\1 object>", text)
  text = _ADDRESS_RE.sub("0x...", text)
  for prefix in _PREFIXES:
    text = text.replace(prefix, "<path>")
  return text.replace("\t", "    ").replace("\r", "")


# --- building ---------------------------------------------------------------------------------

class _Shown:
  """A default value as the signature shows it (a fixed text instead of the object's repr)."""

  def __init__(self, text: str):
    self.text = text

  def __repr__(self) -> str:
    return self.text


_LITERALS = (type(None), bool, int, float, complex, str, bytes)


def _shown_default(value: Any) -> Any:
  """Literal defaults as they are; classes and functions by name; anything else (a live object
  whose repr depends on program state, such as logging's handler list) as ``...``."""
  if isinstance(value, _LITERALS) and len(repr(value)) <= 80:
    return value
  if isinstance(value, (tuple, list)) and all(isinstance(v, _LITERALS) for v in value):
    return value if len(repr(value)) <= 80 else _Shown("...")
  if inspect.isclass(value) or inspect.isroutine(value):
    return _Shown(getattr(value, "__qualname__", None) or getattr(value, "__name__", "..."))
  return _Shown("...")


def _signature(name: str, obj: Any) -> str:
  try:
    sig = inspect.signature(obj)
  except (TypeError, ValueError):
    return ""
  params = [p if p.default is inspect.Parameter.empty else p.replace(default=_shown_default(
      p.default)) for p in sig.parameters.values()]
  return name + str(sig.replace(parameters=params))


def _doc(obj: Any) -> str:
  doc = inspect.getdoc(obj) or ""
  return sanitise(doc.strip())


def _passages(text: str, limit: int = PASSAGE_CHARS) -> tuple[str, ...]:
  out: list[str] = []
  current = ""
  for para in (p.strip() for p in text.split("\n\n")):
    if not para:
      continue
    if current and len(current) + len(para) + 2 > limit:
      out.append(current)
      current = para
    else:
      current = f"{current}\n\n{para}" if current else para
  if current:
    out.append(current)
  return tuple(out)


def _page(pid: str, module: str, kind: str, signature: str, body: str) -> Page:
  signature = sanitise(signature)
  text = f"{signature}\n\n{body}" if signature else body
  title = {"module": f"{pid} module", "class": f"{pid} class", "function": f"{pid} function"}[kind]
  return Page(id=pid, title=title, module=module, kind=kind, signature=signature, text=text,
              passages=_passages(text))


_GENERIC_DOCS = ("Initialize self", "Create and return a new object", "Return repr(self)",
                 "Return str(self)", "Return hash(self)", "Implement ")


def _class_body(qual: str, cls: type, doc: str) -> str:
  lines = []
  for mname in sorted(vars(cls)):
    if mname.startswith("_") and mname != "__init__":
      continue
    member = vars(cls)[mname]
    if isinstance(member, (staticmethod, classmethod)):
      member = member.__func__
    if not (inspect.isfunction(member) or inspect.ismethoddescriptor(member)
            or inspect.isbuiltin(member)):
      continue
    mdoc = _doc(member)
    if not mdoc or mdoc == doc or mdoc.startswith(_GENERIC_DOCS):
      continue
    summary = mdoc.split("\n\n", 1)[0].replace("\n", " ")
    sig = sanitise(_signature(mname, member)) or f"{mname}(...)"
    lines.append(f"- {sig}: {summary}")
    if len(lines) == MAX_METHODS:
      break
  if not lines:
    return doc
  return doc + f"\n\nMethods of {qual}:\n" + "\n".join(lines)


def _module_pages(modname: str) -> list[Page]:
  module = importlib.import_module(modname)
  pages = []
  mdoc = _doc(module)
  if len(mdoc) >= MIN_DOC_CHARS:
    pages.append(_page(modname, modname, "module", "", mdoc))
  public = getattr(module, "__all__", None)
  names = sorted(public) if isinstance(public, (list, tuple)) else sorted(
      n for n in vars(module) if not n.startswith("_"))
  seen_docs = {mdoc}
  for name in names:
    obj = getattr(module, name, None)
    if obj is None or not (inspect.isclass(obj) or inspect.isroutine(obj)):
      continue
    # Only what the module defines itself (its public "_"-module twins count: _json, _heapq, ...).
    home = getattr(obj, "__module__", None) or ""
    if home.lstrip("_") != modname.lstrip("_") and not home.startswith(modname + "."):
      continue
    doc = _doc(obj)
    if len(doc) < MIN_DOC_CHARS or doc in seen_docs:
      continue
    seen_docs.add(doc)
    qual = f"{modname}.{name}"
    if inspect.isclass(obj):
      pages.append(_page(qual, modname, "class", _signature(qual, obj) if _has_own_init(obj)
                         else "", _class_body(qual, obj, doc)))
    else:
      pages.append(_page(qual, modname, "function", _signature(qual, obj), doc))
  return pages


def _has_own_init(cls: type) -> bool:
  return "__init__" in vars(cls) or "__new__" in vars(cls)


def page_digest(pages: Iterable[Page]) -> str:
  h = hashlib.sha256()
  for p in pages:
    h.update(json.dumps(dataclasses.asdict(p), sort_keys=True, ensure_ascii=False).encode())
    h.update(b"\0")
  return h.hexdigest()


def build_corpus(modules: Sequence[str] = MODULES) -> Corpus:
  """Builds the corpus from the modules' documentation (no cache)."""
  pages: list[Page] = []
  for modname in modules:
    pages.extend(_module_pages(modname))
  ids = [p.id for p in pages]
  if len(set(ids)) != len(ids):
    raise RuntimeError("research corpus: duplicate page ids")
  return Corpus(pages=tuple(pages), digest=page_digest(pages), version=version_stamp())


# Runs this file alone in a fresh interpreter: build_corpus there, pages as JSON on stdout.
_ISOLATED = (
    "import dataclasses, importlib.util, json, sys\n"
    "spec = importlib.util.spec_from_file_location('_research_corpus', sys.argv[1])\n"
    "module = importlib.util.module_from_spec(spec)\n"
    "sys.modules[spec.name] = module\n"
    "spec.loader.exec_module(module)\n"
    "corpus = module.build_corpus(tuple(sys.argv[2:]))\n"
    "json.dump([dataclasses.asdict(p) for p in corpus.pages], sys.stdout, ensure_ascii=False)\n")


def _pages_from_json(rows: Iterable[dict[str, Any]]) -> tuple[Page, ...]:
  return tuple(Page(**{**p, "passages": tuple(p["passages"])}) for p in rows)


def build_corpus_isolated(modules: Sequence[str] = MODULES) -> Corpus:
  """``build_corpus`` in a fresh interpreter that loads only this file and the allowlist.

  Libraries imported by a caller may patch standard-library functions (one replaces
  ``inspect.getfile``), which would change their pages; a fresh interpreter sees the standard
  library as it ships, so the corpus is the same whatever the calling process imported.
  """
  out = subprocess.run([sys.executable, "-I", "-c", _ISOLATED, os.path.abspath(__file__),
                        *modules], capture_output=True, text=True, encoding="utf-8", check=False)
  if out.returncode != 0:
    raise RuntimeError(f"research corpus: the isolated build failed:\n{out.stderr[-2000:]}")
  pages = _pages_from_json(json.loads(out.stdout))
  return Corpus(pages=pages, digest=page_digest(pages), version=version_stamp())


def cache_path(cache_dir: str | None = None) -> str:
  # Imported here: the isolated build loads this file alone, so its top level imports no package.
  from arenarl_jax import cache_dirs  # pylint: disable=import-outside-toplevel
  folder = cache_dir or cache_dirs.cache_dir("research", CACHE_ENV)
  return os.path.join(os.path.expanduser(folder), f"corpus-{version_stamp()}.json")


def _read_cache(path: str) -> Corpus | None:
  try:
    with open(path, encoding="utf-8") as f:
      data = json.load(f)
    pages = _pages_from_json(data["pages"])
  except (OSError, ValueError, KeyError, TypeError):
    return None
  if data.get("version") != version_stamp() or page_digest(pages) != data.get("digest"):
    return None  # stale or damaged: rebuild
  return Corpus(pages=pages, digest=data["digest"], version=data["version"])


def load_corpus(cache_dir: str | None = None) -> Corpus:
  """The corpus from the cache when it is current and intact, else built and cached."""
  path = cache_path(cache_dir)
  cached = _read_cache(path)
  if cached is not None:
    return cached
  corpus = build_corpus_isolated()
  data = {"version": corpus.version, "digest": corpus.digest,
          "pages": [dataclasses.asdict(p) for p in corpus.pages]}
  try:
    os.makedirs(os.path.dirname(path), exist_ok=True)
    tmp = f"{path}.{os.getpid()}.tmp"
    with open(tmp, "w", encoding="utf-8") as f:
      json.dump(data, f, ensure_ascii=False)
    os.replace(tmp, path)  # atomic: concurrent builders never see half a file
  except OSError:
    pass  # an unwritable cache only costs a rebuild next time
  return corpus
