#!/usr/bin/env bash
# Builds two commits of this repository and compares them with `jsbench ab`
# (paired, interleaved slices against one embedded nats-server): the CI gate
# for pull requests.
#
#   scripts/ab-commits.sh BASE_REF [NEW_REF] [-- JSBENCH_AB_ARGS...]
#
#   BASE_REF   the commit to compare against (a branch, tag or sha)
#   NEW_REF    the commit to judge; without it, this checkout as it is
#              (uncommitted changes included)
#   after --   more arguments for jsbench ab, e.g. -- --budget 10m
#
# Each commit is built once, in a git worktree of its own under
# target/ab/worktrees, into one shared cargo target directory
# (target/ab/cargo, so dependencies build once), and its binary is kept in
# target/ab/bin/<sha>/jsbench: a commit already built is not built again,
# and CI can cache target/ab between runs. NEW's binary runs the
# comparison, so NEW must have `jsbench ab`; BASE may be older (a build
# without `ab` runs its slices as plain `jsbench run`s).
#
# Results go to target/ab/results/<run>/ (ab.json, ab.md for a job summary,
# report.html, every slice). The exit status is jsbench ab's: 0 no
# regression, 1 a regression, a metric missing in NEW or a broken invariant
# in NEW, 2 bad input (a ref that does not exist, a build that fails).
#
# Environment:
#   JSBENCH_AB_PROFILE   the profile to compare (default: ci)
#   NATS_SERVER_BIN      the nats-server both sides start (default: this
#                        checkout's pinned one, from scripts/setup.sh)
#   JSBENCH_AB_OUT       parent of the results folder (default: target/ab/results)
#   JSBENCH_AB_PIN       1 (default on 2+ cores): server on CPU 0, slices on the
#                        others (docs/ab.md: it halves run-to-run noise here); 0: off
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$root"

usage() {
    echo "usage: scripts/ab-commits.sh BASE_REF [NEW_REF] [-- JSBENCH_AB_ARGS...]" >&2
    exit 2
}

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

profile=${JSBENCH_AB_PROFILE:-ci}
# The binaries are built in worktrees that are removed afterwards, so the
# nats-server each would find beside its sources is not there: both sides
# use this checkout's pinned one (scripts/setup.sh), or NATS_SERVER_BIN.
export NATS_SERVER_BIN=${NATS_SERVER_BIN:-$root/.tools/nats-server-2.15.1/bin/nats-server}
if [[ ! -x $NATS_SERVER_BIN ]]; then
    echo "error: no nats-server at $NATS_SERVER_BIN: run scripts/setup.sh (or set NATS_SERVER_BIN)" >&2
    exit 2
fi
out=${JSBENCH_AB_OUT:-target/ab/results}
ab_dir=$root/target/ab
mkdir -p "$ab_dir/bin" "$ab_dir/worktrees" "$out"

build_dir=$ab_dir
# shellcheck source=scripts/lib/build-commit.sh
source "$root/scripts/lib/build-commit.sh"

base_sha=$(resolve "$base_ref")
base_bin=$(build_commit "$base_sha")
if [[ -n $new_ref ]]; then
    new_bin=$(build_commit "$(resolve "$new_ref")")
else
    echo "ab-commits: building this checkout" >&2
    cargo build --release --locked --quiet --bin jsbench
    new_bin="$ab_dir/bin/checkout/jsbench"
    mkdir -p "$(dirname "$new_bin")"
    cp target/release/jsbench "$new_bin"
fi
if ! "$new_bin" ab --help >/dev/null 2>&1; then
    echo "error: NEW (${new_ref:-this checkout}) has no 'jsbench ab'; it must be this commit or later" >&2
    exit 2
fi

pin=()
cores=$(nproc 2>/dev/null || echo 1)
if [[ ${JSBENCH_AB_PIN:-$([[ $cores -ge 2 ]] && echo 1 || echo 0)} == 1 ]]; then
    pin=(--pin)
fi

before=$(ls -1 "$out")
set +e
"$new_bin" ab "$profile" --base-jsbench "$base_bin" --new-jsbench "$new_bin" \
    "${pin[@]}" -o "$out" "$@"
status=$?
set -e
run=$(comm -13 <(echo "$before") <(ls -1 "$out") | tail -n 1)
if [[ -n $run && -f $out/$run/ab.md ]]; then
    echo "ab-commits: BASE $base_ref (${base_sha:0:7}) vs NEW ${new_ref:-this checkout}: $out/$run/ab.md (exit $status)" >&2
fi
exit "$status"
