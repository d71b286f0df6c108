#!/usr/bin/env bash
# Runs every bundled profile with two builds of jsbench, one after the
# other, and compares what their summary.json files promise: scenarios,
# variants, the names of params, metrics, histograms, timelines and
# invariants, each invariant's state and each variant's verdict
# (scripts/summary-keys.py; values left out). A refactoring that changes
# no behaviour leaves nothing to print.
#
#   scripts/same-summaries.sh [--side base|new] BASE_REF [NEW_REF] [-- PROFILE...]
#
#   BASE_REF   the commit to compare against (a branch, tag or sha)
#   NEW_REF    the commit to judge; without it, this checkout as it is
#              (uncommitted changes included)
#   PROFILE    bundled profiles to run (default: all but soak, whose 28
#              minutes say nothing the latency profiles do not)
#   --side S   run one side only: base records BASE's results (say, before
#              a refactoring starts); new runs NEW and compares it with the
#              base results already recorded
#
# Profiles that need a topology get it: --cluster 3 for power-r3, routes,
# hops-cluster and replication-faults, --leafnode for leafnode, and for
# workers a nats-server on a free loopback port with two `jsbench worker
# --once` processes beside the coordinator. durability and power-r3 need
# root and /dev/fuse for their power cuts (elsewhere those variants say
# "not applicable" on both sides alike).
#
# Results go to target/same-summaries/<profile>/{base,new}/; the keys of
# each side beside them (base.keys, new.keys). Exit 0 when every profile
# printed the same keys, 1 when one differed (the differences are
# printed: a verdict that a noisy machine flips is for the reader to
# judge, so run a profile that differs once more before believing it),
# 2 on bad input.
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$root"

usage() {
    echo "usage: scripts/same-summaries.sh [--side base|new] BASE_REF [NEW_REF] [-- PROFILE...]" >&2
    exit 2
}

side=both
if [[ $# -ge 2 && $1 == "--side" ]]; then
    side=$2
    shift 2
    [[ $side == base || $side == new ]] || usage
fi

[[ $# -ge 1 && $1 != "--" ]] || usage
base_ref=$1
shift
new_ref=""
if [[ $# -ge 1 && $1 != "--" ]]; then
    new_ref=$1
    shift
fi
if [[ $# -ge 1 ]]; then
    [[ $1 == "--" ]] || usage
    shift
fi
profiles=("$@")

export NATS_SERVER_BIN=${NATS_SERVER_BIN:-$root/.tools/nats-server-2.15.1/bin/nats-server}
if [[ ! -x $NATS_SERVER_BIN ]]; then
    echo "error: no nats-server at $NATS_SERVER_BIN: run scripts/setup.sh --server-only first" >&2
    exit 2
fi

build_dir=$root/target/ab
# shellcheck source=scripts/lib/build-commit.sh
source "$root/scripts/lib/build-commit.sh"
base_bin=$(build_commit "$(resolve "$base_ref")")
new_bin=""
if [[ $side != base ]]; then
    if [[ -n $new_ref ]]; then
        new_bin=$(build_commit "$(resolve "$new_ref")")
    else
        echo "build: this checkout" >&2
        cargo build --release --quiet --bin jsbench
        new_bin=$root/target/release/jsbench
    fi
fi

if [[ ${#profiles[@]} -eq 0 ]]; then
    mapfile -t profiles < <("$base_bin" profiles | awk '$1 != "soak" && $1 != "" {print $1}')
fi

out=$root/target/same-summaries
mkdir -p "$out"

# The flags a profile needs to run at all.
flags_of() {
    case $1 in
        power-r3 | routes | hops-cluster | replication-faults | staging) echo "--cluster 3" ;;
        leafnode) echo "--leafnode" ;;
        *) echo "" ;;
    esac
}

# A free loopback port, for the workers' own server.
free_port() {
    python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'
}

# Runs profile $2 with binary $1 into folder $3.
run_one() {
    local bin=$1 profile=$2 dest=$3 flags
    flags=$(flags_of "$profile")
    rm -rf "$dest"
    mkdir -p "$dest"
    if [[ $profile == workers ]]; then
        local port store group pids=()
        # The coordinator and its workers share a secret (docs/workers.md).
        export JSBENCH_WORKER_SECRET
        JSBENCH_WORKER_SECRET=$(head -c 32 /dev/urandom | base64)
        port=$(free_port)
        store=$(mktemp -d)
        group="same-$$-$RANDOM"
        "$NATS_SERVER_BIN" -a 127.0.0.1 -p "$port" -js -sd "$store" >"$dest/nats-server.log" 2>&1 &
        local server=$!
        sleep 1
        for _ in 1 2; do
            "$bin" worker -s "nats://127.0.0.1:$port" --group "$group" --once >>"$dest/workers.log" 2>&1 &
            pids+=($!)
        done
        "$bin" run workers -o "$dest" --progress never -s "nats://127.0.0.1:$port" \
            --workers 2 --group "$group" >"$dest/run.log" 2>&1 || true
        wait "${pids[@]}" 2>/dev/null || true
        kill "$server" 2>/dev/null || true
        wait "$server" 2>/dev/null || true
        rm -rf "$store"
    else
        # shellcheck disable=SC2086 # flags are words on purpose
        "$bin" run "$profile" -o "$dest" --progress never $flags >"$dest/run.log" 2>&1 || true
    fi
    # The results folder is the one directory run made under dest.
    local folder
    folder=$(find "$dest" -mindepth 2 -maxdepth 2 -name summary.json -printf '%h\n' | head -1)
    if [[ -z $folder ]]; then
        echo "no summary.json (see $dest/run.log)"
        return 1
    fi
    echo "$folder"
}

status=0
for profile in "${profiles[@]}"; do
    echo "== $profile" >&2
    if [[ $side != new ]]; then
        base_folder=$(run_one "$base_bin" "$profile" "$out/$profile/base") || {
            echo "   base: $base_folder" >&2
            status=1
            continue
        }
        python3 scripts/summary-keys.py "$base_folder" >"$out/$profile/base.keys"
        [[ $side == base ]] && continue
    fi
    base_folder=$(find "$out/$profile/base" -mindepth 2 -maxdepth 2 -name summary.json -printf '%h\n' | head -1)
    if [[ -z $base_folder ]]; then
        echo "   no base results for $profile: run with --side base first" >&2
        status=1
        continue
    fi
    new_folder=$(run_one "$new_bin" "$profile" "$out/$profile/new") || {
        echo "   new: $new_folder" >&2
        status=1
        continue
    }
    python3 scripts/summary-keys.py "$new_folder" >"$out/$profile/new.keys"
    if python3 scripts/summary-keys.py --diff "$base_folder" "$new_folder" >"$out/$profile/diff"; then
        echo "   same: $(wc -l <"$out/$profile/new.keys") keys" >&2
    else
        echo "   DIFFERENT:" >&2
        sed 's/^/     /' "$out/$profile/diff" >&2
        status=1
    fi
done
exit $status
