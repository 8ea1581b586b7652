#!/usr/bin/env python3
"""Plan API benchmark (``make bench``): the producer writes straight into the
owner's memory and commits, against ``put_from``, between two processes.

What runs: a master (``gostore-master``), an *owner* process (this script with
``--owner``) that joins as a NanoKVCache member with a 1 GiB heap, and this
process, the *producer*, which joins with a small heap of its own. For each
object size (256 KiB, 1 MiB, 16 MiB):

* plan path: ``open_for_write`` on the owner's rank, one ``numpy.copyto``
  from a warm source into ``writable(plan)`` (the owner's memory, mapped
  here), ``commit``; timed as a whole per object and in its three parts;
* ``put_from``: the regular zero-copy put of the same source buffer
  (registered) onto the owner's segment (``preferred_segment``);
* the limit: memcpy between two warm buffers of the object's size, measured
  in this process in the same run (numpy.copyto, and Go's copy through
  ``gs_bench_memcpy``).

Objects are removed (untimed) before the heap could fill. Every plan object's
bytes are checked by the owner at the end of each size (a sample). Prints a
table; ``--json PATH`` writes it. Never fails on a number.
"""

from __future__ import annotations

import argparse
import json
import multiprocessing as mp
import os
import sys
import time
from typing import Dict, List

os.environ.setdefault("GOSTORE_LOG_LEVEL", "warn")

import numpy as np  # noqa: E402

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from bench import kill, pct, start_master  # noqa: E402  (the main benchmark's helpers)

KiB, MiB = 1 << 10, 1 << 20
SIZES = [256 * KiB, 1 * MiB, 16 * MiB]
HEAP = 1 << 30


def owner_main(master: str, ready, stop, checks) -> None:
    from gostore import NanoKVCache

    cache = NanoKVCache(HEAP, master_server_addr=master)
    ready.put(cache.rank)
    while True:
        item = checks.get()
        if item is None:
            break
        key, size, seed = item
        got = cache.get(key)
        want = np.random.default_rng(seed).integers(0, 255, size, dtype=np.uint8).tobytes()
        ready.put(got == want)
    stop.wait()
    cache.close()


def quantile(xs: List[float], q: float) -> float:
    """The q-quantile (0..1) of xs, by bench.py's nearest rank."""
    return pct(sorted(xs), 100 * q)


