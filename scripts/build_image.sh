#!/usr/bin/env bash
# Build the adrap image with podman where no image can be pulled: a debootstrap'ed Debian
# bookworm base imported as debian:bookworm-slim, and the Python packages from a wheelhouse built
# on the host (installed with --no-index inside the build). The Dockerfile itself builds anywhere
# (PIP_SOURCE=index, the default); this script only supplies the local sources.
#
#   scripts/build_image.sh                 # -> localhost/adrap:dev
#   IMAGE=adrap:test scripts/build_image.sh
# Needs: podman, runc, debootstrap (apt-get install -y podman runc debootstrap), root.
set -euo pipefail

ROOT=$(cd "$(dirname "$0")/.." && pwd)
IMAGE=${IMAGE:-localhost/adrap:dev}
BASE_IMAGE=${BASE_IMAGE:-localhost/debian:bookworm-slim}
PYTHON=${PYTHON:-python3}
WHEELHOUSE="$ROOT/deploy/wheelhouse"
# crun fails here ("cgroups in hybrid mode not supported"); the sandbox cannot raise rlimits.
PODMAN=(podman --runtime runc)
ULIMITS=(--ulimit nofile=1024:1024 --ulimit nproc=1024:1024)

if ! podman image exists "$BASE_IMAGE"; then
  echo "== base image $BASE_IMAGE from debootstrap (about 40 s)"
  tmp=$(mktemp -d)
  trap 'rm -rf "$tmp"' EXIT
  debootstrap --variant=minbase bookworm "$tmp/root" >/dev/null
  tar -C "$tmp/root" -c . | podman import - "$BASE_IMAGE"
fi

# Rebuild the wheelhouse only when the runtime dependencies or the lock change (not the test
# extras). The lock's versions, not the newest: they install on the image's Python (3.11.2).
stamp="$WHEELHOUSE/.built-from"
want=$({ "$PYTHON" -c 'import sys, tomllib; print(sorted(tomllib.load(open(sys.argv[1], "rb"))["project"]["dependencies"]))' "$ROOT/pyproject.toml"; cat "$ROOT/constraints.txt"; } | sha256sum | cut -d' ' -f1)
if [ "$(cat "$stamp" 2>/dev/null)" != "$want" ] || ! ls "$WHEELHOUSE"/*.whl >/dev/null 2>&1; then
  echo "== wheelhouse for the dependencies in $(basename "$ROOT")/pyproject.toml"
  find "$WHEELHOUSE" -name '*.whl' -delete
  "$PYTHON" -m pip wheel -q -w "$WHEELHOUSE" -c "$ROOT/constraints.txt" "$ROOT" "setuptools>=68" wheel
  rm -f "$WHEELHOUSE"/adrap-*.whl   # adrap itself is built from the copied source in the image
  echo "$want" > "$stamp"
fi

echo "== image $IMAGE"
"${PODMAN[@]}" build --format docker "${ULIMITS[@]}" \
  --build-arg PIP_SOURCE=wheelhouse --build-arg BASE_IMAGE="$BASE_IMAGE" \
  -f "$ROOT/deploy/Dockerfile" -t "$IMAGE" "$ROOT"
podman image inspect "$IMAGE" --format '{{.Size}}' | awk '{printf "== %s: %.0f MB\n", "'"$IMAGE"'", $1/1e6}'
