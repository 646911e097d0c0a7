#!/usr/bin/env python3
"""Tabulate squeezefs bench against zstd -b / lz4 -b (helper of bench/codec-vs-cli.sh).

usage: compare.py RESULTS_DIR
RESULTS_DIR holds, per codec C (zstd:1, zstd:3, lz4) and round R:
  cli.C.R.txt   the CLI's benchmark output
  ours.C.R.json `squeezefs bench --json` for that codec alone
plus threads1.json / threads2.json (all codecs) and levels.json (zstd:1..15).
Best of the rounds counts for both sides (the machine is shared).
"""
import glob
import json
import os
import re
import sys

CLI_RE = re.compile(r"(\d+) ->\s*(\d+) \(x?([\d.]+)\),\s*([\d.]+) MB/s\s*,\s*([\d.]+) MB/s")
# btrfs' memory per zstd level 1..15 (KiB), from the seed commit table
BTRFS_KIB = [780, 1004, 1260, 1260, 1388, 1516, 1516, 1772, 1772, 1772, 1772, 1772, 2284, 2547, 2547]


def cli_result(path):
    text = open(path, errors="replace").read().replace("\r", "\n")
    hits = CLI_RE.findall(text)
    if not hits:
        sys.exit(f"cannot parse CLI output {path}")
    src, dst, ratio, comp, decomp = hits[-1]
    return {"ratio": int(src) / int(dst), "compress": float(comp), "decompress": float(decomp)}


def ours_result(path, codec):
    rows = [r for r in json.load(open(path))["rows"] if r["codec"] == codec]
    r = rows[0]
    return {"ratio": r["ratio"], "compress": r["compress_mb_s"], "decompress": r["decompress_mb_s"],
            "workspace_kib": r["workspace_kib"]}


def best(results):
    return {
        "ratio": results[0]["ratio"],
        "compress": max(r["compress"] for r in results),
        "decompress": max(r["decompress"] for r in results),
        "workspace_kib": results[0].get("workspace_kib"),
    }


def main():
    d = sys.argv[1]
    codecs = ["zstd:1", "zstd:3", "lz4"]
    ok = True
    print("codec    | ratio ours | ratio CLI | diff   | comp ours | comp CLI | ours/CLI | decomp ours | decomp CLI")
    print("---------|-----------:|----------:|-------:|----------:|---------:|---------:|------------:|-----------:")
    for c in codecs:
        cli = best([cli_result(p) for p in sorted(glob.glob(os.path.join(d, f"cli.{c}.*.txt")))])
        ours = best([ours_result(p, c) for p in sorted(glob.glob(os.path.join(d, f"ours.{c}.*.json")))])
        diff = (ours["ratio"] / cli["ratio"] - 1) * 100
        speed = ours["compress"] / cli["compress"]
        verdict = abs(diff) <= 0.5 and speed >= 0.95
        ok &= verdict
        print(f"{c:<8} | {ours['ratio']:10.4f} | {cli['ratio']:9.4f} | {diff:+5.2f}% | {ours['compress']:9.1f} | "
              f"{cli['compress']:8.1f} | {speed:7.3f}{'' if verdict else '!'} | {ours['decompress']:11.1f} | {cli['decompress']:10.1f}")
    t1 = {r["codec"]: r for r in json.load(open(os.path.join(d, "threads1.json")))["rows"]}
    t2 = {r["codec"]: r for r in json.load(open(os.path.join(d, "threads2.json")))["rows"]}
    print()
    print("codec    | comp MB/s 1 thread | comp MB/s 2 threads | scaling | decomp scaling")
    print("---------|-------------------:|--------------------:|--------:|---------------:")
    for c in t1:
        s = t2[c]["compress_mb_s"] / t1[c]["compress_mb_s"]
        ds = t2[c]["decompress_mb_s"] / t1[c]["decompress_mb_s"]
        print(f"{c:<8} | {t1[c]['compress_mb_s']:18.1f} | {t2[c]['compress_mb_s']:19.1f} | {s:6.2f}x | {ds:13.2f}x")
    print()
    levels = json.load(open(os.path.join(d, "levels.json")))["rows"]
    print("zstd level | ratio | comp MB/s | workspace KiB | btrfs KiB")
    print("-----------|------:|----------:|--------------:|----------:")
    for r, kib in zip(levels, BTRFS_KIB):
        within = r["workspace_kib"] <= kib
        ok &= within
        print(f"{r['codec']:<10} | {r['ratio']:.3f} | {r['compress_mb_s']:9.1f} | {r['workspace_kib']:13} | {kib:9}{'' if within else ' !'}")
    print()
    print("all criteria met" if ok else "SOME CRITERIA NOT MET (marked !)")


if __name__ == "__main__":
    main()
