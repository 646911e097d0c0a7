#!/usr/bin/env python3
"""compsize-like space accounting for a btrfs filesystem, from `btrfs inspect-internal dump-tree`.

`compsize` is not packaged in Debian bookworm, so this does what compsize does, offline: walk
the EXTENT_DATA items of the filesystem tree and sum, per compression type,

* disk         -- on-disk bytes of each *distinct* data extent (disk_num_bytes, counted once
                  per disk bytenr even when several file ranges reference it), plus the stored
                  size of inline extents (they live in metadata leaves);
* uncompressed -- ram_bytes of each distinct extent (what it decompresses to);
* referenced   -- num_bytes of every file range pointing at an extent (what files see).

Holes (disk bytenr 0) and prealloc extents that were never written count nowhere.
Metadata (trees, DUP copies) is *not* included -- as in compsize; the caller reports the
all-in figure (`btrfs filesystem usage` Used) separately.

Run it on an unmounted (or synced and quiescent) device after `blockdev --flushbufs`, so the
block device page cache does not serve stale blocks.

usage: btrfs_extents.py DEVICE          -> JSON on stdout
       btrfs_extents.py --parse FILE    -> parse a saved dump-tree text (for testing)
"""
import json
import re
import subprocess
import sys

RE_ITEM = re.compile(r"^\s*item \d+ key \((\d+) (\S+) (\d+)\)")
RE_TYPE = re.compile(r"^\s*generation \d+ type (\d+) \((\w+)\)")
RE_DISK = re.compile(r"^\s*extent data disk byte (\d+) nr (\d+)")
RE_OFFS = re.compile(r"^\s*extent data offset (\d+) nr (\d+) ram (\d+)")
RE_COMP = re.compile(r"^\s*extent compression (\d+) \((\w+)\)")
RE_INLINE = re.compile(r"^\s*inline extent data size (\d+) ram_bytes (\d+) compression (\d+) \((\w+)\)")


def parse(lines):
    """Return {"by_compression": {name: {disk, uncompressed, referenced, extents}}, "total": {...}}."""
    seen_extents = set()
    rows = {}

    def row(name):
        return rows.setdefault(name, {"disk": 0, "uncompressed": 0, "referenced": 0, "extents": 0})

    in_extent_data = False
    ext_type = None
    disk_bytenr = disk_nr = None
    num_bytes = ram = None

    def flush_regular(comp_name):
        nonlocal disk_bytenr, disk_nr, num_bytes, ram
        if disk_bytenr is None or num_bytes is None:
            return
        if disk_bytenr != 0:  # 0 = hole (no-holes off) or sparse
            r = row(comp_name)
            r["referenced"] += num_bytes
            if disk_bytenr not in seen_extents:
                seen_extents.add(disk_bytenr)
                r["disk"] += disk_nr
                r["uncompressed"] += ram
                r["extents"] += 1
        disk_bytenr = disk_nr = num_bytes = ram = None

    for line in lines:
        m = RE_ITEM.match(line)
        if m:
            in_extent_data = m.group(2) == "EXTENT_DATA"
            ext_type = None
            disk_bytenr = disk_nr = num_bytes = ram = None
            continue
        if not in_extent_data:
            continue
        m = RE_TYPE.match(line)
        if m:
            ext_type = m.group(2)
            continue
        m = RE_INLINE.match(line)
        if m:
            size, ram_b, _c, cname = int(m.group(1)), int(m.group(2)), m.group(3), m.group(4)
            r = row(cname)
            r["disk"] += size
            r["uncompressed"] += ram_b
            r["referenced"] += ram_b
            r["extents"] += 1
            in_extent_data = False
            continue
        m = RE_DISK.match(line)
        if m:
            disk_bytenr, disk_nr = int(m.group(1)), int(m.group(2))
            continue
        m = RE_OFFS.match(line)
        if m:
            num_bytes, ram = int(m.group(2)), int(m.group(3))
            continue
        m = RE_COMP.match(line)
        if m:
            if ext_type == "prealloc":
                disk_bytenr = None  # unwritten preallocation: no data
            flush_regular(m.group(2))
            in_extent_data = False
            continue
    total = {"disk": 0, "uncompressed": 0, "referenced": 0, "extents": 0}
    for r in rows.values():
        for k in total:
            total[k] += r[k]
    return {"by_compression": rows, "total": total}


def main(argv):
    if len(argv) == 3 and argv[1] == "--parse":
        with open(argv[2]) as f:
            print(json.dumps(parse(f)))
        return 0
    if len(argv) != 2 or argv[1].startswith("-"):
        print(__doc__.strip().splitlines()[-2:], file=sys.stderr)
        return 2
    proc = subprocess.Popen(["btrfs", "inspect-internal", "dump-tree", "-t", "fs", argv[1]],
                            stdout=subprocess.PIPE, text=True)
    result = parse(proc.stdout)
    if proc.wait() != 0:
        print(f"btrfs_extents: dump-tree of {argv[1]} failed (exit {proc.returncode})", file=sys.stderr)
        return 1
    print(json.dumps(result))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
