#!/usr/bin/env bash
# Makes the base image the Dockerfile names (debian:bookworm-slim) from Debian's own
# packages, for machines that cannot pull from a registry (CI here): debootstrap's
# minbase variant, slimmed and imported into podman's storage under the very name the
# Dockerfile uses, so the Dockerfile stays the one built anywhere else (with --pull=never).
# A fast no-op when the image is already there. Needs root, debootstrap and podman.
#
#   bash deploy/container/base-image.sh [IMAGE]    # default docker.io/library/debian:bookworm-slim
#   DEBIAN_MIRROR=http://deb.debian.org/debian     # the mirror (the default)
set -euo pipefail

image="${1:-docker.io/library/debian:bookworm-slim}"
mirror="${DEBIAN_MIRROR:-http://deb.debian.org/debian}"

podman image exists "$image" && exit 0

# One maker at a time on a machine; the second finds the image made.
exec 9>"${TMPDIR:-/tmp}/workflow-node-base-image.lock"
flock 9
podman image exists "$image" && exit 0

root="$(mktemp -d)"
trap 'rm -rf "$root"' EXIT
echo "base-image: debootstrap --variant=minbase bookworm from $mirror" >&2
debootstrap --variant=minbase bookworm "$root" "$mirror" >"$root.log" 2>&1 \
    || { cat "$root.log" >&2; rm -f "$root.log"; exit 1; }
rm -f "$root.log"
# What Debian's -slim images leave out too: documentation, manuals, package lists, caches.
rm -rf "$root"/usr/share/doc/* "$root"/usr/share/man/* "$root"/usr/share/info/* \
       "$root"/var/lib/apt/lists/* "$root"/var/cache/apt/* "$root"/var/cache/debconf/*-old \
       "$root"/var/log/*.log "$root"/var/log/apt/*
tar -C "$root" --numeric-owner -c . | podman import --quiet - "$image" >/dev/null
echo "base-image: $image made" >&2
