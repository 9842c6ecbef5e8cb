"""The app's frame: page list, page config and navigation (``st.navigation``).

``app.py`` calls :func:`run_app`; every file under ``pages/`` calls :func:`page_setup` first.
Streamlit still treats a ``pages/`` folder beside the main script as an old-style multipage
app until ``st.navigation`` has run once in the process, so the very first request of a
fresh server for ``/compare`` executes ``pages/compare.py`` on its own. :func:`page_setup`
notices that (the page is not running inside :func:`run_app`), runs the app's navigation
instead, which renders the requested page within the app's frame, and stops the outer run.
Only public Streamlit API is used.

The app takes its own arguments after ``--`` on the Streamlit command line (:func:`app_parser`):
``streamlit run app.py -- --checkpoints DIR --corpora DIR --runs DIR`` sets the folders of
:mod:`vizlm.core.paths` for the server, as ``$VIZLM_CHECKPOINTS``, ``$VIZLM_DATA`` and ``$VIZLM_RUNS`` do, and
``--device cuda`` runs the models on the GPU; a bad one is a message on the page, never a traceback.
"""

from __future__ import annotations

import argparse
import contextvars
import sys
from dataclasses import dataclass
from pathlib import Path

import streamlit as st
import torch

from vizlm.core import paths
from vizlm.app import checkpoints
from vizlm.app.widgets import md_escape
from vizlm.core.choices import DEVICES
from vizlm.core.errors import VizlmError
from vizlm.models import REGISTRY, plugins


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
    PageSpec("pages/faithfulness.py", "Faithfulness", ":material/fact_check:", "faithfulness"),
    PageSpec("pages/cases.py", "Cases", ":material/label:", "cases"),
    PageSpec("pages/models.py", "Models", ":material/model_training:", "models"),
)
EXPLORER = PAGES[0].path  # for st.page_link / st.switch_page

FAVICON = Path(__file__).with_name("favicon.png")  # a small lower-triangular attention map
_inside_app = contextvars.ContextVar("vizlm_inside_app", default=False)
# The sidebar's narrowest width in pixels on a screen wide enough to show it beside the page (Streamlit's default
# is 300): a model's label in a select box, "name · kind", fits at this width up to checkpoints.LABEL_CHARS
# characters. A minimum, so that a user can still drag it wider. (set_page_config's initial_sidebar_state=<px>
# comes after the sidebar is drawn and leaves it at 300.)
SIDEBAR_PX = 360
# A chart wider than its column (a long text's heat map, a narrow window) scrolls sideways
# inside the column instead of being cut off at the page's edge. A multiselect shows every chosen model, whole:
# its box grows with its chips (Streamlit's stops at about five rows and scrolls, hiding the last ones), and a
# name wider than the box wraps inside its chip instead of ending in "…".
STYLE = ("<style>div:has(> [data-testid='stVegaLiteChart']) { overflow-x: auto; }"
         f"@media (min-width: 1024px) {{ [data-testid='stSidebar'][data-collapsed='false'] {{ min-width: {SIDEBAR_PX}px; }} }}"
         "[data-testid='stMultiSelect'] div:has(> [data-testid='stMultiSelectTagsContainer']) { max-height: none; }"
         "[data-testid='stMultiSelectTagsContainer'] { overflow-y: visible; }"
         "[data-testid='stMultiSelect'] [data-tag], [data-testid='stMultiSelect'] [data-tag] > span "
         "{ height: auto; white-space: normal; overflow-wrap: anywhere; text-overflow: clip; }</style>")
# One intra-op thread per computation: a server runs a page's analysis, background jobs and other sessions at
# once, and a recurrence over one text (batch 1, a few hundred units) gains nothing from a second thread but
# waits on it at every step when the other core is busy (a 2,400-word document: 0.05 s on one thread, up to
# 16 s on two of a loaded 2-core machine). Concurrent requests use the cores instead.
TORCH_THREADS = 1


APP_SCRIPT = "app.py"  # the main script: Streamlit passes the words after `--` to it as sys.argv[1:]


class AppArgumentError(VizlmError, ValueError):
    """A bad argument after ``--`` on the ``streamlit run`` command line (the message says which, with the usage)."""


class _Parser(argparse.ArgumentParser):
    """argparse that raises :class:`AppArgumentError` instead of exiting the server."""

    def error(self, message: str):
        raise AppArgumentError(f"{message}\n\n{self.format_usage()}")

    def exit(self, status: int = 0, message: str | None = None):
        raise AppArgumentError(message or self.format_help())


