#!/usr/bin/env python3
"""Joins auto-eval matrix runs whose auto specs were named differently (e.g. one run with
`auto~feedback=1` beside the model's `auto`, the next with `auto` the feedback mode beside
`auto~feedback=0`) into one table of medians per cell: the best fixed level, `none`, and
each named auto mode against them.

usage: bench/auto-eval-combine.py RESULTS.jsonl=SPEC:NAME,SPEC:NAME [RESULTS.jsonl=...]
  e.g. m1/results.jsonl=auto:model,auto~feedback=1:feedback \\
       m2/results.jsonl=auto:feedback,auto~feedback=0:model
Fixed specs (no `auto` prefix) are taken from every file under their own names; auto specs
not named are left out.
"""
import json
import statistics as st
import sys


def load(args):
    rows = []
    for arg in args:
        path, _, names = arg.partition("=")
        mapping = dict(n.rsplit(":", 1) for n in names.split(",") if n)
        for line in open(path):
            r = json.loads(line)
            s = r["spec"]
            if s.startswith("auto"):
                if s not in mapping:
                    continue
                s = mapping[s]
            r["name"] = s
            rows.append(r)
    return rows


def main():
    if len(sys.argv) < 2:
        sys.exit(__doc__)
    rows = load(sys.argv[1:])
    modes = []
    for arg in sys.argv[1:]:
        for n in arg.partition("=")[2].split(","):
            if n and n.rsplit(":", 1)[1] not in modes:
                modes.append(n.rsplit(":", 1)[1])
    cells = {}
    for r in rows:
        key = (r["dataset"], r["cores"], r["limit_mbs"])
        cells.setdefault(key, {}).setdefault(r["name"], []).append(r)

    def order(k):
        return (k[0], k[1], k[2] if k[2] is not None else float("inf"))

    head = ["data", "cores", "device MB/s", "best fixed (MB/s ×ratio)", "none"]
    for m in modes:
        head += [m, "÷ best", "÷ none", "ratio − best's"]
    head.append("runs")
    print("| " + " | ".join(head) + " |")
    print("|" + "---|" * len(head))
    for k in sorted(cells, key=order):
        agg = {}
        for name, rs in cells[k].items():
            mbs = st.median(r["bytes"] / r["seconds"] / 1e6 for r in rs)
            ratio = st.median(r["uncompressed_bytes"] / r["disk_bytes"] for r in rs)
            agg[name] = (mbs, ratio, len(rs))
        fixed = [(n, v) for n, v in agg.items() if n not in modes]
        if not fixed or "none" not in agg:
            continue
        best_name, best = max(fixed, key=lambda x: x[1][0])
        none = agg["none"][0]
        limit = k[2] if k[2] is not None else "unthrottled"
        row = [k[0], str(k[1]), str(limit), f"{best_name} {best[0]:.0f} ×{best[1]:.2f}", f"{none:.0f}"]
        runs = 0
        for m in modes:
            if m in agg:
                v = agg[m]
                runs = max(runs, v[2])
                row += [f"{v[0]:.0f} ×{v[1]:.2f}", f"{v[0] / best[0]:.2f}", f"{v[0] / none:.2f}",
                        f"{(v[1] / best[1] - 1) * 100:+.0f}%"]
            else:
                row += ["-"] * 4
        row.append(str(runs))
        print("| " + " | ".join(row) + " |")


main()
