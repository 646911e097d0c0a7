#!/usr/bin/env python3
"""The btrfs reference of bench/meta-copies-ab.sh: the same two measures as its
meta_copies_cost example, on a btrfs file system mounted at DIR.

    btrfs-meta-dup.py DIR COPIES FILES    (COPIES: 1 for `-m single`, 2 for `-m dup`)

fsync: FILES small files of source-like text (200 B to 8 KiB), each created, written and
fsynced on its own: mean and 99th percentile latency. commit: FILES more files written,
then one syncfs, in 10 batches: files per second. Prints one JSON object.
"""
import ctypes, json, os, statistics, sys, time

d, copies, files = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])


def text(i):
    n = 200 + (i * 7919) % 8000
    out, k = [], i
    while sum(map(len, out)) < n:
        k = (k * 6364136223846793005 + 1442695040888963407) % (1 << 64)
        out.append(f"\tstatic int x{(k >> 40) % 1000} = {(k >> 20) % 100000};\n")
    return "".join(out).encode()[:n]


def write(path, data, sync):
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
    os.write(fd, data)
    if sync:
        os.fsync(fd)
    os.close(fd)


lat = []
for i in range(files):
    data = text(i)
    t = time.perf_counter()
    write(os.path.join(d, f"f{i}"), data, True)
    lat.append(time.perf_counter() - t)
lat.sort()
dfd = os.open(d, os.O_RDONLY)
t = time.perf_counter()
for b in range(10):
    for i in range(files):
        write(os.path.join(d, f"b{b}-{i}"), text(i), False)
    if ctypes.CDLL(None, use_errno=True).syncfs(dfd) != 0:
        raise OSError(ctypes.get_errno(), "syncfs")
rate = 10 * files / (time.perf_counter() - t)
print(json.dumps({"copies": copies, "fsync_mean_ms": round(statistics.mean(lat) * 1000, 3),
                  "fsync_p99_ms": round(lat[int(len(lat) * 0.99)] * 1000, 3), "commit_files_per_s": round(rate)}))
