#!/usr/bin/env bash
# Measures what `jsbench ab ci` can detect on this machine: how often it
# cries wolf comparing a build with itself (A/A), and how often it flags
# regressions of known size planted in NEW. Hours of machine time: a script,
# never a test. docs/ab.md publishes what it found here.
#
#   scripts/ab-power.sh [OUT]          # default: target/ab-power
#
# Each configuration is run TRIES times (AA_RUNS for the A/A one), one
# `jsbench ab` after another, on a release build copied to OUT/bin so a
# rebuild during the hours it takes changes nothing. Regressions planted:
#   publish-size-N   NEW sends N-byte messages in the publish scenario (128
#                    in BASE): its publish rates drop by a few percent
#   latency-size-N   NEW sends N-byte messages in the latency scenario: its
#                    end-to-end percentiles rise
#   server-1core     NEW's nats-server confined to CPU 0, where the slices
#                    run too (--slice-cpus 0; BASE's server has both cores)
# The others run as CI does (scripts/ab-commits.sh): --pin.
#
# Writes OUT/runs.tsv (one line per ab run) and OUT/power.md (the table:
# the true effect as the pooled pairs of all tries measured it, and how many
# tries flagged it; A/A runs count false alarms (exit 1) and inconclusive
# ones (exit 3) apart; then, from the A/A pairs, every judged metric's
# power against planted effects by `jsbench ab-simulate`). A second run
# skips the runs runs.tsv already has.
#
# `touch OUT/PAUSE` holds the next run until the file is removed, so the
# machine can be used for something else without a run measuring it.
#
# Environment:
#   AB_POWER_CONFIGS  which configurations, space-separated (default: all below)
#   AB_POWER_TRIES    ab runs per planted regression (default 10)
#   AB_POWER_AA       A/A runs (default 20)
#   AB_POWER_BUDGET   each run's --budget (default 5m, as CI)
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$root"
out=$(realpath -m "${1:-target/ab-power}")
configs=${AB_POWER_CONFIGS:-"aa publish-size-384 publish-size-256 latency-size-16384 latency-size-4096 server-1core"}
tries=${AB_POWER_TRIES:-10}
aa_runs=${AB_POWER_AA:-20}
budget=${AB_POWER_BUDGET:-5m}
mkdir -p "$out/bin" "$out/runs"

if [[ ! -x $out/bin/jsbench ]]; then
    cargo build --release --quiet --bin jsbench
    cp target/release/jsbench "$out/bin/jsbench"
fi
jsbench=$out/bin/jsbench
server=${NATS_SERVER_BIN:-$root/.tools/nats-server-2.15.1/bin/nats-server}
[[ -x $server ]] || { echo "error: no nats-server at $server: run scripts/setup.sh" >&2; exit 2; }

# A jsbench "build" that runs its slices with the message_size of the
# scenario of kind KIND set to SIZE (ci has one publish and one latency
# scenario): the slice profile's keys are sorted, so `kind` comes before
# `message_size` in each [[scenario]] table.
size_wrapper() {
    local scenario=$1 size=$2 path=$out/bin/$1-size-$2.sh
    cat > "$path" <<EOF
#!/bin/sh
# jsbench whose $scenario scenario sends $size-byte messages, as a warm
# side (ab-side) or a slice (run) alike
command="\$1"
profile="\$2"
patched="\$profile.$scenario-$size.toml"
awk -v want="$scenario" -v size="$size" '
    /^\[\[scenario\]\]/ { inside = 0 }
    /^kind = / { k = \$3; gsub(/"/, "", k); if (k == want) inside = 1 }
    inside && /^message_size = / { \$0 = "message_size = " size }
    { print }
' "\$profile" > "\$patched"
shift 2
exec "$jsbench" "\$command" "\$patched" "\$@"
EOF
    chmod +x "$path"
    echo "$path"
}

one_core=$out/bin/nats-server-cpu0.sh
cat > "$one_core" <<EOF
#!/bin/sh
# nats-server confined to CPU 0
exec taskset -c 0 "$server" "\$@"
EOF
chmod +x "$one_core"

# The ab arguments of a configuration, and the metric its regression shows in.
args_of() {
    case $1 in
        aa) echo "--pin" ;;
        publish-size-*) echo "--pin --base-jsbench $jsbench --new-jsbench $(size_wrapper publish "${1#publish-size-}")" ;;
        latency-size-*) echo "--pin --base-jsbench $jsbench --new-jsbench $(size_wrapper latency "${1#latency-size-}")" ;;
        server-1core) echo "--slice-cpus 0 --base-server $server --new-server $one_core" ;;
        *) echo "error: unknown configuration $1" >&2; exit 2 ;;
    esac
}
target_of() {
    case $1 in
        aa) echo "-" ;;
        publish-size-* | server-1core) echo "publish_rate" ;;
        latency-size-*) echo "e2e_latency.p99" ;;
    esac
}