def run(quick: bool) -> Dict:
    from gostore import NanoKVCache, ReplicateConfig, _native

    ctx = mp.get_context("spawn")
    master = start_master("shm")
    ready, stop, checks = ctx.Queue(), ctx.Event(), ctx.Queue()
    owner = ctx.Process(target=owner_main, args=(master.rpc_addr, ready, stop, checks))
    owner.start()
    owner_rank = ready.get(timeout=60)
    cache = NanoKVCache(64 * MiB, master_server_addr=master.rpc_addr)
    store = cache.store
    owner_seg = [m["segment"] for m in cache.members() if m["rank"] == owner_rank][0]
    cold = np.ones(HEAP // 2, np.uint8)  # touched: no page faults in the timing
    rows = []
    try:
        for size in SIZES:
            n = max(8, min(400, (256 * MiB) // size)) if not quick else 8
            src = np.random.default_rng(size).integers(0, 255, size, dtype=np.uint8)
            reg = np.empty(size, np.uint8)
            reg[:] = src
            store.register_buffer(reg.ctypes.data, size)
            # The limit: memcpy of warm buffers of this size, same process.
            dst = np.empty(size, np.uint8)
            np.copyto(dst, src)
            t0 = time.perf_counter()
            reps = max(3, n)
            for _ in range(reps):
                np.copyto(dst, src)
            memcpy = size * reps / (time.perf_counter() - t0) / 1e9
            go_memcpy = _native.bench_memcpy(size, max(3, min(reps, 200)))
            # ... and into a destination that moves through a heap-sized
            # buffer, as plan objects land all over the owner's heap.
            slots = len(cold) // size
            t0 = time.perf_counter()
            for i in range(reps):
                o = (i % slots) * size
                np.copyto(cold[o:o + size], src)
            cold_memcpy = size * reps / (time.perf_counter() - t0) / 1e9

            plan_t, open_t, write_t, commit_t, put_t = [], [], [], [], []
            seeds = []
            for i in range(n + 1):  # the first of each kind is a warm-up
                key = f"plan/{size}/{i}"
                a = time.perf_counter()
                plan = cache.open_for_write(key, size, preferred_segment=owner_rank)
                b = time.perf_counter()
                np.copyto(np.frombuffer(cache.writable(plan), np.uint8), src)
                c = time.perf_counter()
                cache.commit(key)
                d = time.perf_counter()
                if i:
                    open_t.append(b - a)
                    write_t.append(c - b)
                    commit_t.append(d - c)
                    plan_t.append(d - a)
                if i % 50 == 1:
                    seeds.append(key)
                if (i + 2) * size > HEAP // 2:
                    store.remove_by_regex(f"^plan/{size}/", force=True)
                cfg = ReplicateConfig(preferred_segment=owner_seg)
                a = time.perf_counter()
                rc = store.put_from(f"put/{size}/{i}", reg.ctypes.data, size, cfg)
                b = time.perf_counter()
                assert rc == 0, rc
                if i:
                    put_t.append(b - a)
                if (i + 2) * size > HEAP // 2:
                    store.remove_by_regex(f"^put/{size}/", force=True)
            # Verify a sample of plan objects in the owner (a fresh
            # rng-seeded source is what was written: seed = size).
            ok = True
            for key in seeds[-3:]:
                if cache.get(key) is None:
                    continue  # removed by the heap reset
                checks.put((key, size, size))
                ok = ok and ready.get(timeout=60)
            store.remove_by_regex(f"^(plan|put)/{size}/", force=True)
            store.unregister_buffer(reg.ctypes.data)
            med = quantile(plan_t, 0.5)
            row = {
                "size": size, "objects": n,
                "plan_gbps": size / med / 1e9, "plan_us": med * 1e6,
                "plan_p99_us": quantile(plan_t, 0.99) * 1e6,
                "open_us": quantile(open_t, 0.5) * 1e6, "write_us": quantile(write_t, 0.5) * 1e6,
                "commit_us": quantile(commit_t, 0.5) * 1e6, "commit_p99_us": quantile(commit_t, 0.99) * 1e6,
                "put_from_gbps": size / quantile(put_t, 0.5) / 1e9, "put_from_us": quantile(put_t, 0.5) * 1e6,
                "memcpy_gbps": memcpy, "go_memcpy_gbps": go_memcpy, "cold_memcpy_gbps": cold_memcpy,
                "plan_pct_of_memcpy": 100 * (size / med / 1e9) / memcpy,
                "write_only_gbps": size / quantile(write_t, 0.5) / 1e9,
                "write_pct_of_cold_memcpy": 100 * (size / quantile(write_t, 0.5) / 1e9) / cold_memcpy,
                "verified": ok,
            }
            rows.append(row)
    finally:
        checks.put(None)
        stop.set()
        owner.join(30)
        cache.close()
        kill(master)
    return {"rows": rows, "targets": "plan >= 80% of memcpy for 1 MiB+, commit <= 20 us",
            "nproc": os.cpu_count(), "when": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--json", metavar="PATH")
    ap.add_argument("--quick", action="store_true")
    args = ap.parse_args()
    doc = run(args.quick)
    print("plan API between two processes (producer writes into the owner's memory, commit) vs put_from")
    print("plan = open_for_write + the producer's write + commit; medians; memcpy measured here, warm "
          "(two fixed buffers) and cold (destination moving through 512 MiB)")
    print(f"{'object':>8} {'plan GB/s':>10} {'µs/obj':>8} {'open µs':>8} {'write GB/s':>11} {'commit µs':>10} "
          f"{'p99':>6} {'put_from GB/s':>14} {'µs/obj':>8} {'memcpy warm':>12} {'cold':>6} "
          f"{'plan/warm':>10} {'write/cold':>11}")
    for r in doc["rows"]:
        size = f"{r['size'] // KiB}KiB" if r["size"] < MiB else f"{r['size'] // MiB}MiB"
        print(f"{size:>8} {r['plan_gbps']:>10.2f} {r['plan_us']:>8.0f} {r['open_us']:>8.0f} "
              f"{r['write_only_gbps']:>11.2f} {r['commit_us']:>10.1f} {r['commit_p99_us']:>6.0f} "
              f"{r['put_from_gbps']:>14.2f} {r['put_from_us']:>8.0f} {r['memcpy_gbps']:>12.2f} "
              f"{r['cold_memcpy_gbps']:>6.2f} {r['plan_pct_of_memcpy']:>9.0f}% "
              f"{r['write_pct_of_cold_memcpy']:>10.0f}%{'' if r['verified'] else '  BYTES DIFFER'}")
    print(f"targets: {doc['targets']}")
    if args.json:
        with open(args.json, "w") as f:
            json.dump(doc, f, indent=1)
        print(f"wrote {args.json}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
