#!/usr/bin/env python3
"""Writers for bench/qos-eval.sh: N threads per directory write 1 MiB chunks of a data file
(cyclically, each writer from its own offset) into their own file, for a fixed time, and
report the bytes each directory took per second.

usage: qos-writer.py DATA SECONDS DIR:WRITERS [DIR:WRITERS ...]

Prints one JSON object: {"seconds": S, "trees": {DIR: {"writers": N, "bytes": B,
"per_second": [b0, b1, ...]}}}. A write counts in the second it completed in; the run ends
for every writer at the same deadline (a write under way then still completes and counts:
`seconds` is measured until the last writer stopped).
"""
import json
import os
import sys
import threading
import time

CHUNK = 1 << 20


def main():
    if len(sys.argv) < 4:
        sys.exit(__doc__)
    data_path, seconds = sys.argv[1], float(sys.argv[2])
    with open(data_path, "rb") as f:
        data = f.read()
    if len(data) < 2 * CHUNK:
        sys.exit(f"qos-writer: {data_path} is smaller than 2 MiB")
    data = memoryview(data + data[:CHUNK])  # a chunk may wrap around the end
    specs = []
    for arg in sys.argv[3:]:
        d, _, n = arg.rpartition(":")
        if not d or not n.isdigit() or int(n) < 1:
            sys.exit(f"qos-writer: '{arg}' is not DIR:WRITERS")
        specs.append((d, int(n)))
    bins = {d: [0] * (int(seconds) + 2) for d, _ in specs}
    totals = {d: 0 for d, _ in specs}
    lock = threading.Lock()
    clock = {}

    def go():
        clock["start"] = time.monotonic()
        clock["deadline"] = clock["start"] + seconds

    # the run starts when every writer has its file open
    barrier = threading.Barrier(sum(n for _, n in specs), action=go)

    def writer(d, k, offset):
        path = os.path.join(d, f"w{k}")
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
        barrier.wait()
        start, deadline = clock["start"], clock["deadline"]
        pos = offset
        try:
            while time.monotonic() < deadline:
                n = os.write(fd, data[pos:pos + CHUNK])
                t = time.monotonic() - start
                pos = (pos + n) % (len(data) - CHUNK)
                with lock:
                    b = bins[d]
                    i = min(int(t), len(b) - 1)
                    b[i] += n
                    totals[d] += n
        finally:
            os.close(fd)

    threads = []
    total_writers = sum(n for _, n in specs)
    w = 0
    for d, n in specs:
        for k in range(n):
            off = (w * (len(data) - CHUNK) // total_writers) // 4096 * 4096
            threads.append(threading.Thread(target=writer, args=(d, k, off)))
            w += 1
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    took = time.monotonic() - clock["start"]
    out = {
        "seconds": took,
        "trees": {d: {"writers": n, "bytes": totals[d], "per_second": bins[d]} for d, n in specs},
    }
    json.dump(out, sys.stdout)
    print()


if __name__ == "__main__":
    main()
