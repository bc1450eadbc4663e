#!/usr/bin/env bash
# Builds the container image from this checkout: the binaries by cargo (release) on this
# host, then deploy/container/Dockerfile around them. With podman, the image keeps its
# HEALTHCHECK (--format docker); CONTAINER_ENGINE=docker uses Docker instead.
#
#   bash deploy/container/build.sh [TAG]          # default workflow-node:latest
#   bash deploy/container/build.sh TAG --pull=never   # extra arguments go to `build`
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/../.."

tag="${1:-workflow-node:latest}"
shift || true
engine="${CONTAINER_ENGINE:-$(command -v podman >/dev/null && echo podman || echo docker)}"
target="${CARGO_TARGET_DIR:-target}"

cargo build --release --locked -p workflow-node -p agent-sdk --features agent-sdk/stubs --bins
context="$target/container-context"
rm -rf "$context"
mkdir -p "$context/bin"
cp "$target/release/workflow-node" "$target/release/stub-agents" "$context/bin/"
format=()
[ "$engine" = podman ] && format=(--format docker)
"$engine" build "${format[@]}" "$@" -f deploy/container/Dockerfile -t "$tag" "$context"
