#!/usr/bin/env bash
# Set up (if needed), then run the whole test suite on all cores.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup.sh
exec .venv/bin/python -m pytest -n "${TESSERA_TEST_JOBS:-auto}" -q "$@"
