#!/usr/bin/env python3
"""Totals from `squeezefs stats PATH --json`: prints "DISK UNCOMPRESSED REFERENCED" (bytes).

Takes the "total"/"totals" object when the output has one, else sums the per algorithm/level
rows; accepts the field names with or without a `_bytes` suffix. Fails loudly (exit 1, message
naming the keys it saw) rather than guessing when neither shape is present.

usage: squeezefs_stats.py STATS.json
"""
import json
import sys

FIELDS = ("disk", "uncompressed", "referenced")


def pick(obj, name):
    for k in (name + "_bytes", name):
        if isinstance(obj, dict) and isinstance(obj.get(k), (int, float)):
            return int(obj[k])
    return None


def totals(doc):
    for key in ("total", "totals", "sum"):
        t = doc.get(key) if isinstance(doc, dict) else None
        if isinstance(t, dict):
            vals = [pick(t, f) for f in FIELDS]
            if None not in vals:
                return vals
    if isinstance(doc, dict) and None not in [pick(doc, f) for f in FIELDS]:
        return [pick(doc, f) for f in FIELDS]
    rows = None
    if isinstance(doc, list):
        rows = doc
    elif isinstance(doc, dict):
        for key in ("rows", "by_algorithm", "algorithms", "usage", "entries"):
            if isinstance(doc.get(key), list):
                rows = doc[key]
                break
    if rows is not None:
        vals = [0, 0, 0]
        for r in rows:
            got = [pick(r, f) for f in FIELDS]
            if None in got:
                raise ValueError(f"row without {FIELDS} fields: {r}")
            vals = [a + b for a, b in zip(vals, got)]
        return vals
    raise ValueError("no totals found; top-level keys: "
                     + (", ".join(doc.keys()) if isinstance(doc, dict) else type(doc).__name__))


def main(argv):
    if len(argv) != 2:
        print(__doc__, file=sys.stderr)
        return 2
    with open(argv[1]) as f:
        doc = json.load(f)
    try:
        print(*totals(doc))
    except ValueError as e:
        print(f"squeezefs_stats: {argv[1]}: {e}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
