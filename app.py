"""vizlm app: ``streamlit run app.py``.

The page list and navigation live in :mod:`vizlm.app.shell`; the Explorer
(``pages/explorer.py``) is the front page. Every page is thin: sidebar inputs ->
validation -> one library call -> rendering.
"""

from vizlm.app.shell import run_app

run_app()
