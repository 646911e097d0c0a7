#!/usr/bin/env python3
"""Tables (markdown) from the results.jsonl of bench/compare-btrfs.sh.

Conventions: MB = 10^6 bytes; ratio = logical bytes / data bytes on disk (compsize-style);
"all-in" ratio counts the whole growth of the filesystem (metadata included);
"sq/btrfs" columns divide squeezefs by btrfs: for throughput and compression ratio higher is
better for squeezefs, for seconds lower is better.

usage: report.py RESULTS.jsonl
"""
import json
import sys

SPEC_ORDER = ["none", "lz4", "zstd:1", "zstd:3", "zstd:9"]


def num(v):
    return v if isinstance(v, (int, float)) else None


def fmt(v, digits=2):
    if v is None:
        return "—"
    if isinstance(v, str):
        return v
    return f"{v:.{digits}f}"


def div(a, b):
    a, b = num(a), num(b)
    if a is None or b is None or b == 0:
        return None
    return a / b


def mbps(nbytes, secs):
    r = div(nbytes, secs)
    return None if r is None else r / 1e6


def spec_key(s):
    return (SPEC_ORDER.index(s), "") if s in SPEC_ORDER else (len(SPEC_ORDER), s)


def table(header, rows):
    out = ["| " + " | ".join(header) + " |", "|" + "|".join("---" for _ in header) + "|"]
    out += ["| " + " | ".join(r) + " |" for r in rows]
    return "\n".join(out)


def load(path):
    recs = []
    with open(path) as f:
        for line in f:
            line = line.strip()
            if line:
                recs.append(json.loads(line))
    return recs


def index(recs, part):
    """{(spec, fs[, data]): record} of successful records, plus the failed/skipped ones."""
    ok, bad = {}, []
    for r in recs:
        if r.get("part") != part:
            continue
        if "failed" in r or "skipped" in r:
            bad.append(r)
            continue
        key = (r["spec"], r["fs"]) if part != "c" else (r["spec"], r["fs"], r["data"])
        ok[key] = r
    return ok, bad


def part_a(recs):
    ok, bad = index(recs, "a")
    specs = sorted({k[0] for k in ok}, key=spec_key)
    rows, allin = [], []
    for s in specs:
        b, q = ok.get((s, "btrfs")), ok.get((s, "squeezefs"))
        cols = [s, (b or {}).get("opts") or "(none)"]
        vals = {}
        for name, r in (("b", b), ("q", q)):
            if r:
                vals[name] = (mbps(r["logical"], r["write_s"]), mbps(r["logical"], r["read_s"]),
                              div(r["logical"], r.get("disk")), div(r["logical"], r.get("allin")))
            else:
                vals[name] = (None, None, None, None)
        for name in ("b", "q"):
            cols += [fmt(vals[name][0], 0), fmt(vals[name][1], 0), fmt(vals[name][2])]
        cols += [fmt(div(vals["q"][i], vals["b"][i])) for i in range(3)]
        cols.append(", ".join(f"{n}:{r.get('verified')}" for n, r in (("btrfs", b), ("sq", q)) if r))
        rows.append(cols)
        allin.append([s, fmt(vals["b"][3]), fmt(vals["q"][3]), fmt(div(vals["q"][3], vals["b"][3]))])
    out = ["### (a) corpus copies, compress-force", "",
           table(["spec", "btrfs mount", "btrfs write MB/s", "btrfs read MB/s", "btrfs ratio",
                  "sq write MB/s", "sq read MB/s", "sq ratio",
                  "sq/btrfs write", "sq/btrfs read", "sq/btrfs ratio", "verified"], rows),
           "", "All-in ratio (logical / growth of the filesystem incl. metadata):", "",
           table(["spec", "btrfs", "squeezefs", "sq/btrfs"], allin)]
    return out, bad


def part_b(recs):
    ok, bad = index(recs, "b")
    specs = sorted({k[0] for k in ok}, key=spec_key)
    rows, ratios = [], []
    for s in specs:
        b, q = ok.get((s, "btrfs")), ok.get((s, "squeezefs"))
        cols = [s]
        for r in (b, q):
            if r:
                cols += [fmt(div(r["tar_logical"], r.get("tar_disk"))), fmt(div(r["tree_logical"], r.get("tree_disk"))),
                         fmt(div(r["tree_logical"], r.get("tree_allin"))),
                         fmt(r["copy_s"], 1), fmt(r["extract_s"], 1), fmt(r["read_s"], 1)]
            else:
                cols += ["—"] * 6
        if b and q:
            ratios.append([s, fmt(div(q["copy_s"], b["copy_s"])), fmt(div(q["extract_s"], b["extract_s"])),
                           fmt(div(q["read_s"], b["read_s"])),
                           fmt(div(div(q["tar_logical"], q.get("tar_disk")), div(b["tar_logical"], b.get("tar_disk")))),
                           fmt(div(div(q["tree_logical"], q.get("tree_allin")), div(b["tree_logical"], b.get("tree_allin")))),
                           f"btrfs:{b.get('verified')}, sq:{q.get('verified')}"])
        rows.append(cols)
    out = ["### (b) Linux source tarball, compress", "",
           table(["spec", "btrfs tar ratio", "btrfs tree ratio", "btrfs tree all-in", "btrfs copy s",
                  "btrfs extract s", "btrfs read s",
                  "sq tar ratio", "sq tree ratio", "sq tree all-in", "sq copy s", "sq extract s", "sq read s"], rows),
           "", "squeezefs / btrfs (times: lower is better; ratios: higher is better):", "",
           table(["spec", "copy time", "extract time", "read time", "tar ratio", "tree all-in ratio", "verified"], ratios)]
    return out, bad


