"""The papers' experiments: the manifest ``experiments.toml`` and its runner (``runner``), a finished
run's evidence in ``evidence/`` and the corpus evidence of the bundled models (``evidence``), and the
statistics of a claim (``verdicts``: seed-aware intervals, Holm, three-part verdicts) that the report
in docs/RESULTS.md is generated with."""
