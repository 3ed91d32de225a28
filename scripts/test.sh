#!/usr/bin/env bash
# Set up (if needed), type-check src/ (config in pyproject.toml), then run the whole test suite on all cores.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup.sh
echo "test: mypy (src/tessera)"
.venv/bin/python -m mypy
exec .venv/bin/python -m pytest -n "${TESSERA_TEST_JOBS:-auto}" -q "$@"
