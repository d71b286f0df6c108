#!/usr/bin/env bash
# Publishes at max rate with 1 and then 2 publish-runtime threads, ROUNDS
# times alternately, and prints each run's rate and CPU per message, so the
# gain of a second thread is read from pairs taken minutes apart at most
# (docs/sizing.md has the figures and how to size workers per host).
#
#   scripts/publisher-threads.sh [ROUNDS]      # default 3
#
# The stream is in memory and the server on the embedded default: what
# limits the rate is then the client's publish path or the server's CPU,
# not a disk. Results go to target/publisher-threads/<threads>-<round>/.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."

rounds=${1:-3}
case "$rounds" in
    '' | *[!0-9]* | 0) echo "usage: scripts/publisher-threads.sh [ROUNDS ≥ 1]" >&2; exit 2 ;;
esac
out=target/publisher-threads
rm -rf "$out"
mkdir -p "$out"
profile="$out/profile.toml"
cat > "$profile" <<'TOML'
name = "publisher-threads"
description = "Max-rate async publish from 4 publishers into a memory stream"

[server]
storage = "memory"
replicas = 1

[[scenario]]
kind = "publish"
name = "max"
duration = "5s"
warmup = "1s"
rates = ["max"]
publishers = 4
pub_ack_window = 1024
message_size = 128
TOML

cargo build --release --quiet
for round in $(seq 1 "$rounds"); do
    for threads in 1 2; do
        target/release/jsbench run "$profile" --publisher-threads "$threads" \
            --progress never --out "$out/$threads-$round" >/dev/null
    done
done

python3 - "$out" "$rounds" <<'PY'
import glob, json, statistics, sys
out, rounds = sys.argv[1], int(sys.argv[2])
def figures(threads, rnd):
    path = glob.glob(f"{out}/{threads}-{rnd}/*/summary.json")[0]
    v = json.load(open(path))["scenarios"][0]["variants"][0]
    m = {x["name"]: x["value"] for x in v["metrics"]}
    return m["publish_rate"], m.get("publisher_cpu_per_msg"), m.get("server_cpu_per_msg")
print("round  threads  publish msg/s  publisher µs/msg  server µs/msg")
ratios = []
for rnd in range(1, rounds + 1):
    one, two = figures(1, rnd), figures(2, rnd)
    for t, f in ((1, one), (2, two)):
        print(f"{rnd:5}  {t:7}  {f[0]:13.0f}  {f[1]:16.2f}  {f[2]:13.2f}")
    ratios.append(two[0] / one[0])
print(f"rate ratio 2/1 threads, paired by round: median {statistics.median(ratios):.3f} "
      f"(min {min(ratios):.3f}, max {max(ratios):.3f})")
PY
