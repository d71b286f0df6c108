#!/usr/bin/env python3
"""The smallest regression `jsbench ab` flags, simulated from measured noise.

Planted regressions measure detection power one effect size at a time, at
five minutes a try. This fills in the rest from the A/A runs that
scripts/ab-power.sh already made: their pairs are this machine's noise.
A simulated `ab` run draws K pairs (whole pairs, every metric of a pair
together, with replacement) from the pooled A/A pairs, moves one metric's
NEW side by a planted factor in its worse direction, and judges it as
`jsbench ab` does (src/ab/stats.rs, src/ab/judge.rs): the Hodges-Lehmann
estimate of the log ratios with its exact Wilcoxon signed-rank interval at
the confidence, a regression only when the whole interval lies beyond the
threshold. The table of smallest regressions judges each simulated run
once, at its last pair (the cost of every look in Python); the planted
rows and the false alarms look as `ab` does, after every pair from the
first count the confidence can decide with, flagging at the first look
that regresses, which adds some power and some false alarms. Power is the share of simulated runs that flag the metric; the
smallest detectable effect is the smallest planted change flagged in at
least 9 of 10.

What it cannot know: an effect that changes the noise as well as the
centre (a planted regression's pairs are only shifted), and a run that
stops early because every other metric was decided (rare in the ci
profile, whose latency tails stay undecided).
The planted regressions of ab-power.sh check it against real runs.

    scripts/ab-power-sim.py OUT [PAIRS...]    # OUT as given to ab-power.sh

Prints a markdown table: per judged metric, the smallest regression flagged
in 9 of 10 simulated runs at each number of pairs (default 10, 20, 40); then,
for every metric a planted configuration in runs.tsv flagged, its true
effect, how many of its tries flagged it and how many simulated runs flag
that effect (the check of the simulation against real runs); and the
simulated false alarms over the A/A pairs as they are.
"""

import csv
import json
import math
import os
import random
import statistics
import sys


def lower_critical(n, tail):
    """The largest t with P(W+ <= t) <= tail for n pairs, or None."""
    top = n * (n + 1) // 2
    counts = [0.0] * (top + 1)
    counts[0] = 1.0
    for rank in range(1, n + 1):
        for w in range(top, rank - 1, -1):
            counts[w] += counts[w - rank]
    total = 2.0**n
    cumulative, found = 0.0, None
    for t, c in enumerate(counts):
        cumulative += c / total
        if cumulative <= tail:
            found = t
        else:
            break
    return found


def interval(diffs, t):
    """Hodges-Lehmann estimate and signed-rank interval (order statistic t)."""
    n = len(diffs)
    walsh = sorted((diffs[i] + diffs[j]) / 2 for i in range(n) for j in range(i, n))
    return walsh[t], walsh[len(walsh) - 1 - t]


def regressed(diffs, direction, limit, t):
    """jsbench's verdict: the whole interval beyond the limit, worse side."""
    low, high = interval(diffs, t)
    if direction == "higher":
        low, high = -high, -low
    return low > limit


def flagged(diffs, direction, limit, confidence):
    """As `ab` decides: it looks after every pair, from the first count the
    confidence can decide with, and stops at the first regression, so a
    run of K pairs is flagged when any of its looks is."""
    for n in range(2, len(diffs) + 1):
        t = CRITICAL.setdefault((n, confidence), lower_critical(n, (1 - confidence) / 2))
        if t is not None and regressed(diffs[:n], direction, limit, t):
            return True
    return False


CRITICAL = {}


