#!/usr/bin/env bash
# Set up a virtualenv (once; see setup.sh) and start the app on the bundled checkpoints.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
exec .venv/bin/streamlit run app.py "$@"
