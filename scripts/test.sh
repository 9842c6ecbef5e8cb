#!/usr/bin/env bash
# Set up a virtualenv with the test extras (once; see setup.sh) and run the tests.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh test
exec .venv/bin/python -m pytest "$@"
