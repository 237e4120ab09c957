#!/usr/bin/env bash
# The test command: sets up (idempotent) and runs the test suite.
#   bash scripts/test.sh          # what CI runs: everything except tests marked slow
#   bash scripts/test.sh --all    # everything, slow end-to-end tests included
# Extra arguments go to pytest (e.g. bash scripts/test.sh tests/sandbox -x).
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
marker=(-m "not slow")
if [ "${1:-}" = "--all" ]; then marker=(); shift; fi
exec .venv/bin/python -m pytest "${marker[@]}" "$@"
