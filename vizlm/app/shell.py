"""The app's frame: page list, page config and navigation (``st.navigation``).

``app.py`` calls :func:`run_app`; every file under ``pages/`` calls :func:`page_setup` first.
Streamlit still treats a ``pages/`` folder beside the main script as an old-style multipage
app until ``st.navigation`` has run once in the process, so the very first request of a
fresh server for ``/compare`` executes ``pages/compare.py`` on its own. :func:`page_setup`
notices that (the page is not running inside :func:`run_app`), runs the app's navigation
instead, which renders the requested page within the app's frame, and stops the outer run.
Only public Streamlit API is used.
"""

from __future__ import annotations

import contextvars
from dataclasses import dataclass
from pathlib import Path

import streamlit as st
import torch


@dataclass(frozen=True)
class PageSpec:
    path: str  # relative to app.py
    title: str
    icon: str
    url_path: str  # deep link: /compare, /positions, ...
    default: bool = False


PAGES = (
    PageSpec("pages/explorer.py", "Explorer", ":material/search:", "explorer", default=True),
    PageSpec("pages/compare.py", "Compare perplexity", ":material/scatter_plot:", "compare"),
    PageSpec("pages/positions.py", "Attention by position", ":material/timeline:", "positions"),
    PageSpec("pages/cases.py", "Cases", ":material/label:", "cases"),
    PageSpec("pages/models.py", "Models", ":material/model_training:", "models"),
)
EXPLORER = PAGES[0].path  # for st.page_link / st.switch_page

FAVICON = Path(__file__).with_name("favicon.png")  # a small lower-triangular attention map
_inside_app = contextvars.ContextVar("vizlm_inside_app", default=False)
# A chart wider than its column (a long text's heat map, a narrow window) scrolls sideways
# inside the column instead of being cut off at the page's edge.
STYLE = "<style>div:has(> [data-testid='stVegaLiteChart']) { overflow-x: auto; }</style>"
# One intra-op thread per computation: a server runs a page's analysis, background jobs and other sessions at
# once, and a recurrence over one text (batch 1, a few hundred units) gains nothing from a second thread but
# waits on it at every step when the other core is busy (a 2,400-word document: 0.05 s on one thread, up to
# 16 s on two of a loaded 2-core machine). Concurrent requests use the cores instead.
TORCH_THREADS = 1


def run_app() -> None:
    """Page config, the navigation menu, and the page the URL asks for."""
    if torch.get_num_threads() != TORCH_THREADS:
        torch.set_num_threads(TORCH_THREADS)
    # A local picture: an icon name or emoji would make the browser fetch a font or image from outside.
    st.set_page_config(page_title="vizlm", page_icon=str(FAVICON), layout="wide")
    nav = st.navigation([
        st.Page(p.path, title=p.title, icon=p.icon, default=p.default, **({} if p.default else {"url_path": p.url_path}))
        for p in PAGES
    ])
    st.sidebar.caption("vizlm · attention in recurrent language models")
    st.html(STYLE)
    token = _inside_app.set(True)
    try:
        nav.run()
    finally:
        _inside_app.reset(token)


def page_setup() -> None:
    """First call of every page: make sure the page runs inside :func:`run_app`'s navigation."""
    if not _inside_app.get():
        run_app()
        st.stop()
