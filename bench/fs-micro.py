#!/usr/bin/env python3
# Per-operation latency through the VFS: python3 bench/fs-micro.py DIR (run it on a squeezefs
# mount and on an ext4 directory in the same session; see docs/benchmarks-archive.md, Filesystem).
import os, sys, time
d = sys.argv[1]
os.makedirs(d, exist_ok=True)
def t(label, f, n=3000):
    t0 = time.perf_counter()
    for i in range(n): f(i)
    print(f"{label:10s} {1e6*(time.perf_counter()-t0)/n:7.1f} us/op")
t("create", lambda i: os.close(os.open(f"{d}/f{i}", os.O_CREAT|os.O_WRONLY, 0o644)))
t("write4k", lambda i: (lambda fd: (os.write(fd, b"x"*4096), os.close(fd)))(os.open(f"{d}/f{i}", os.O_WRONLY)))
t("chmod", lambda i: os.chmod(f"{d}/f{i}", 0o600))
t("utime", lambda i: os.utime(f"{d}/f{i}", (1, 2)))
t("lstat-miss", lambda i: os.path.lexists(f"{d}/nx{i}"))
t("unlink", lambda i: os.unlink(f"{d}/f{i}"))
