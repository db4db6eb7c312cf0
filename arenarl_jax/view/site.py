"""A run's static site: ``write_site(workdir)`` reads every eval and rollout log of the run and
writes one self-contained page per log plus ``index.html`` (default folder ``<workdir>/view``).

The site opens from disk (``file://``) or from any static server (``python -m http.server``):
pages link to each other by relative names and load nothing else.
"""
from __future__ import annotations

import os

from arenarl_jax.view import pages, reading

VIEW_DIR = "view"


def _write(path: str, html_text: str) -> None:
  # errors="replace": a lone surrogate from a JSON escape cannot be encoded; show "?" for it.
  with open(path, "w", encoding="utf-8", errors="replace") as f:
    f.write(html_text)


def write_site(workdir: str, out: str | None = None) -> list[str]:
  """Writes the site of ``workdir`` into ``out`` (``<workdir>/view`` by default, created;
  existing pages of the same names are replaced). Returns the written paths, index first.
  Raises ``reading.ViewError`` naming the file (and line) it cannot read."""
  log_paths = reading.log_files(workdir)
  out = out or os.path.join(workdir, VIEW_DIR)
  site_pages = [reading.read_page(p) for p in log_paths]
  names = {"eval": reading.rubric_names(workdir, checker=True),
           "rollouts": reading.rubric_names(workdir)}
  os.makedirs(out, exist_ok=True)
  written = [os.path.join(out, "index.html")]
  _write(written[0], pages.index_page(workdir, site_pages))
  for page in site_pages:
    path = os.path.join(out, pages.page_file(page))
    _write(path, pages.log_page(page, names[page.kind]))
    written.append(path)
  return written
