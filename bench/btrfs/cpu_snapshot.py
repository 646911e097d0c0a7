#!/usr/bin/env python3
"""CPU-time snapshots for the benchmark, so that work done outside the writer is counted.

kernel btrfs compresses in kernel worker threads (btrfs-delalloc work items run by kworkers),
the loop device writes from its own worker, and squeezefs compresses in its daemon: the
writer's own user+sys time misses all of that. A snapshot records

* kthreads -- utime+stime of every kernel thread (PF_KTHREAD set in /proc/PID/stat flags),
              keyed by pid, so a later delta counts threads that existed at both times in full
              and new ones from zero (threads that exit in between are lost -- kworkers are
              long-lived, so this is small);
* system   -- busy time of the whole machine from /proc/stat (user+nice+system+irq+softirq+
              steal); noisy on a shared machine, reported for context only;
* pid      -- optionally utime+stime of one process (all its threads), e.g. the squeezefs
              daemon, and per-thread times by thread name.

usage: cpu_snapshot.py snap FILE [PID]     write a snapshot
       cpu_snapshot.py delta BEFORE AFTER  print JSON {kthreads_s, system_s, pid_s, threads}
       cpu_snapshot.py pid PID             print utime+stime seconds of PID (all threads)
       cpu_snapshot.py threads PID         print JSON {thread name: seconds} of PID
"""
import json
import os
import sys

TICK = os.sysconf("SC_CLK_TCK")
PF_KTHREAD = 0x00200000


def _stat_fields(path):
    with open(path) as f:
        s = f.read()
    # comm may contain spaces and parentheses: split after the last ')'
    rp = s.rindex(")")
    comm = s[s.index("(") + 1:rp]
    rest = s[rp + 2:].split()
    # rest[0] is field 3 (state); flags is field 9 -> rest[6]; utime 14 -> rest[11]; stime 15 -> rest[12]
    return comm, int(rest[6]), int(rest[11]) + int(rest[12])


def kthreads():
    out = {}
    for d in os.listdir("/proc"):
        if not d.isdigit():
            continue
        try:
            _comm, flags, ticks = _stat_fields(f"/proc/{d}/stat")
        except (OSError, ValueError, IndexError):
            continue
        if flags & PF_KTHREAD:
            out[d] = ticks
    return out


def system_busy():
    with open("/proc/stat") as f:
        parts = f.readline().split()[1:]
    v = [int(x) for x in parts]
    # user nice system idle iowait irq softirq steal guest guest_nice
    return v[0] + v[1] + v[2] + v[5] + v[6] + (v[7] if len(v) > 7 else 0)


def pid_ticks(pid):
    try:
        return _stat_fields(f"/proc/{pid}/stat")[2]
    except (OSError, ValueError, IndexError):
        return None


def threads(pid):
    out = {}
    try:
        tids = os.listdir(f"/proc/{pid}/task")
    except OSError:
        return out
    for t in tids:
        try:
            comm, _f, ticks = _stat_fields(f"/proc/{pid}/task/{t}/stat")
        except (OSError, ValueError, IndexError):
            continue
        # group numbered workers ("compress-3" -> "compress-*") so the split stays readable
        base = comm.rstrip("0123456789").rstrip("-_:/") or comm
        key = base + "*" if base != comm else comm
        out[key] = out.get(key, 0) + ticks / TICK
    return out


def main(argv):
    if len(argv) >= 3 and argv[1] == "snap":
        snap = {"kthreads": kthreads(), "system": system_busy()}
        if len(argv) > 3:
            snap["pid"] = pid_ticks(argv[3])
        with open(argv[2], "w") as f:
            json.dump(snap, f)
        return 0
    if len(argv) == 4 and argv[1] == "delta":
        with open(argv[2]) as f:
            a = json.load(f)
        with open(argv[3]) as f:
            b = json.load(f)
        k = sum(t - a["kthreads"].get(p, 0) for p, t in b["kthreads"].items())
        out = {"kthreads_s": k / TICK, "system_s": (b["system"] - a["system"]) / TICK}
        if a.get("pid") is not None and b.get("pid") is not None:
            out["pid_s"] = (b["pid"] - a["pid"]) / TICK
        print(json.dumps(out))
        return 0
    if len(argv) == 3 and argv[1] == "pid":
        t = pid_ticks(argv[2])
        print("" if t is None else f"{t / TICK:.2f}")
        return 0
    if len(argv) == 3 and argv[1] == "threads":
        print(json.dumps({k: round(v, 2) for k, v in sorted(threads(argv[2]).items())}))
        return 0
    print(__doc__, file=sys.stderr)
    return 2


if __name__ == "__main__":
    sys.exit(main(sys.argv))
