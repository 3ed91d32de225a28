#!/usr/bin/env bash
# One-time (idempotent) set-up of everything tessera needs on Debian:
# the host C compiler from apt, and a Python virtual environment in .venv
# with tessera (editable) and its test dependencies from PyPI.
set -euo pipefail
cd "$(dirname "$0")/.."

# gcc: host C; OpenBLAS: the blas target; Arm toolchain, newlib and QEMU: Cortex-M builds and runs;
# Graphviz: the graph of `compile --report`; Chromium and its driver: the tests that render that report.
APT_PACKAGES=(gcc libc6-dev libopenblas-dev gcc-arm-none-eabi libnewlib-arm-none-eabi qemu-system-arm
              graphviz chromium chromium-driver)

missing=()
for pkg in "${APT_PACKAGES[@]}"; do
  dpkg -s "$pkg" >/dev/null 2>&1 || missing+=("$pkg")
done
if ((${#missing[@]})); then
  echo "setup: installing Debian packages: ${missing[*]}"
  apt-get update -q
  DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends "${missing[@]}"
fi

PYTHON=${PYTHON:-python3}
if [ ! -x .venv/bin/python ]; then
  echo "setup: creating .venv with $($PYTHON --version)"
  "$PYTHON" -m venv .venv
fi
# Reinstall only when the project's dependencies changed.
stamp=.venv/.tessera-setup
want=$(sha256sum pyproject.toml | cut -d' ' -f1)
if [ ! -f "$stamp" ] || [ "$(cat "$stamp")" != "$want" ]; then
  echo "setup: installing tessera and test dependencies into .venv"
  .venv/bin/python -m pip install -q --upgrade pip
  .venv/bin/python -m pip install -q -e '.[test]'
  echo "$want" > "$stamp"
fi
