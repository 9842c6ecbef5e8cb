"""vizlm app: ``streamlit run app.py``.

The page list and navigation live in :mod:`vizlm.app.shell`; the Explorer
(``pages/explorer.py``) is the front page. Every page is thin: sidebar inputs ->
validation -> one library call -> rendering.

Its own folders follow ``--`` (``streamlit run app.py -- --checkpoints DIR --corpora DIR --runs DIR``):
:func:`vizlm.app.shell.run_app` reads them from ``sys.argv``, as Streamlit passes them to this script.
"""

from vizlm.app.shell import run_app

run_app()
