#!/usr/bin/env python3
"""Counts the production lines of src/: what is left once tests, comments
and blank lines are taken out, per top-level module and per scenario kind.

Tests are `#[cfg(test)]` items (a `mod tests { ... }`, a test-only function
or impl) and the files only they declare (`#[cfg(test)] mod tests;` ->
tests.rs). Comments are `//` lines (doc comments included) and `/* */`
blocks. A line that holds code and a trailing comment counts as code.

    scripts/loc.py               # totals by module, then by kind
    scripts/loc.py --files       # every file, largest first
    scripts/loc.py --json        # the same figures as JSON (for scripts)
    scripts/loc.py --root DIR    # another checkout's src/ (before and after)
"""
import argparse
import json
import os
import re
import sys


def strip(text):
    """Returns the text with comments blanked out and string contents kept
    on their lines, so that braces inside strings and comments never count."""
    out = []
    i, n = 0, len(text)
    while i < n:
        c = text[i]
        if text.startswith("//", i):
            j = text.find("\n", i)
            j = n if j < 0 else j
            out.append(" " * (j - i))
            i = j
        elif text.startswith("/*", i):
            depth, j = 1, i + 2
            while j < n and depth:
                if text.startswith("/*", j):
                    depth, j = depth + 1, j + 2
                elif text.startswith("*/", j):
                    depth, j = depth - 1, j + 2
                else:
                    j += 1
            out.append("".join(ch if ch == "\n" else " " for ch in text[i:j]))
            i = j
        elif c == "r" and re.match(r'r#*"', text[i:i + 20]) and not (i and (text[i - 1].isalnum() or text[i - 1] == "_")):
            m = re.match(r'r(#*)"', text[i:])
            end = '"' + m.group(1)
            j = text.find(end, i + len(m.group(0)))
            j = n if j < 0 else j + len(end)
            out.append("".join(ch if ch == "\n" else "s" for ch in text[i:j]))
            i = j
        elif c == '"':
            j = i + 1
            while j < n and text[j] != '"':
                j += 2 if text[j] == "\\" else 1
            j += 1
            out.append("".join(ch if ch == "\n" else "s" for ch in text[i:j]))
            i = j
        elif c == "'":
            # a char literal ('x', '\n', '\u{..}') or a lifetime ('a)
            m = re.match(r"'(\\u\{[0-9a-fA-F]+\}|\\.|[^\\'])'", text[i:i + 12])
            if m:
                out.append("c" * len(m.group(0)))
                i += len(m.group(0))
            else:
                out.append(c)
                i += 1
        else:
            out.append(c)
            i += 1
    return "".join(out)


CFG_TEST = re.compile(r"#\[cfg\(\s*(all\(\s*)?test\b[^\]]*\]")


def test_spans(code):
    """Line ranges (0-based, inclusive) of `#[cfg(test)]` items, and the
    names of modules declared test-only by `#[cfg(test)] mod name;`."""
    spans, test_mods = [], []
    for m in CFG_TEST.finditer(code):
        start = m.start()
        j = m.end()
        # the item ends at its first top-level `;` or at the brace closing
        # its first `{`
        depth = 0
        while j < len(code):
            ch = code[j]
            if ch == "{":
                depth += 1
            elif ch == "}":
                depth -= 1
                if depth == 0:
                    break
            elif ch == ";" and depth == 0:
                decl = re.search(r"\bmod\s+(\w+)\s*$", code[m.end():j])
                if decl:
                    test_mods.append(decl.group(1))
                break
            j += 1
        spans.append((code.count("\n", 0, start), code.count("\n", 0, j)))
    return spans, test_mods


def count_file(path):
    with open(path, encoding="utf-8") as f:
        text = f.read()
    code = strip(text)
    spans, test_mods = test_spans(code)
    in_test = set()
    for a, b in spans:
        in_test.update(range(a, b + 1))
    tally = {"production": 0, "tests": 0, "comments": 0, "blank": 0}
    for number, (raw, line) in enumerate(zip(text.split("\n"), code.split("\n"))):
        if not raw.strip():
            tally["blank"] += 1
        elif not line.strip():
            tally["comments"] += 1
        elif number in in_test:
            tally["tests"] += 1
        else:
            tally["production"] += 1
    return tally, test_mods


def walk(src):
    """Every .rs file under src with its tally; files that only a
    `#[cfg(test)] mod` declares count wholly as tests."""
    files = {}
    test_only = set()
    for folder, _, names in os.walk(src):
        for name in sorted(names):
            if not name.endswith(".rs"):
                continue
            path = os.path.join(folder, name)
            tally, test_mods = count_file(path)
            files[path] = tally
            base = folder if name in ("mod.rs", "lib.rs", "main.rs") else os.path.join(folder, name[:-3])
            for mod in test_mods:
                test_only.add(os.path.join(base, mod + ".rs"))
                test_only.add(os.path.join(base, mod, "mod.rs"))
    for path, tally in files.items():
        if path in test_only or any(path.startswith(t[:-3] + os.sep) for t in test_only if t.endswith(".rs") and not t.endswith("mod.rs")):
            tally["tests"] += tally["production"]
            tally["production"] = 0
    return files


def group(files, src, key):
    sums = {}
    for path, tally in files.items():
        k = key(os.path.relpath(path, src))
        if k is None:
            continue
        s = sums.setdefault(k, {"production": 0, "tests": 0, "comments": 0, "blank": 0, "files": 0})
        for field, value in tally.items():
            s[field] += value
        s["files"] += 1
    return dict(sorted(sums.items(), key=lambda kv: -kv[1]["production"]))


def module_of(rel):
    head = rel.split(os.sep)[0]
    return head[:-3] if head.endswith(".rs") else head


def kind_of(src):
    """A kind is a folder module under scenario/ (its mod.rs); a folder
    beside a file module (search.rs with search/tests.rs) is no kind."""
    def of(rel):
        parts = rel.split(os.sep)
        if len(parts) >= 3 and parts[0] == "scenario" and \
                os.path.isfile(os.path.join(src, "scenario", parts[1], "mod.rs")):
            return parts[1]
        return None
    return of


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--root", default=os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
    parser.add_argument("--files", action="store_true", help="every file, largest first")
    parser.add_argument("--json", action="store_true", help="the figures as JSON")
    args = parser.parse_args()
    src = os.path.join(args.root, "src")
    if not os.path.isdir(src):
        sys.exit(f"error: no src/ under {args.root}")
    files = walk(src)
    total = group(files, src, lambda rel: "all")["all"]
    modules = group(files, src, module_of)
    kinds = group(files, src, kind_of(src))
    if args.json:
        json.dump({"all": total, "modules": modules, "kinds": kinds,
                   "files": {os.path.relpath(p, src): t for p, t in files.items()}}, sys.stdout, indent=1)
        print()
        return
    if args.files:
        for path, t in sorted(files.items(), key=lambda kv: -kv[1]["production"]):
            print(f"{t['production']:6}  {os.path.relpath(path, src)}")
        return
    print(f"src/: {total['production']} production lines "
          f"({total['tests']} tests, {total['comments']} comments, {total['blank']} blank; {total['files']} files)")
    print("\nby module             production  tests  files")
    for name, s in modules.items():
        print(f"  {name:20} {s['production']:10} {s['tests']:6} {s['files']:6}")
    print("\nby scenario kind      production  files")
    for name, s in kinds.items():
        print(f"  {name:20} {s['production']:10} {s['files']:6}")


if __name__ == "__main__":
    # `loc.py | head` ends quietly, as a Unix filter does.
    import signal

    signal.signal(signal.SIGPIPE, signal.SIG_DFL)
    main()
