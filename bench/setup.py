#!/usr/bin/env python3
"""How long ``setup`` takes with an N GiB segment, beside the floor: the
time to map and populate N GiB of the same kind of memory in the same run
(make bench). Printed per size, each figure the median of --rounds:

* gostore ``setup`` with ``global_segment_size`` N GiB (and the 16 MiB
  local buffer every size shares), against the real ``gostore-master``;
* gostore ``setup`` with no segment: the fixed cost (master round trips,
  listener, local buffer), so setup(N) - setup(0) is what the segment costs;
* the floor: a memfd of N GiB mapped shared with MAP_POPULATE (the memory a
  segment is: shmem, every page allocated and zeroed by the kernel), and a
  private anonymous mapping with MAP_POPULATE (plain memory, for reference);
* a memfd mapped without populating (no page touched): what a setup that
  takes memory lazily costs, and what Mooncake's wheel pays;
* Mooncake's wheel ``setup`` with the same arguments, in a child process
  against its own ``mooncake_master``, where the wheel is installed
  (``make bench-peers``); skipped, saying so, where it is not.

gostore populates the segment at setup (docs/python-api.md, "Memory taken
up front"), on up to 8 threads; the ratio setup / floor says how it
compares with one thread populating the same memory. A size the host cannot hold (its
MemAvailable less 1 GiB of room) is skipped with a message: nothing here
takes more than one size at a time. It never fails on a number.
"""

from __future__ import annotations

import argparse
import json
import mmap
import os
import platform
import statistics
import subprocess
import sys
import time
from typing import Dict, List, Optional

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from bench import _pdeathsig, _readline_timeout  # noqa: E402  the same child handling as bench.py
import mooncake_wheel  # noqa: E402

GiB = 1 << 30
MiB = 1 << 20
BUFFER = 16 * MiB


def mem_available() -> int:
    with open("/proc/meminfo") as f:
        for line in f:
            if line.startswith("MemAvailable:"):
                return int(line.split()[1]) * 1024
    return 0


def timed(fn) -> float:
    t0 = time.perf_counter()
    fn()
    return time.perf_counter() - t0


def floor_memfd(size: int, populate: bool = True) -> float:
    """memfd + ftruncate + mmap shared (MAP_POPULATE when populate), timed; unmapped after."""
    holder: List[mmap.mmap] = []
    fd = os.memfd_create("gostore-bench-floor", os.MFD_CLOEXEC)
    try:
        def run() -> None:
            os.ftruncate(fd, size)
            flags = mmap.MAP_SHARED | (mmap.MAP_POPULATE if populate else 0)
            holder.append(mmap.mmap(fd, size, flags=flags))
        return timed(run)
    finally:
        for m in holder:
            m.close()
        os.close(fd)


def floor_anon(size: int) -> float:
    holder: List[mmap.mmap] = []
    try:
        return timed(lambda: holder.append(
            mmap.mmap(-1, size, flags=mmap.MAP_PRIVATE | mmap.MAP_ANONYMOUS | mmap.MAP_POPULATE)))
    finally:
        for m in holder:
            m.close()


def start_master() -> subprocess.Popen:
    from gostore import master_binary_path

    proc = subprocess.Popen(
        [master_binary_path(), "--rpc_address=127.0.0.1", "--rpc_port=0", "--metrics_port=-1", "--log_level=warn"],
        stdout=subprocess.PIPE, stdin=subprocess.DEVNULL, text=True, preexec_fn=_pdeathsig,
    )
    line = _readline_timeout(proc, 60)
    if "rpc=" not in line:
        proc.kill()
        raise RuntimeError(f"gostore-master did not start: {line!r}")
    proc.rpc_addr = dict(f.split("=", 1) for f in line.split() if "=" in f)["rpc"]  # type: ignore[attr-defined]
    return proc


def gostore_setup(master: str, size: int) -> Optional[Dict[str, float]]:
    """setup then close of a store with a segment of size bytes: the seconds
    each took, or None when setup failed."""
    from gostore import MooncakeDistributedStore

    s = MooncakeDistributedStore()
    t0 = time.perf_counter()
    rc = s.setup("127.0.0.1", "P2PHANDSHAKE", size, BUFFER, "tcp", "", master, log_level="warn")
    t1 = time.perf_counter()
    s.close()
    t2 = time.perf_counter()
    if rc != 0:
        print(f"  gostore setup of {size} bytes returned {rc}", file=sys.stderr)
        return None
    return {"setup": t1 - t0, "close": t2 - t1}


MOONCAKE_CHILD = r"""
import sys, time
from mooncake.store import MooncakeDistributedStore
size, master = int(sys.argv[1]), sys.argv[2]
s = MooncakeDistributedStore()
t0 = time.perf_counter()
rc = s.setup("127.0.0.1", "P2PHANDSHAKE", size, %d, "tcp", "", master)
t1 = time.perf_counter()
print(rc, t1 - t0, flush=True)
s.close()
""" % BUFFER