def part_c(recs):
    ok, bad = index(recs, "c")
    out = ["### (c) urandom / zero, compress", ""]
    for data in ("urandom", "zero"):
        specs = sorted({k[0] for k in ok if k[2] == data}, key=spec_key)
        rows = []
        for fs in ("btrfs", "squeezefs"):
            base = ok.get(("none", fs, data))
            base_cpu = None
            if base:
                base_cpu = sum(num(base.get(k)) or 0 for k in ("writer_cpu", "kthreads_cpu", "daemon_cpu"))
            for s in specs:
                r = ok.get((s, fs, data))
                if not r:
                    continue
                cpu = sum(num(r.get(k)) or 0 for k in ("writer_cpu", "kthreads_cpu", "daemon_cpu"))
                added = None if base_cpu is None else cpu - base_cpu
                pct = div(added, base_cpu)
                rows.append([fs, s, fmt(r["write_s"], 1), fmt(mbps(r["logical"], r["write_s"]), 0),
                             fmt(r.get("writer_cpu"), 1), fmt(r.get("kthreads_cpu"), 1),
                             fmt(r.get("daemon_cpu"), 1) if fs == "squeezefs" else "—",
                             fmt(cpu, 1), fmt(added, 1), "—" if pct is None else f"{pct * 100:+.0f}%",
                             "all holes" if r.get("disk") == 0 else fmt(div(r["logical"], r.get("disk"))),
                             str(r.get("verified"))])
        out += [f"{data}:", "",
                table(["fs", "spec", "wall s", "MB/s", "writer CPU s", "kthreads CPU s", "daemon CPU s",
                       "total CPU s", "CPU added over none s", "added %", "ratio", "verified"], rows), ""]
    return out, bad


def summary(recs):
    a, _ = index(recs, "a")
    b, _ = index(recs, "b")
    c, _ = index(recs, "c")
    specs = sorted({k[0] for k in list(a) + list(b) + list(c)}, key=spec_key)
    rows = []
    for s in specs:
        row = [s]
        ab, aq = a.get((s, "btrfs")), a.get((s, "squeezefs"))
        if ab and aq:
            row += [fmt(div(div(aq["logical"], aq["write_s"]), div(ab["logical"], ab["write_s"]))),
                    fmt(div(div(aq["logical"], aq["read_s"]), div(ab["logical"], ab["read_s"]))),
                    fmt(div(div(aq["logical"], aq.get("disk")), div(ab["logical"], ab.get("disk"))))]
        else:
            row += ["—"] * 3
        bb, bq = b.get((s, "btrfs")), b.get((s, "squeezefs"))
        row += [fmt(div(bq["extract_s"], bb["extract_s"])), fmt(div(bq["read_s"], bb["read_s"]))] if bb and bq else ["—"] * 2
        for data in ("urandom", "zero"):
            cb, cq = c.get((s, "btrfs", data)), c.get((s, "squeezefs", data))
            row.append(fmt(div(cq["write_s"], cb["write_s"])) if cb and cq else "—")
        rows.append(row)
    return ["### squeezefs / btrfs", "",
            "Throughput and compression ratio: higher is better for squeezefs (targets: write ≥ 1.0, "
            "read ≥ 0.8, ratio ≥ 1.04 at the same zstd level); times: lower is better (target: "
            "extract ≤ 1.5).", "",
            table(["spec", "(a) write MB/s", "(a) cold read MB/s", "(a) ratio", "(b) extract time",
                   "(b) read time", "(c) urandom time", "(c) zero time"], rows)]


def main(argv):
    if len(argv) != 2:
        print(__doc__, file=sys.stderr)
        return 2
    recs = load(argv[1])
    out = []
    out += summary(recs) + [""]
    transports = sorted({r["transport"] for r in recs if r.get("fs") == "squeezefs" and r.get("transport")})
    if transports:
        out += ["squeezefs request transport: " + "; ".join(transports), ""]
    bad_all = []
    for fn in (part_a, part_b, part_c):
        o, bad = fn(recs)
        if any(r.get("part") == fn.__name__[-1] for r in recs):
            out += o + [""]
        bad_all += bad
    if bad_all:
        out.append("Not measured:")
        for r in bad_all:
            why = f"failed in step '{r['failed']}' (status {r.get('status')})" if "failed" in r else f"skipped ({r['skipped']})"
            out.append(f"* ({r['part']}) {r['fs']} {r['spec']}: {why}")
    print("\n".join(out))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
