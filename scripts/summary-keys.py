#!/usr/bin/env python3
"""Prints what a results folder's summary.json promises, one line a fact,
sorted: which scenarios and variants ran, the names of their params,
metrics, histograms, timelines and invariants, each invariant's state and
each variant's verdict. Values are left out, so two runs of one build on
a quiet machine print the same lines, and two builds that behave alike
print the same lines too; `diff` of two outputs is what changed.

    scripts/summary-keys.py results/<run>/                # the lines
    scripts/summary-keys.py --diff BASE_DIR NEW_DIR       # what differs, exit 1 if anything
"""
import json
import os
import re
import sys

# A name that carries a run's own token (a cluster node's server name,
# `jsbench-40e760-n2`) is compared without it.
TOKEN = re.compile(r"jsbench-[0-9a-f]{6}-")


def plain(name):
    return TOKEN.sub("jsbench-*-", name)


def lines(folder):
    path = os.path.join(folder, "summary.json")
    try:
        with open(path, encoding="utf-8") as f:
            summary = json.load(f)
    except (OSError, ValueError) as e:
        sys.exit(f"error: {path}: {e}")
    out = {f"run verdict {summary.get('verdict')}"}
    for s in summary.get("scenarios", []):
        scenario = f"{s['name']} ({s['kind']})"
        for v in s.get("variants", []):
            at = f"{scenario} / {v['name']}"
            out.add(f"{at}: passed {v.get('passed')}")
            out.add(f"{at}: error {'yes' if v.get('error') else 'no'}")
            for p in v.get("params", {}):
                out.add(f"{at}: param {p}")
            for m in v.get("metrics", []):
                out.add(f"{at}: metric {m['name']} [{m.get('unit')}, {m.get('direction')}]")
            for h in v.get("histograms", []):
                out.add(f"{at}: histogram {h['name']}")
            for t in v.get("timelines", {}):
                out.add(f"{at}: timeline {plain(t)}")
            for i in v.get("invariants", []):
                state = "not applicable" if not i.get("applicable", True) else ("held" if i["passed"] else "FAILED")
                side = " (client side)" if i.get("client_side") else ""
                out.add(f"{at}: invariant {i['name']}{side}: {state}")
            if v.get("parts_file"):
                out.add(f"{at}: parts")
    return out


def main(argv):
    if len(argv) == 1:
        for line in sorted(lines(argv[0])):
            print(line)
        return 0
    if len(argv) == 3 and argv[0] == "--diff":
        base, new = lines(argv[1]), lines(argv[2])
        for line in sorted(base - new):
            print(f"- {line}")
        for line in sorted(new - base):
            print(f"+ {line}")
        return 1 if base != new else 0
    print(__doc__, file=sys.stderr)
    return 2


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
