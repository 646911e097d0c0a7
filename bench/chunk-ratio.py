#!/usr/bin/env python3
"""What the record size alone can give: files cut into chunks of each size, every chunk
compressed on its own by libzstd (python-zstandard) at each level, sizes summed (a chunk
that does not shrink counts as stored raw), against a reference chunk size and level.

    python3 bench/chunk-ratio.py [--ref 4M:1] [--chunks 128K,1M,4M,whole] [--levels 1,3,9,19] FILE...

--ref CHUNK:LEVEL is the comparison's denominator (default 4M:1, JuiceFS's 4 MiB blocks at
zstd level 1). Prints bytes and the ratio to the reference per chunk size and level, and
xz -9e of whole files as a bound from another codec family. Needs `pip install zstandard`.
"""
import argparse
import lzma
import sys

try:
    import zstandard
except ImportError:
    sys.exit("chunk-ratio: needs python-zstandard (pip install zstandard)")


def size_arg(s):
    if s == "whole":
        return None
    units = {"K": 1 << 10, "M": 1 << 20}
    try:
        return int(s[:-1]) * units[s[-1].upper()] if s[-1].upper() in units else int(s)
    except (ValueError, IndexError):
        sys.exit(f"chunk-ratio: {s!r} is not a chunk size (accepted: 128K, 1M, 4194304, whole)")


def stored(files, chunk, level):
    c = zstandard.ZstdCompressor(level=level)
    total = 0
    for data in files:
        step = chunk or max(len(data), 1)
        for i in range(0, len(data), step):
            part = data[i : i + step]
            total += min(len(c.compress(part)), len(part))
    return total


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--ref", default="4M:1")
    ap.add_argument("--chunks", default="128K,1M,4M,whole")
    ap.add_argument("--levels", default="1,3,9,19")
    ap.add_argument("files", nargs="+")
    a = ap.parse_args()
    files = [open(f, "rb").read() for f in a.files]
    rc, rl = a.ref.split(":")
    ref = stored(files, size_arg(rc), int(rl))
    raw = sum(len(f) for f in files)
    print(f"{raw} bytes in {len(files)} files; reference {a.ref}: {ref} bytes (ratio {raw / ref:.3f})")
    print("| chunk | level | bytes | ÷ reference |")
    print("|---|---|---|---|")
    for ch in a.chunks.split(","):
        for lv in a.levels.split(","):
            s = stored(files, size_arg(ch), int(lv))
            print(f"| {ch} | zstd:{lv} | {s} | {s / ref:.3f} |")
    x = sum(len(lzma.compress(f, preset=9 | lzma.PRESET_EXTREME)) for f in files)
    print(f"| whole | xz -9e | {x} | {x / ref:.3f} |")


if __name__ == "__main__":
    main()