def main():
    out = sys.argv[1]
    pair_counts = [int(a) for a in sys.argv[2:]] or [10, 20, 40]
    runs = [r for r in csv.DictReader(open(out + "/runs.tsv"), delimiter="\t") if r["config"] == "aa"]
    pairs, metrics = [], {}
    for r in runs:
        try:
            report = json.load(open(r["folder"] + "/ab.json"))
        except (OSError, ValueError):
            continue
        judged = [m for m in report["metrics"] if m["verdict"] not in ("not_judged", "missing_in_new")]
        if not judged:
            continue
        n = min(len(m["ratios"]) for m in judged)
        for m in judged:
            label = f"{m['key']['scenario']}/{m['key']['variant']}/{m['key']['metric']}"
            metrics[label] = (m["direction"], m["threshold"])
        for i in range(n):
            pairs.append({
                f"{m['key']['scenario']}/{m['key']['variant']}/{m['key']['metric']}": math.log(m["ratios"][i])
                for m in judged
                if m["ratios"][i] > 0
            })
    if not pairs:
        sys.exit(f"error: no A/A pairs under {out}: run scripts/ab-power.sh first")
    confidence = 0.99
    draws = int(os.environ.get("AB_POWER_DRAWS", "400"))
    rng = random.Random(17)
    grid = [x / 100 for x in (1, 2, 3, 4, 5, 6, 7, 8, 10, 12, 15, 20, 25, 30, 40, 50, 75, 100, 150, 200)]
    print(f"From {len(pairs)} A/A pairs of {len(runs)} runs; {draws} simulated runs per cell, "
          f"99% signed-rank intervals; '>' means none up to -90% (rates) or +200% (latency).\n")
    print("| metric | threshold | A/A pair sd (robust) | " + " | ".join(f"{k} pairs" for k in pair_counts) + " |")
    print("|---|---:|---:|" + "---:|" * len(pair_counts))
    for label, (direction, threshold) in sorted(metrics.items()):
        values = sorted(p[label] for p in pairs if label in p)
        if len(values) < 8:
            continue
        q1, q3 = values[len(values) // 4], values[3 * len(values) // 4]
        robust_sd = (q3 - q1) / 1.349
        limit = math.log(1 + threshold)
        cells = []
        for k in pair_counts:
            t = lower_critical(k, (1 - confidence) / 2)
            found = None
            for effect in grid:
                if direction == "higher" and effect >= 1:
                    break
                # A rate's regression is a drop by the effect, a latency's a rise.
                shift = math.log(1 - effect) if direction == "higher" else math.log(1 + effect)
                hits = 0
                for _ in range(draws):
                    d = [rng.choice(values) + shift for _ in range(k)]
                    hits += regressed(d, direction, limit, t)
                if hits >= 0.9 * draws:
                    found = effect
                    break
            worse = "-" if direction == "higher" else "+"
            cells.append(f"{worse}{found * 100:.0f}%" if found is not None else ">")
        print(f"| {label} | {threshold * 100:.0f}% | {robust_sd * 100:.1f}% | " + " | ".join(cells) + " |")
    # The planted regressions against the simulation: for each metric a
    # planted configuration's tries flagged at least once, its true effect
    # (the median ratio of all its tries' pairs), how many tries flagged
    # it, and the share of simulated runs of the same pairs flagging that
    # effect. Agreement says the A/A noise is the noise a regression meets.
    planted = {}
    for r in csv.DictReader(open(out + "/runs.tsv"), delimiter="\t"):
        if r["config"] == "aa":
            continue
        planted.setdefault(r["config"], []).append(r)
    if planted:
        print("\n| planted | metric | true effect | flagged | simulated |")
        print("|---|---|---:|---:|---:|")
    for config, tries in planted.items():
        reports = []
        for r in tries:
            try:
                reports.append(json.load(open(r["folder"] + "/ab.json")))
            except (OSError, ValueError):
                continue
        flagged_metrics = {}
        ratios = {}
        pairs_per_try = []
        for report in reports:
            pairs_per_try.append(len(report["pairs"]))
            for m in report["metrics"]:
                label = f"{m['key']['scenario']}/{m['key']['variant']}/{m['key']['metric']}"
                ratios.setdefault(label, []).extend(x for x in m["ratios"] if x > 0)
                if m["verdict"] == "regressed":
                    flagged_metrics[label] = flagged_metrics.get(label, 0) + 1
        # A run that stopped early at a regression had budget for more:
        # simulate the budget's pairs, the most any try ran.
        k = max(pairs_per_try) if pairs_per_try else 10
        for label, caught in sorted(flagged_metrics.items()):
            if label not in metrics or not ratios.get(label):
                continue
            direction, threshold = metrics[label]
            values = sorted(p[label] for p in pairs if label in p)
            shift = math.log(statistics.median(ratios[label]))
            hits = sum(
                flagged([rng.choice(values) + shift for _ in range(k)], direction,
                        math.log(1 + threshold), confidence)
                for _ in range(draws)
            )
            effect = (math.exp(shift) - 1) * 100
            print(f"| {config} | {label} | {effect:+.1f}% | {caught} of {len(reports)} | "
                  f"{hits * 100 / draws:.0f}% of {k}-pair runs |")

    # False alarms: whole simulated A/A runs (pairs drawn jointly), any metric regressed.
    k = pair_counts[0]
    alarms = 0
    for _ in range(2000):
        drawn = [rng.choice(pairs) for _ in range(k)]
        for label, (direction, threshold) in metrics.items():
            d = [p[label] for p in drawn if label in p]
            if len(d) == k and flagged(d, direction, math.log(1 + threshold), confidence):
                alarms += 1
                break
    print(f"\nSimulated A/A runs of {k} pairs with any judged metric regressed: "
          f"{alarms / 20:.1f} in 100.")


if __name__ == "__main__":
    main()
