#!/usr/bin/env bash
# Runs the `ci` profile on the embedded nats-server with a release build and
# compares it with the committed baseline; prints the comparison as Markdown
# (also written to $OUT/compare.md, ready for a pull-request comment).
#
#   scripts/ci-compare.sh [BASELINE]        # default: results/baseline
#
# Exit status is compare's: 0 no regression, 1 a regression or an invariant
# failure in the new run, 2 unusable input (a baseline from another profile
# or schema: record a new one, see results/README.md; the rule and the
# threshold are explained in docs/compare.md).
#
# Environment:
#   JSBENCH_CI_THRESHOLD  smallest change that counts (default 100%: on the
#                         2-core shared machine the baseline was recorded on,
#                         p50 latencies of the same commit moved by up to +85%
#                         between runs; a quiet dedicated runner can use 25%)
#   JSBENCH_CI_FAIL_ON    regressions (default) or invariants: report
#                         regressions without failing, fail only when a
#                         delivery guarantee broke
#   JSBENCH_CI_OUT        where the run's results go (default target/ci-compare)
#
# Only the metrics this kind of machine measures reproducibly are judged:
# p50 latencies and achieved rates (--only below). Every other metric is
# shown as "not judged". Invariants are always judged.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."

baseline=${1:-results/baseline}
threshold=${JSBENCH_CI_THRESHOLD:-100%}
fail_on=${JSBENCH_CI_FAIL_ON:-regressions}
out=${JSBENCH_CI_OUT:-target/ci-compare}

if [[ ! -e "$baseline" ]]; then
    echo "error: no baseline at $baseline (record one: see results/README.md and docs/compare.md)" >&2
    exit 2
fi

cargo build --release --quiet
jsbench=target/release/jsbench

mkdir -p "$out"
# A fresh folder per run inside $out; find it by listing before and after.
before=$(ls -1 "$out")
set +e
"$jsbench" run ci -o "$out" --progress never >&2
run_status=$?
set -e
# 1 means an invariant failed: the results are written, and compare lists
# the failure first; 4 that a variant checked nothing (its results are
# written too). Anything else (bad input, interrupted) stops here.
if [[ $run_status -ne 0 && $run_status -ne 1 && $run_status -ne 4 ]]; then
    echo "error: jsbench run ci exited with $run_status" >&2
    exit "$run_status"
fi
new=$(comm -13 <(echo "$before") <(ls -1 "$out") | grep -v '\.md$' | tail -n 1)
if [[ -z "$new" ]]; then
    echo "error: jsbench run ci wrote no results folder under $out" >&2
    exit 2
fi

set +e
"$jsbench" compare "$baseline" "$out/$new" \
    --threshold "$threshold" --fail-on "$fail_on" \
    --only '*latency*.p50' --only '*_rate' \
    --format markdown > "$out/compare.md"
status=$?
set -e
cat "$out/compare.md"
echo "comparison: $out/compare.md; results: $out/$new (exit $status)" >&2
exit "$status"
