#!/usr/bin/env bash
# Set up a virtualenv (CPU torch first) and start the app on the bundled checkpoints.
set -euo pipefail
cd "$(dirname "$0")/.."
python3 -m venv .venv
.venv/bin/python -m pip install -q --upgrade pip
.venv/bin/python -m pip install -q torch==2.13.0
.venv/bin/python -m pip install -q -e .
exec .venv/bin/streamlit run app.py "$@"
