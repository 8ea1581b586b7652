#!/usr/bin/env python3
"""Skewed reads over a pool that holds half the objects: what promotion
on hit buys.

One client process holds a 16 MiB segment and an SSD tier (the real
``gostore-master`` binary, real files) and writes 128 objects of 256 KiB:
twice the pool, so the master's eviction leaves about half of them on disk
only. It then reads them in a Zipf(s) order (rank r read with probability
~ 1/r^s; ranks are shuffled over the keys, so the hot keys are not the
last written). The same reads run in each scenario:

* ``promotion off``: the master's default; a disk-only object is read
  from disk every time.
* ``promotion on``: ``--promotion_on_hit`` (threshold 2, one per
  heartbeat): a disk-only object read twice is loaded back into memory,
  and eviction takes the colder ones.
* ``limit: all in memory``: a 64 MiB segment, no tier: every read from
  memory, the best the tiers can do.

For each: reads/s and MB/s over the loop, the share of reads the master
served from a disk copy (its ``file_cache_hit_nums_`` against
``mem_cache_hit_nums_``), over the whole loop and over its last quarter
(where promotion has caught up), and the promotions completed. The reader
is the holder here, so a disk read is a load from its own tier (no
staging transfer): the gap to memory is the disk's and the tier's, not
the network's. ``--json PATH`` writes everything; the script never fails
on a number.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import re
import subprocess
import sys
import tempfile
import time
import urllib.request
from typing import Any, Dict, List

KiB, MiB = 1 << 10, 1 << 20
POOL = 16 * MiB
SPARE = 8 * MiB
OBJ = 256 * KiB
N = 128


def start_master(*flags: str) -> subprocess.Popen:
    from gostore import master_binary_path

    proc = subprocess.Popen([master_binary_path(), "--rpc_address=127.0.0.1", "--rpc_port=0",
                             "--metrics_port=0", "--log_level=error", "--tick_interval_ms=20",
                             "--eviction_high_watermark_ratio=0.8", "--eviction_ratio=0.2", *flags],
                            stdout=subprocess.PIPE, text=True)
    fields = dict(f.split("=", 1) for f in proc.stdout.readline().split() if "=" in f)
    proc.addr, proc.http = fields["rpc"], fields["http"]  # type: ignore[attr-defined]
    return proc


def metrics(master) -> Dict[str, float]:
    with urllib.request.urlopen(f"http://{master.http}/metrics", timeout=5) as r:
        body = r.read().decode()
    return {m.group(1): float(m.group(2)) for m in re.finditer(r"^([a-z_]+) (\S+)$", body, re.M)}


def zipf_order(reads: int, s: float, seed: int) -> List[int]:
    rng = random.Random(seed)
    keys = list(range(N))
    rng.shuffle(keys)  # rank -> key
    weights = [1.0 / (r + 1) ** s for r in range(N)]
    return [keys[r] for r in rng.choices(range(N), weights=weights, k=reads)]


def scenario(name: str, order: List[int], tier: bool, promote: bool, spare: bool = False,
             hot: bool = False) -> Dict[str, Any]:
    from gostore import MooncakeDistributedStore

    flags = ["--enable_offload"] if tier else []
    if promote:
        flags += ["--promotion_on_hit", "--promotion_admission_threshold=2", "--promotion_max_per_heartbeat=1"]
    if hot:
        flags += ["--dynamic_replication_mode=enforce"]
    master = start_master(*flags)
    other = MooncakeDistributedStore() if spare else None
    directory = tempfile.mkdtemp(prefix="gostore-zipf-")
    os.environ.update({"MOONCAKE_OFFLOAD_LOCAL_BUFFER_SIZE_BYTES": str(16 * MiB),
                       "MOONCAKE_OFFLOAD_HEARTBEAT_INTERVAL_SECONDS": "0.2",
                       "MOONCAKE_OFFLOAD_USE_URING": "false"})
    store = MooncakeDistributedStore()
    kwargs: Dict[str, Any] = {"ssd_offload_path": directory} if tier else {}
    try:
        segment = POOL if tier else 4 * POOL
        rc = store.setup("127.0.0.1", "P2PHANDSHAKE", segment, 16 * MiB, "tcp", "", master.addr, **kwargs)
        if rc != 0:
            return {"name": name, "error": f"setup returned {rc}"}
        values = [bytes([i]) * OBJ for i in range(N)]
        for i, v in enumerate(values):
            deadline = time.monotonic() + 30
            while (rc := store.put(f"z/{i}", v)) != 0 and time.monotonic() < deadline:
                time.sleep(0.01)
            if rc != 0:
                return {"name": name, "error": f"put z/{i}: {rc}"}
        if tier:  # let the tier persist everything and eviction settle
            deadline = time.monotonic() + 30
            while metrics(master).get("file_cache_nums_", 0) < N and time.monotonic() < deadline:
                time.sleep(0.05)
        if other is not None:
            # A second client lends SPARE bytes once the objects are in:
            # only hot replicas (and the pool's usage) see them.
            if other.setup("127.0.0.1", "P2PHANDSHAKE", SPARE, 16 * MiB, "tcp", "", master.addr) != 0:
                return {"name": name, "error": "setup of the spare segment failed"}
        before = metrics(master)
        quarter = len(order) * 3 // 4
        at_quarter: Dict[str, float] = {}
        wrong = 0
        t0 = time.perf_counter()
        for j, i in enumerate(order):
            if j == quarter:
                paused = time.perf_counter()
                at_quarter = metrics(master)
                t0 += time.perf_counter() - paused
            if store.get(f"z/{i}") != values[i]:
                wrong += 1
        wall = time.perf_counter() - t0
        after = metrics(master)

        def disk_share(a: Dict[str, float], b: Dict[str, float]) -> float:
            disk = b.get("file_cache_hit_nums_", 0) - a.get("file_cache_hit_nums_", 0)
            mem = b.get("mem_cache_hit_nums_", 0) - a.get("mem_cache_hit_nums_", 0)
            return disk / (disk + mem) if disk + mem else float("nan")

        return {
            "name": name, "reads": len(order), "wrong": wrong,
            "reads_per_s": len(order) / wall, "mb_per_s": len(order) * OBJ / MiB / wall,
            "disk_share": disk_share(before, after), "disk_share_last_quarter": disk_share(at_quarter, after),
            "promoted": after.get("master_promotion_completed_total", 0),
            "hot_replicas_added": after.get("gostore_master_hot_replica_added_total", 0),
            "hot_replicas_dropped": after.get("gostore_master_hot_replica_dropped_total", 0),
            "objects_in_memory_before": before.get("mem_cache_nums_", 0),
            "objects_in_memory_after": after.get("mem_cache_nums_", 0),
        }
    finally:
        store.close()
        if other is not None:
            other.close()
        master.kill()
        master.wait()
        subprocess.run(["rm", "-rf", directory])


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--json", metavar="PATH")
    ap.add_argument("--reads", type=int, default=4000)
    ap.add_argument("--s", type=float, default=1.1, help="the Zipf exponent")
    args = ap.parse_args()
    os.environ.setdefault("GOSTORE_LOG_LEVEL", "error")
    order = zipf_order(args.reads, args.s, seed=7)
    rows = [
        scenario("promotion off", order, tier=True, promote=False),
        scenario("promotion on", order, tier=True, promote=True),
        scenario("limit: all in memory", order, tier=False, promote=False),
        scenario("spare, hot off", order, tier=True, promote=True, spare=True),
        scenario("spare, hot enforce", order, tier=True, promote=True, spare=True, hot=True),
    ]
    print(f"zipf reads: {N} objects of {OBJ // KiB} KiB over a {POOL // MiB} MiB pool, "
          f"{args.reads} reads, s={args.s}")
    print(f"{'scenario':<22} {'reads/s':>9} {'MB/s':>8} {'disk share':>11} {'last 1/4':>9} {'promoted':>9} "
          f"{'hot+':>5} {'hot-':>5} {'wrong':>6}")
    for r in rows:
        if "error" in r:
            print(f"{r['name']:<22} error: {r['error']}")
            continue
        print(f"{r['name']:<22} {r['reads_per_s']:>9.0f} {r['mb_per_s']:>8.0f} {r['disk_share']:>10.1%} "
              f"{r['disk_share_last_quarter']:>9.1%} {r['promoted']:>9.0f} {r['hot_replicas_added']:>5.0f} "
              f"{r['hot_replicas_dropped']:>5.0f} {r['wrong']:>6}")
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"objects": N, "object_bytes": OBJ, "pool_bytes": POOL, "reads": args.reads, "s": args.s,
                       "rows": rows, "time": time.time()}, f, indent=2)
    return 0


if __name__ == "__main__":
    sys.exit(main())
