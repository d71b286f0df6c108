#!/usr/bin/env bash
# jsbench's per-message work in instructions (callgrind), against the counts
# committed in benches/instructions-baseline.json: exit 1 when a count rose
# by more than the threshold (default 2%), 2 when the baseline does not fit.
# Counts are deterministic for one compiler and one build profile, so record
# a new baseline when the toolchain changes (saved with rustc 1.95.0;
# .github/workflows/bench.yml pins that toolchain for the check):
#
#   scripts/instructions.sh                 # compare (threshold 2%)
#   scripts/instructions.sh --threshold 5   # another threshold, in percent
#   cargo bench --bench instructions -- --save benches/instructions-baseline.json
#
# Needs valgrind (apt-get install valgrind). About a minute after the bench
# build (a release build, as `cargo bench` makes).
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
exec cargo bench --bench instructions -- --check benches/instructions-baseline.json "$@"