def app_parser() -> argparse.ArgumentParser:
    p = _Parser(prog="streamlit run app.py --", add_help=False,
                description="vizlm's app. Its folders (else $VIZLM_CHECKPOINTS, $VIZLM_CORPORA, $VIZLM_RUNS, "
                            "$VIZLM_DATA, else the vizlm home's checkpoints/, runs/, data/ and your user data folder's "
                            "corpora/).")
    p.add_argument("--checkpoints", type=Path, metavar="DIR",
                   help="your checkpoints folder, a checkpoint folder each (listed as 'yours'; the bundled ones are "
                        "listed too); as $VIZLM_CHECKPOINTS")
    p.add_argument("--corpora", type=Path, metavar="DIR",
                   help="your corpora folder: the corpora `vizlm prepare --corpus` and `vizlm import` wrote (listed "
                        "beside vizlm's own); as $VIZLM_CORPORA and the CLI's --corpora")
    p.add_argument("--data", type=Path, metavar="DIR",
                   help="vizlm's own processed corpora (Brown, WSJ, Sinica); as $VIZLM_DATA and the CLI's --data")
    p.add_argument("--runs", type=Path, metavar="DIR", help="the folder of training runs: its finished runs are listed; "
                                                            "as $VIZLM_RUNS")
    p.add_argument("--device", choices=DEVICES, default="cpu",
                   help="where the models run: cpu (the default), cuda, or auto (the GPU when CUDA is available)")
    p.add_argument("-h", "--help", action="store_true", help="show this message on the page")
    return p


def script_arguments() -> list[str]:
    """The app's own arguments: what follows ``--`` on the ``streamlit run app.py`` command line (none when the
    process is not serving ``app.py``, e.g. a test runner's)."""
    return sys.argv[1:] if sys.argv and Path(sys.argv[0]).name == APP_SCRIPT else []


def apply_arguments(argv: list[str]) -> None:
    """Parse the app's arguments and set :mod:`vizlm.core.paths`' overrides; :class:`AppArgumentError` when one is
    bad (a folder that is not there included), with the usage. ``--help`` raises it with the help."""
    parser = app_parser()
    args = parser.parse_args(argv)
    if args.help:
        raise AppArgumentError(parser.format_help())
    for flag in ("checkpoints", "corpora", "runs", "data"):
        folder = getattr(args, flag)
        if folder is not None and not folder.expanduser().is_dir():
            raise AppArgumentError(f"--{flag} {folder}: not a folder\n\n{parser.format_usage()}")
    try:
        checkpoints.set_device(args.device)
    except VizlmError as exc:
        raise AppArgumentError(f"--device {args.device}: {str(exc).split(': ', 1)[-1]}\n\n{parser.format_usage()}") from None
    paths.set_overrides(data=args.data, corpora=args.corpora, checkpoints=args.checkpoints, runs=args.runs)


def run_app() -> None:
    """Page config, the app's arguments, the navigation menu, and the page the URL asks for."""
    if torch.get_num_threads() != TORCH_THREADS:
        torch.set_num_threads(TORCH_THREADS)
    # A local picture: an icon name or emoji would make the browser fetch a font or image from outside.
    st.set_page_config(page_title="vizlm", page_icon=str(FAVICON), layout="wide")
    try:
        apply_arguments(script_arguments())
    except AppArgumentError as exc:
        st.error("The app's arguments (after `--` on the `streamlit run app.py` command line) are not right:",
                 icon=":material/terminal:")
        st.code(str(exc), language=None)
        st.stop()
    nav = st.navigation([
        st.Page(p.path, title=p.title, icon=p.icon, default=p.default, **({} if p.default else {"url_path": p.url_path}))
        for p in PAGES
    ])
    st.sidebar.caption("vizlm · attention in recurrent language models")
    skipped = checkpoints.skipped_notes()
    if skipped:
        with st.sidebar.expander(f"{len(skipped)} checkpoint folder{'s' if len(skipped) > 1 else ''} skipped",
                                 icon=":material/folder_off:"):
            for note in skipped:
                st.caption(md_escape(note))
    gone = plugins.skipped(REGISTRY)  # plugins that failed to load: the others work, these are named
    if gone:
        with st.sidebar.expander(f"{len(gone)} plugin{'s' if len(gone) > 1 else ''} skipped",
                                 icon=":material/extension_off:"):
            for name, why in gone.items():
                st.caption(md_escape(f"{name}: {why}"))
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
