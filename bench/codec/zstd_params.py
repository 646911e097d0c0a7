#!/usr/bin/env python3
"""Ratio and speed of one zstd level with extra compression parameters, on 128 KiB blocks.

usage: zstd_params.py [--level N] [--block BYTES] FILE...

Compresses the files, concatenated, as independent blocks (one ZSTD_compress2 per block with
the block size pledged, as squeezefs and btrfs do per record) through the system libzstd
(ctypes, no build step), once per parameter set below, and prints the ratio (stored bytes
exact, as byte-packed pools store them, and rounded per block to 512 B and 4 KiB sectors) and
single-thread speed per CPU-second. It answers "how much ratio is left at this level and record size, and at
what cost" (docs/benchmarks-archive.md, the zstd:9 ratio sections). Needs libzstd.so.1 (Debian libzstd1).
"""
import argparse
import ctypes
import ctypes.util
import sys
import time

# ZSTD_cParameter values (zstd.h): stable ones, and ZSTD_c_experimentalParam13, which is
# ZSTD_c_useBlockSplitter in libzstd 1.5.4 (ZSTD_c_splitAfterSequences in 1.5.7; 1 = enable).
LEVEL, WINDOW_LOG, HASH_LOG, CHAIN_LOG, SEARCH_LOG, MIN_MATCH, TARGET_LENGTH, STRATEGY = 100, 101, 102, 103, 104, 105, 106, 107
BLOCK_SPLITTER = 1010

SETS = [
    ("(level only)", []),
    ("block splitter", [(BLOCK_SPLITTER, 1)]),
    ("hashLog 18", [(HASH_LOG, 18)]),
    ("searchLog 6, chainLog 17", [(SEARCH_LOG, 6), (CHAIN_LOG, 17)]),
    ("targetLength 32", [(TARGET_LENGTH, 32)]),
    ("splitter, hashLog 18, chainLog 17", [(BLOCK_SPLITTER, 1), (HASH_LOG, 18), (CHAIN_LOG, 17)]),
    ("splitter, hashLog 18, chainLog 17, searchLog 6", [(BLOCK_SPLITTER, 1), (HASH_LOG, 18), (CHAIN_LOG, 17), (SEARCH_LOG, 6)]),
]


def load():
    name = ctypes.util.find_library("zstd") or "libzstd.so.1"
    z = ctypes.CDLL(name)
    z.ZSTD_createCCtx.restype = ctypes.c_void_p
    z.ZSTD_freeCCtx.argtypes = [ctypes.c_void_p]
    z.ZSTD_CCtx_reset.argtypes = [ctypes.c_void_p, ctypes.c_int]
    z.ZSTD_CCtx_setParameter.argtypes = [ctypes.c_void_p, ctypes.c_int, ctypes.c_int]
    z.ZSTD_CCtx_setParameter.restype = ctypes.c_size_t
    z.ZSTD_CCtx_setPledgedSrcSize.argtypes = [ctypes.c_void_p, ctypes.c_ulonglong]
    z.ZSTD_CCtx_setPledgedSrcSize.restype = ctypes.c_size_t
    z.ZSTD_compress2.argtypes = [ctypes.c_void_p, ctypes.c_char_p, ctypes.c_size_t, ctypes.c_char_p, ctypes.c_size_t]
    z.ZSTD_compress2.restype = ctypes.c_size_t
    z.ZSTD_isError.argtypes = [ctypes.c_size_t]
    z.ZSTD_getErrorName.argtypes = [ctypes.c_size_t]
    z.ZSTD_getErrorName.restype = ctypes.c_char_p
    z.ZSTD_versionString.restype = ctypes.c_char_p
    return z


def check(z, code, what):
    if z.ZSTD_isError(code):
        sys.exit(f"zstd_params: {what}: {z.ZSTD_getErrorName(code).decode()}")
    return code


def run(z, data, block, level, params):
    cctx = z.ZSTD_createCCtx()
    out = ctypes.create_string_buffer(block + block // 128 + 1024)
    # stored bytes exactly (byte-packed pools), and rounded up per block to 512 B (pools made
    # before PACKED_BYTES) and to 4 KiB (btrfs' sectors)
    stored = [0, 0, 0]
    t0 = time.process_time()
    for i in range(0, len(data), block):
        src = data[i:i + block]
        check(z, z.ZSTD_CCtx_reset(cctx, 2), "reset")  # ZSTD_reset_session_and_parameters
        check(z, z.ZSTD_CCtx_setParameter(cctx, LEVEL, level), "level")
        for k, v in params:
            check(z, z.ZSTD_CCtx_setParameter(cctx, k, v), f"parameter {k}={v}")
        check(z, z.ZSTD_CCtx_setPledgedSrcSize(cctx, len(src)), "pledged size")
        n = min(check(z, z.ZSTD_compress2(cctx, out, len(out), src, len(src)), "compress"), len(src))
        for k, unit in enumerate((1, 512, 4096)):
            stored[k] += -(-n // unit) * unit
    secs = time.process_time() - t0
    z.ZSTD_freeCCtx(cctx)
    return [len(data) / s for s in stored], len(data) / 1e6 / secs


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--level", type=int, default=9)
    ap.add_argument("--block", type=int, default=131072)
    ap.add_argument("files", nargs="+")
    a = ap.parse_args()
    data = b"".join(open(f, "rb").read() for f in a.files)
    z = load()
    print(f"libzstd {z.ZSTD_versionString().decode()}, {len(data)} bytes, {a.block}-byte blocks, level {a.level}")
    print(f"| level {a.level} plus | ratio | 512 B sectors | 4 KiB sectors | MB/s (one thread, per CPU-second) |")
    print("|---|---|---|---|---|")
    for name, params in SETS:
        r, speed = run(z, data, a.block, a.level, params)
        print(f"| {name} | {r[0]:.4f} | {r[1]:.4f} | {r[2]:.4f} | {speed:.1f} |")
    for lv in (a.level + 1, a.level + 2, a.level + 4):
        r, speed = run(z, data, a.block, lv, [])
        print(f"| (level {lv} for comparison) | {r[0]:.4f} | {r[1]:.4f} | {r[2]:.4f} | {speed:.1f} |")


if __name__ == "__main__":
    main()