def mooncake_setup(wheel: str, master: str, size: int) -> Optional[float]:
    env = dict(os.environ, PYTHONPATH=wheel)
    p = subprocess.run([sys.executable, "-c", MOONCAKE_CHILD, str(size), master], capture_output=True,
                       text=True, env=env, timeout=300)
    try:
        rc, secs = p.stdout.split()[:2]
    except ValueError:
        print(f"  Mooncake's setup printed nothing (exit {p.returncode}): {p.stderr[-500:]}", file=sys.stderr)
        return None
    if int(rc) != 0:
        print(f"  Mooncake's setup returned {rc}", file=sys.stderr)
        return None
    return float(secs)


def median(xs: List[float]) -> Optional[float]:
    return statistics.median(xs) if xs else None


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--sizes", default="1,4", help="segment sizes in GiB, comma-separated (default 1,4)")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--no-mooncake", action="store_true")
    ap.add_argument("--json", help="write the results here")
    args = ap.parse_args()
    sizes = [int(float(x) * GiB) for x in args.sizes.split(",") if x]

    wheel = None if args.no_mooncake else mooncake_wheel.wheel_dir()
    mc_proc = mc_addr = None
    if wheel:
        mc_proc, mc_addr, _log = mooncake_wheel.start_master(wheel)
    elif not args.no_mooncake:
        print("Mooncake's wheel is not installed here (make bench-peers installs it): its column is skipped")
    master = start_master()
    rows = []
    try:
        fixed = [gostore_setup(master.rpc_addr, 0) for _ in range(args.rounds)]
        fixed_s = median([f["setup"] for f in fixed if f])
        for size in sizes:
            room = mem_available() - GiB
            if size > room:
                print(f"setup of a {size / GiB:g} GiB segment: skipped, the host has "
                      f"{max(room, 0) / GiB:.1f} GiB to spare (MemAvailable less 1 GiB)")
                rows.append({"size": size, "skipped": "not enough memory"})
                continue
            cells: Dict[str, List[float]] = {k: [] for k in
                                             ("setup", "close", "memfd_populate", "anon_populate", "memfd_lazy", "mooncake")}
            for _ in range(args.rounds):
                # interleaved, so that a noisy neighbour hits every column alike
                cells["memfd_populate"].append(floor_memfd(size))
                g = gostore_setup(master.rpc_addr, size)
                if g:
                    cells["setup"].append(g["setup"])
                    cells["close"].append(g["close"])
                cells["anon_populate"].append(floor_anon(size))
                cells["memfd_lazy"].append(floor_memfd(size, populate=False))
                if wheel:
                    m = mooncake_setup(wheel, mc_addr, size)
                    if m is not None:
                        cells["mooncake"].append(m)
            row = {"size": size, "rounds": args.rounds, "setup_no_segment_s": fixed_s}
            row.update({k + "_s": median(v) for k, v in cells.items()})
            if row["setup_s"] and row["memfd_populate_s"]:
                row["setup_over_floor"] = row["setup_s"] / row["memfd_populate_s"]
            rows.append(row)
    finally:
        master.kill()
        master.wait()
        if mc_proc:
            mc_proc.kill()
            mc_proc.wait()

    def ms(v: Optional[float]) -> str:
        return "-" if v is None else f"{v * 1000:9.1f}"

    print(f"\nsetup of an N GiB segment (median of {args.rounds}; ms). floor = memfd + MAP_POPULATE, same size, same run")
    print(f"{'N GiB':>6} {'setup':>9} {'floor':>9} {'ratio':>6} {'GB/s':>6} {'setup(0)':>9} {'anon pop':>9} "
          f"{'lazy map':>9} {'close':>9} {'Mooncake':>9}")
    for r in rows:
        if "skipped" in r:
            print(f"{r['size'] / GiB:6g}  skipped: {r['skipped']}")
            continue
        gbs = r["size"] / r["setup_s"] / 1e9 if r["setup_s"] else 0
        ratio = f"{r['setup_over_floor']:6.2f}" if r.get("setup_over_floor") else "     -"
        print(f"{r['size'] / GiB:6g} {ms(r['setup_s'])} {ms(r['memfd_populate_s'])} {ratio} {gbs:6.2f} "
              f"{ms(r['setup_no_segment_s'])} {ms(r['anon_populate_s'])} {ms(r['memfd_lazy_s'])} "
              f"{ms(r['close_s'])} {ms(r['mooncake_s'] if wheel else None)}")
    if args.json:
        out = {"bench": "setup", "rows": rows, "mooncake_wheel": wheel,
               "machine": {"nproc": os.cpu_count(), "kernel": platform.release(), "mem_available": mem_available()},
               "time": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())}
        with open(args.json, "w") as f:
            json.dump(out, f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
