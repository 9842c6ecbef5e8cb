#!/usr/bin/env bash
# Set up a virtualenv with the test extras (once; see setup.sh) and run the tests.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh test
# two worker processes (the CI machine's two cores), each test file on one of them: its module
# fixtures (a browser, a server, trained tiny runs) are made once. VIZLM_TEST_WORKERS=0: one process.
exec .venv/bin/python -m pytest -n "${VIZLM_TEST_WORKERS:-2}" --dist loadfile "$@"
