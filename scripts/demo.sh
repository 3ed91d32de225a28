#!/usr/bin/env bash
# Set up (if needed), then compile the bundled digits CNN with tessera and run it on the host.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup.sh
exec .venv/bin/python examples/digits/demo.py
