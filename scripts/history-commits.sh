#!/usr/bin/env bash
# Reconstructs a history of results over the last N commits of a branch, so
# `jsbench history` can look for the drift that no single pull request's
# paired comparison shows (docs/history.md).
#
#   scripts/history-commits.sh [-n N] [--runs R] [--no-draw] [REF] [-- JSBENCH_RUN_ARGS...]
#
#   REF        the branch or commit whose first-parent line is walked
#              (default: HEAD); merges count once, as the commit that landed
#   -n N       how many commits, newest first along that line (default: 10)
#   --runs R   runs of the profile per commit (default: 1). Runs go in
#              rounds, oldest commit to newest in each round, so a machine
#              that slows down during the hours a history takes spreads its
#              drift over every commit instead of pinning it on the last ones
#   --no-draw  only build and run: do not append to the history file or draw
#   after --   more arguments for each `jsbench run`
#
# Each commit is built once by scripts/lib/build-commit.sh, the build
# scripts/ab-commits.sh uses (worktrees under target/ab/worktrees, one shared
# cargo target directory). By default the history's builds are incremental
# in one fixed worktree: neighbouring commits share most of their code, and a
# whole release build of each took 5 to 15 minutes on a shared 2-core
# machine. Every commit of a history is built the same way, so they compare;
# the binaries (256 codegen units) are kept in target/ab/bin-incremental/
# apart from ab's. JSBENCH_BUILD_INCREMENTAL=0 builds each whole, as ab does,
# and shares ab's binaries (target/ab/bin/<sha>/jsbench). A commit that
# does not build, or whose run fails to start, is skipped and said so; a run
# that breaks an invariant is kept (the history marks it).
#
# Output under $JSBENCH_HISTORY_OUT (default target/history):
#   runs/<utc>-<sha>-<profile>/   every run's results folder, as `jsbench run` writes it
#   history.jsonl                 one line per run (`jsbench history --append`),
#                                 the file CI keeps on its bench-history branch
#   history.html, history.md      `jsbench history` over that file, in git order
# The last two need this checkout's jsbench (built here with cargo build
# --release) to have `jsbench history`.
#
# Environment:
#   JSBENCH_HISTORY_PROFILE  the profile to run (default: ci)
#   JSBENCH_HISTORY_OUT      where the history goes (default: target/history)
#   JSBENCH_BUILD_INCREMENTAL  1 (default) or 0, see above
#   JSBENCH_BUILD_NICE       a prefix for the builds (default: "nice -n 10":
#                            they share the machine with the runs' measurements)
#   NATS_SERVER_BIN          the nats-server every run starts (default: this
#                            checkout's pinned one, from scripts/setup.sh)
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$root"

usage() {
    echo "usage: scripts/history-commits.sh [-n N] [--runs R] [--no-draw] [REF] [-- JSBENCH_RUN_ARGS...]" >&2
    exit 2
}

count=10
runs=1
draw=1
ref=HEAD
while [[ $# -gt 0 ]]; do
    case $1 in
    -n) [[ $# -ge 2 && $2 =~ ^[1-9][0-9]*$ ]] || usage; count=$2; shift 2 ;;
    --runs) [[ $# -ge 2 && $2 =~ ^[1-9][0-9]*$ ]] || usage; runs=$2; shift 2 ;;
    --no-draw) draw=0; shift ;;
    --) shift; break ;;
    -*) usage ;;
    *) ref=$1; shift ;;
    esac
done

profile=${JSBENCH_HISTORY_PROFILE:-ci}
export NATS_SERVER_BIN=${NATS_SERVER_BIN:-$root/.tools/nats-server-2.15.1/bin/nats-server}
if [[ ! -x $NATS_SERVER_BIN ]]; then
    echo "error: no nats-server at $NATS_SERVER_BIN: run scripts/setup.sh (or set NATS_SERVER_BIN)" >&2
    exit 2
fi
out=${JSBENCH_HISTORY_OUT:-$root/target/history}
mkdir -p "$out/runs"
out=$(cd "$out" && pwd)

build_dir=$root/target/ab
build_nice=${JSBENCH_BUILD_NICE-nice -n 10}
build_incremental=${JSBENCH_BUILD_INCREMENTAL:-1}
# shellcheck source=scripts/lib/build-commit.sh
source "$root/scripts/lib/build-commit.sh"

tip=$(resolve "$ref")
mapfile -t shas < <(git rev-list --first-parent -n "$count" "$tip" | tac)
echo "history: ${#shas[@]} commits of $ref, oldest first: ${shas[*]:0:1} .. ${shas[*]: -1}" >&2

declare -A bins=()
for sha in "${shas[@]}"; do
    if bin=$(build_commit "$sha"); then
        bins[$sha]=$bin
    else
        echo "history: skipping ${sha:0:7}: it does not build" >&2
    fi
done

for ((round = 1; round <= runs; round++)); do
    for sha in "${shas[@]}"; do
        [[ -n ${bins[$sha]:-} ]] || continue
        echo "history: round $round/$runs, ${sha:0:7}: jsbench run $profile" >&2
        # A failed invariant exits 1 and still writes its folder: kept.
        "${bins[$sha]}" run "$profile" -o "$out/runs" "$@" >&2 || \
            echo "history: ${sha:0:7} round $round exited $?" >&2
    done
done

if [[ $draw == 0 ]]; then
    echo "history: runs in $out/runs (not drawn: --no-draw)" >&2
    exit 0
fi
cargo build --release --locked --quiet --bin jsbench
jsbench=$root/target/release/jsbench
if ! "$jsbench" history --help >/dev/null 2>&1; then
    echo "error: this checkout's jsbench has no 'history'; the runs are in $out/runs" >&2
    exit 2
fi
# Appending a folder already in the file is a no-op (keyed by run id), so a
# second pass over the same runs does not double them.
"$jsbench" history --append "$out/history.jsonl" "$out"/runs/*/
"$jsbench" history "$out/history.jsonl" --repo "$root" --out "$out"
