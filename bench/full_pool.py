#!/usr/bin/env python3
"""Puts into a full pool: how long they wait for room, and what they cost.

Each scenario is a plain loop of ``N`` puts of 1 MiB (no retry of its own)
from this process into its own 32 MiB segment, against the real
``gostore-master`` binary:

* ``ssd``: the SSD tier is on (master ``--enable_offload``); room comes as
  the tier persists objects and the master evicts their memory copies.
* ``evict``: no tier; room comes from eviction passes (every object is
  evictable).
* ``ssd, no wait`` / ``evict, no wait``: the same with
  ``put_space_wait_ms=0``: the puts the wait saves.
* ``empty pool``: N puts into a pool that never fills (the pool is emptied
  before it would): the put path's own cost, no waiting.

For every scenario: puts stored and refused, MB/s over the loop, and the
per-put latency (p50, p99, max). Limits measured in the same run: the disk's
sequential O_DIRECT write bandwidth in the tier's directory (1 MiB writes, one
fdatasync at the end; what the tier cannot beat while every byte must reach
the disk), and the empty-pool rate (what no waiting costs). ``--json PATH``
writes everything; the script never fails on a number.
"""

from __future__ import annotations

import argparse
import json
import mmap
import os
import subprocess
import sys
import tempfile
import time
from typing import Any, Dict, List

MiB = 1 << 20
POOL = 32 * MiB


def pct(vals: List[float], q: float) -> float:
    s = sorted(vals)
    return s[min(len(s) - 1, int(q * len(s)))] if s else float("nan")


def start_master(*flags: str) -> subprocess.Popen:
    from gostore import master_binary_path

    proc = subprocess.Popen([master_binary_path(), "--rpc_address=127.0.0.1", "--rpc_port=0",
                             "--metrics_port=-1", "--log_level=error", *flags],
                            stdout=subprocess.PIPE, text=True)
    line = proc.stdout.readline()
    proc.addr = dict(f.split("=", 1) for f in line.split() if "=" in f)["rpc"]  # type: ignore[attr-defined]
    return proc


def disk_write_limit(directory: str, total: int = 128 * MiB) -> float:
    """MB/s of sequential 1 MiB O_DIRECT writes and one fdatasync."""
    buf = mmap.mmap(-1, MiB)  # page-aligned, as O_DIRECT wants
    buf.write(os.urandom(MiB))
    path = os.path.join(directory, "limit.bin")
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | getattr(os, "O_DIRECT", 0), 0o644)
    try:
        t0 = time.perf_counter()
        for _ in range(total // MiB):
            os.write(fd, buf)
        os.fdatasync(fd)
        return total / MiB / (time.perf_counter() - t0)
    finally:
        os.close(fd)
        os.unlink(path)


def scenario(name: str, n: int, tier: bool, wait_ms: int, empty: bool) -> Dict[str, Any]:
    from gostore import MooncakeDistributedStore

    master = start_master(*(["--enable_offload"] if tier else []))
    directory = tempfile.mkdtemp(prefix="gostore-fullpool-")
    os.environ["MOONCAKE_OFFLOAD_LOCAL_BUFFER_SIZE_BYTES"] = str(16 * MiB)
    store = MooncakeDistributedStore()
    kwargs: Dict[str, Any] = {"put_space_wait_ms": wait_ms}
    if tier:
        kwargs["ssd_offload_path"] = directory
    try:
        rc = store.setup("127.0.0.1", "P2PHANDSHAKE", POOL, 16 * MiB, "tcp", "", master.addr, **kwargs)
        if rc != 0:
            return {"name": name, "error": f"setup returned {rc}"}
        value = os.urandom(MiB)
        lat: List[float] = []
        codes: Dict[int, int] = {}
        t0 = time.perf_counter()
        for i in range(n):
            if empty and i and i % 16 == 0:
                paused = time.perf_counter()
                store.remove_all(True)  # untimed: keeps the pool from filling
                t0 += time.perf_counter() - paused
            t = time.perf_counter()
            rc = store.put(f"{name}/{i}", value)
            lat.append(time.perf_counter() - t)
            codes[rc] = codes.get(rc, 0) + 1
        wall = time.perf_counter() - t0
        stored = codes.get(0, 0)
        return {
            "name": name, "puts": n, "stored": stored, "refused": n - stored,
            "codes": {str(k): v for k, v in codes.items()},
            "mb_per_s": stored * MiB / MiB / wall,
            "p50_ms": pct(lat, 0.50) * 1e3, "p99_ms": pct(lat, 0.99) * 1e3, "max_ms": max(lat) * 1e3,
        }
    finally:
        store.close()
        master.kill()
        master.wait()
        subprocess.run(["rm", "-rf", directory])


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--json", metavar="PATH")
    ap.add_argument("--puts", type=int, default=128)
    args = ap.parse_args()
    os.environ.setdefault("GOSTORE_LOG_LEVEL", "error")
    with tempfile.TemporaryDirectory(prefix="gostore-disk-") as d:
        disk = disk_write_limit(d)
    rows = [
        scenario("empty pool", args.puts, tier=False, wait_ms=5000, empty=True),
        scenario("ssd", args.puts, tier=True, wait_ms=5000, empty=False),
        scenario("ssd, no wait", args.puts, tier=True, wait_ms=0, empty=False),
        scenario("evict", args.puts, tier=False, wait_ms=5000, empty=False),
        scenario("evict, no wait", args.puts, tier=False, wait_ms=0, empty=False),
    ]
    empty_rate = rows[0].get("mb_per_s", float("nan"))
    print(f"\nfull pool: {args.puts} plain puts of 1 MiB into a {POOL // MiB} MiB pool")
    print(f"limits: disk O_DIRECT write {disk:,.0f} MB/s; empty-pool put rate {empty_rate:,.0f} MB/s\n")
    print(f"{'scenario':<16}{'stored':>8}{'refused':>9}{'MB/s':>9}{'vs limit':>10}{'p50 ms':>9}{'p99 ms':>9}{'max ms':>9}")
    for r in rows:
        if "error" in r:
            print(f"{r['name']:<16} {r['error']}")
            continue
        limit = disk if r["name"].startswith("ssd") else empty_rate
        r["limit_mb_per_s"] = limit
        r["limit"] = "disk O_DIRECT write" if r["name"].startswith("ssd") else "empty-pool put rate"
        # A loop that lost puts stored less than asked: no rate to compare.
        ratio = f"{r['mb_per_s'] / limit:>10.2f}" if r["refused"] == 0 else f"{'-':>10}"
        print(f"{r['name']:<16}{r['stored']:>8}{r['refused']:>9}{r['mb_per_s']:>9,.0f}"
              f"{ratio}{r['p50_ms']:>9.2f}{r['p99_ms']:>9.2f}{r['max_ms']:>9.1f}")
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"limits": {"disk_odirect_write_mb_per_s": disk, "empty_pool_put_mb_per_s": empty_rate},
                       "rows": rows, "pool_bytes": POOL, "value_bytes": MiB}, f, indent=2)
    return 0


if __name__ == "__main__":
    sys.exit(main())
