"""A static HTML viewer of a run: ``python -m arenarl_jax.view --workdir=RUN [--out=DIR]``.

  reading.py  the run's eval and rollout logs read into pages, groups, players and matches
  markup.py   escaping, elements, the page shell (inline style, filter script, no network)
  pages.py    the log pages (bracket, per-dimension scores, trajectories, filters) and the index
  site.py     ``write_site(workdir, out)``: every page into ``<workdir>/view``
"""
from arenarl_jax.view.reading import ViewError
from arenarl_jax.view.site import write_site

__all__ = ["ViewError", "write_site"]
