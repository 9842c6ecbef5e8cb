#!/usr/bin/env bash
# Create .venv and install vizlm into it (CPU torch first, so nothing pulls a CUDA build).
# Usage: bash scripts/setup.sh [EXTRA]   e.g. "test". A second run with the same
# pyproject.toml and extra finds a stamp in .venv and returns at once.
set -euo pipefail
cd "$(dirname "$0")/.."
extra="${1:-}"
target="."
[ -n "$extra" ] && target=".[${extra}]"
stamp=".venv/.vizlm-setup-${extra:-app}"
want="$(cat pyproject.toml scripts/setup.sh examples/plugin/pyproject.toml | sha256sum | cut -d' ' -f1)"
if [ -x .venv/bin/python ] && [ -f "$stamp" ] && [ "$(cat "$stamp")" = "$want" ]; then
  exit 0
fi
python3 -m venv .venv
.venv/bin/python -m pip install -q --upgrade pip
.venv/bin/python -m pip install -q torch==2.13.0
.venv/bin/python -m pip install -q -e "$target"
if [ "$extra" = "test" ]; then
  # the example plugin (docs/PLUGINS.md) that tests/test_plugins.py exercises; vizlm is its one dependency
  .venv/bin/python -m pip install -q --no-deps -e examples/plugin
fi
echo "$want" > "$stamp"