[[ -f $out/runs.tsv ]] || printf 'config\ttry\texit\tverdict\tregressed\tpairs\tseconds\tfolder\n' > "$out/runs.tsv"
for config in $configs; do
    n=$tries
    [[ $config == aa ]] && n=$aa_runs
    for try in $(seq 1 "$n"); do
        if awk -F'\t' -v c="$config" -v t="$try" '$1 == c && $2 == t { found = 1 } END { exit !found }' "$out/runs.tsv"; then
            continue
        fi
        while [[ -e $out/PAUSE ]]; do
            sleep 10
        done
        dir=$out/runs/$config-$try
        rm -rf "$dir"
        echo "ab-power: $config, try $try of $n" >&2
        start=$(date +%s)
        set +e
        # shellcheck disable=SC2046
        "$jsbench" ab ci --budget "$budget" -o "$dir" $(args_of "$config") > "$dir.log" 2>&1
        status=$?
        set -e
        folder=$(ls -1d "$dir"/*/ 2>/dev/null | head -n 1)
        python3 - "$config" "$try" "$status" "$(( $(date +%s) - start ))" "${folder%/}" >> "$out/runs.tsv" <<'PY'
import json, sys
config, attempt, status, seconds, folder = sys.argv[1:]
try:
    r = json.load(open(folder + "/ab.json"))
    regressed = ",".join(f"{m['key']['scenario']}/{m['key']['variant']}/{m['key']['metric']}"
                         for m in r["metrics"] if m["verdict"] == "regressed") or "-"
    print("\t".join([config, attempt, status, r["verdict"], regressed, str(len(r["pairs"])), seconds, folder]))
except Exception as e:
    print("\t".join([config, attempt, status, f"no report ({e})", "-", "0", seconds, folder]))
PY
    done
done

# The table: per configuration, the true effect on its metric (the median
# of every pair's ratio over all its tries: many more pairs than one ab
# run has), and how many tries flagged it.
python3 - "$out" "$(for c in $configs; do echo "$c=$(target_of "$c")"; done)" > "$out/power.md" <<'PY'
import csv, json, math, statistics, sys
out, targets = sys.argv[1], dict(l.split("=", 1) for l in sys.argv[2].split())
rows = list(csv.DictReader(open(out + "/runs.tsv"), delimiter="\t"))
print("| configuration | metric | true effect (pooled pairs) | flagged | runs | median time |")
print("|---|---|---:|---:|---:|---:|")
for config, target in targets.items():
    runs = [r for r in rows if r["config"] == config]
    if not runs:
        continue
    ratios = []
    for r in runs:
        try:
            report = json.load(open(r["folder"] + "/ab.json"))
        except Exception:
            continue
        for m in report["metrics"]:
            # Judged metrics only: a paced scenario's publish_rate has the
            # same name and a ratio of 1.
            if target != "-" and m["key"]["metric"] == target and m["verdict"] != "not_judged":
                ratios += m["ratios"]
    effect = f"{(statistics.median(ratios) - 1) * 100:+.1f}% ({len(ratios)} pairs)" if ratios else "-"
    if config == "aa":
        flagged = sum(1 for r in runs if r["exit"] == "1")
        undecided = sum(1 for r in runs if r["exit"] == "3")
        what = f"false alarms, {undecided} inconclusive"
    else:
        flagged = sum(1 for r in runs if r["exit"] == "1" and target in r["regressed"])
        what = "caught"
    seconds = statistics.median(int(r["seconds"]) for r in runs)
    print(f"| {config} | {target} | {effect} | {flagged} {what} | {len(runs)} | {seconds:.0f} s |")
PY
# Each judged metric's power against planted effects and its false alarms,
# simulated from the A/A pairs by the judge ab runs (src/ab/simulate.rs
# says how and what it cannot know).
aa_folders=$(awk -F'\t' '$1 == "aa" && $8 != "" { print $8 }' "$out/runs.tsv")
if [[ -n $aa_folders ]]; then
    # shellcheck disable=SC2086
    { echo; "$jsbench" ab-simulate $aa_folders --runs 400; } >> "$out/power.md"
fi
cat "$out/power.md"
