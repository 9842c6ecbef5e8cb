"""The papers' experiments: the manifest ``experiments.toml``, its runs and claims (``experiments``), training
the runs (``runner``), a finished run's evidence in ``evidence/`` (``evidence``), the manifest's corpus tables of
the bundled models (``corpus_runs``) and their evidence (``corpus_evidence``: attribution, the faithfulness tests,
case labels), the statistics of a claim (``verdicts``: seed-aware intervals, Holm, three-part verdicts), and the
report in docs/RESULTS.md generated from the evidence alone (``report``)."""
