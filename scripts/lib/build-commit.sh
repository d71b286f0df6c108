# Sourced by scripts/ab-commits.sh and scripts/history-commits.sh: builds one
# commit of this repository into a binary kept by its sha, so a commit built
# for a pull request's comparison is not built again for the history, and CI
# can cache the folder between runs.
#
# The caller sets build_dir (target/ab: bin/<sha>/jsbench, worktrees/<sha>
# while building, cargo/ the one target directory every commit shares, so
# dependencies build once) and may set:
#   build_nice         a command prefix for cargo, e.g. "nice -n 10" on a
#                      machine shared with measurements
#   build_incremental  1: incremental release builds in one fixed worktree
#                      (worktrees/incremental), so the next commit reuses what
#                      did not change (a commit after its neighbour costs a
#                      fraction of a whole build). Such binaries are built with
#                      256 codegen units instead of 16, so they are kept apart
#                      (bin-incremental/<sha>/jsbench) and never stand in for
#                      ab's: only compare them with each other. One build at a
#                      time per build_dir in this mode.
# Each commit is built in a git worktree of its own, removed afterwards: the
# caller's checkout is never touched.

# Prints the full sha of commit $1, or says which ref is unknown and exits 2.
resolve() {
    git rev-parse --verify --quiet "$1^{commit}" || {
        echo "error: $1 is not a commit of this repository (fetch it first: git fetch origin $1)" >&2
        exit 2
    }
}

# Builds commit $1 (a full sha) unless its binary is already there; prints
# the binary's path. A commit that does not build exits 2.
build_commit() {
    local sha=$1 bin="$build_dir/bin/$1/jsbench" tree="$build_dir/worktrees/$1" incremental=0
    if [[ ${build_incremental:-0} == 1 ]]; then
        bin="$build_dir/bin-incremental/$1/jsbench"
        tree="$build_dir/worktrees/incremental"
        incremental=1
    fi
    if [[ -x $bin ]]; then
        echo "build: ${sha:0:7} already built: $bin" >&2
        echo "$bin"
        return
    fi
    echo "build: building ${sha:0:7} in $tree" >&2
    mkdir -p "$build_dir/worktrees"
    git worktree remove --force "$tree" >/dev/null 2>&1 || true
    git worktree add --detach --force "$tree" "$sha" >&2
    # shellcheck disable=SC2086 # build_nice is a command prefix, split on purpose
    if ! (cd "$tree" && CARGO_INCREMENTAL=$incremental CARGO_TARGET_DIR="$build_dir/cargo" ${build_nice:-} cargo build --release --locked --quiet --bin jsbench >&2); then
        git worktree remove --force "$tree" >/dev/null 2>&1 || true
        echo "error: commit ${sha:0:7} does not build" >&2
        exit 2
    fi
    mkdir -p "$(dirname "$bin")"
    cp "$build_dir/cargo/release/jsbench" "$bin"
    git worktree remove --force "$tree" >/dev/null 2>&1 || true
    echo "$bin"
}
