"""The Streamlit app's glue: the only package of vizlm that imports ``streamlit``.

- :mod:`vizlm.app.shell`: the page list, ``st.navigation`` and :func:`~vizlm.app.shell.page_setup`.
- :mod:`vizlm.app.checkpoints`: which models are selectable (folders and uploads), loaded once per process.
- :mod:`vizlm.app.results`: library calls cached per input (``st.cache_data``), corpora, progress bars.
- :mod:`vizlm.app.widgets`: sidebar pickers, widget defaults, messages, charts and download buttons.
- :mod:`vizlm.app.views`: the Explorer's tabs and the position-statistics view.
- :mod:`vizlm.app.explorer`: the Explorer's URL state, example picker, word picker and model panels.

Every number the app shows comes from the library: a typed text's analysis through the Python API
(:mod:`vizlm.api`, as a notebook gets it), the rest from :mod:`vizlm.inspect.corpus_stats`, :mod:`vizlm.inspect.case_gallery`,
:mod:`vizlm.present.heatmap`, :mod:`vizlm.present.fragments`, :mod:`vizlm.present.charts` and :mod:`vizlm.present.export`; pages under ``pages/`` are thin:
inputs -> validation -> one call -> rendering.
"""
