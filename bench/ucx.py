#!/usr/bin/env python3
"""The UCX route against our TCP route and against UCX itself (docs/ucx.md).

One run, three columns per cell, all over loopback on this machine:

* ``ucx``: gostore's UCX route. A storage peer process (this script,
  ``--peer``) holds the only segment; the worker (``--worker``, segment 0)
  writes into and reads from it with ``protocol="ucx"``; both processes run
  with ``GOSTORE_TRANSPORT=ucx`` (the route even on one host) and
  ``UCX_TLS=tcp`` (UCX over loopback TCP, as between two hosts without RDMA).
* ``tcp``: the same two processes with ``protocol="tcp"`` and
  ``GOSTORE_TRANSPORT=tcp``: our own TCP route.
* the limit: ``ucx_perftest`` between two processes over ``UCX_TLS=tcp`` on
  127.0.0.1 at the same message size: for bandwidth the better of
  ``ucp_put_bw`` and ``ucp_get`` (one-sided, as the route), for 4 KiB
  latency ``ucp_put_lat`` (put rows) and ``ucp_get`` (get rows). Both
  figures are in the JSON. ucx_perftest runs with the UCX knobs the route
  sets by default (``UCX_TCP_TX_SEG_SIZE``/``UCX_TCP_RX_SEG_SIZE`` =
  gostore/ucx's DefaultTCPSegSize, 64 KiB; a value in this process's env
  wins for both), so the limit is measured with the same transport setup.
  ``--libucx PATH`` (or ``GOSTORE_LIBUCX``) names the ``libucp.so.0`` the
  route loads; the limit is then that UCX's own ``ucx_perftest`` (its
  prefix's ``bin/``: PyPI's ``libucx`` wheel ships one), never the
  system's, so a run on UCX 1.22 compares against 1.22.

Cells: {put, get} x {4 KiB, 1 MiB, 16 MiB} x {single call, batch of 32}, the
zero-copy API (``put_from``/``get_into`` and their batch forms out of a
registered buffer). Every put writes fresh keys; every key read is checked
(its first and last 8 bytes, overwritten before the read); failures are
counted. Goals, printed as columns: the UCX route >= 90 % of ucx_perftest's
bandwidth at 16 MiB, and its 4 KiB latency no worse than our TCP route's.

Prints a table; ``--json PATH`` writes every cell, the limits and the
machine. Never fails on a number (exit 1 only when it could not run).
``--seconds`` per cell (default 1.5) keeps the run to a few minutes.
"""

from __future__ import annotations

import argparse
import ctypes
import json
import mmap
import os
import platform
import shutil
import socket
import statistics
import subprocess
import sys
import time
from typing import Any, Dict, List, Optional, Tuple

KiB, MiB = 1 << 10, 1 << 20
SIZES = [4 * KiB, 1 * MiB, 16 * MiB]
BATCHES = [1, 32]
# One batch of 32 x 16 MiB stays under the master's eviction watermark
# (0.90 of the pool): at 544 MiB a batch filled 94 % and a key could be
# evicted between its put and its get.
SEGMENT = 768 * MiB
ROUTES = ["ucx", "tcp"]
LAT_SIZE = 4 * KiB


def log(msg: str) -> None:
    sys.stderr.write(f"[bench/ucx] {msg}\n")
    sys.stderr.flush()


def fmt_size(n: int) -> str:
    return f"{n // MiB} MiB" if n >= MiB else f"{n // KiB} KiB"


def route_env(route: str) -> Dict[str, str]:
    env = dict(os.environ, GOSTORE_TRANSPORT=route, UCX_TLS="tcp", GOSTORE_LOG_LEVEL="warn")
    return env


def _readline(proc: subprocess.Popen, timeout: float) -> str:
    import threading
    box: List[str] = []
    t = threading.Thread(target=lambda: box.append(proc.stdout.readline()), daemon=True)
    t.start()
    t.join(timeout)
    return box[0] if box else ""


def kill(proc: Optional[subprocess.Popen]) -> None:
    if proc is not None and proc.poll() is None:
        proc.kill()
        proc.wait()


# ---------------------------------------------------------------------------
# child processes


def peer_main(master: str, protocol: str) -> int:
    from gostore import MooncakeDistributedStore
    s = MooncakeDistributedStore()
    rc = s.setup("127.0.0.1", "P2PHANDSHAKE", SEGMENT, 16 * MiB, protocol, "", master)
    print(json.dumps({"ready": rc == 0, "rc": rc}), flush=True)
    sys.stdin.read()  # until the parent closes stdin
    s.close()
    return 0


def _cell(store, base: int, op: str, size: int, batch: int, seconds: float, tag: str) -> Dict[str, Any]:
    """Time one cell: rounds of fresh puts (and, for get, the reads of
    them), the segment emptied between rounds; only the calls are timed."""
    per_round = max(1, min(256, (SEGMENT // 2) // (size * batch)))  # calls that fit in the segment
    lat: List[float] = []
    failed = verify_failed = calls = 0
    ptrs = [base + j * size for j in range(batch)]
    sizes = [size] * batch
    spent = 0.0
    rnd = 0
    while spent < seconds or calls < 3:
        keys_round = [[f"{tag}/{rnd}/{i}/{j}" for j in range(batch)] for i in range(per_round)]
        rnd += 1
        for keys in keys_round:
            t0 = time.perf_counter()
            rcs = store.batch_put_from(keys, ptrs, sizes) if batch > 1 else [store.put_from(keys[0], base, size)]
            dt = time.perf_counter() - t0
            failed += sum(1 for r in rcs if r != 0)
            if op == "put":
                lat.append(dt)
                spent += dt
                calls += 1
        if op == "get":
            for keys in keys_round:
                for j in range(batch):  # overwrite what the read must bring back
                    ctypes.memset(ptrs[j], 0, 8)
                    ctypes.memset(ptrs[j] + size - 8, 0, 8)
                t0 = time.perf_counter()
                got = store.batch_get_into(keys, ptrs, sizes) if batch > 1 else [store.get_into(keys[0], base, size)]
                dt = time.perf_counter() - t0
                lat.append(dt)
                spent += dt
                calls += 1
                failed += sum(1 for g in got if g != size)
                for j in range(batch):
                    if (ctypes.string_at(ptrs[j], 8) != _stamp(j, 0)
                            or ctypes.string_at(ptrs[j] + size - 8, 8) != _stamp(j, 1)):
                        verify_failed += 1
                        _restamp(ptrs[j], size, j)
        store.remove_all(True)
    lat.sort()
    total = calls * batch * size
    return {"op": op, "size": size, "batch": batch, "calls": calls, "failed_keys": failed,
            "verify_failed": verify_failed, "gbps": total / spent / 1e9 if spent else 0.0,
            "p50_us": statistics.median(lat) * 1e6, "p99_us": lat[min(len(lat) - 1, int(len(lat) * 0.99))] * 1e6}


def _stamp(j: int, end: int) -> bytes:
    return (0x5A5A0000 + j * 2 + end).to_bytes(8, "little")


def _restamp(ptr: int, size: int, j: int) -> None:
    ctypes.memmove(ptr, _stamp(j, 0), 8)
    ctypes.memmove(ptr + size - 8, _stamp(j, 1), 8)


def worker_main(master: str, protocol: str, seconds: float, sizes: List[int]) -> int:
    from gostore import MooncakeDistributedStore
    s = MooncakeDistributedStore()
    rc = s.setup("127.0.0.1", "P2PHANDSHAKE", 0, 16 * MiB, protocol, "", master)
    if rc != 0:
        print(json.dumps({"error": f"setup returned {rc}"}), flush=True)
        return 1
    span = max(sizes) * max(BATCHES)
    mem = mmap.mmap(-1, span)
    base = ctypes.addressof(ctypes.c_char.from_buffer(mem))
    ctypes.memset(base, 0xA5, span)
    if s.register_buffer(base, span) != 0:
        print(json.dumps({"error": "register_buffer failed"}), flush=True)
        return 1
    cells = []
    for size in sizes:
        for batch in BATCHES:
            for j in range(batch):
                _restamp(base + j * size, size, j)
            for op in ("put", "get"):
                cells.append(_cell(s, base, op, size, batch, seconds, f"{protocol}/{op}/{size}/{batch}"))
                log(f"{protocol:>3} {op} {fmt_size(size):>7} x{batch:<2} {cells[-1]['gbps']:.3f} GB/s "
                    f"p50 {cells[-1]['p50_us']:.0f} us")
    info = s.transport_info()
    s.unregister_buffer(base)
    s.close()
    print(json.dumps({"cells": cells, "transport_info": info}), flush=True)
    return 0


def lat_worker_main(master: str, protocol: str) -> int:
    """The interleaved latency arm's worker: answers each ``put N`` or
    ``get N`` line on stdin with the seconds of N single 4 KiB calls (fresh
    keys; a get reads keys put just before, untimed), one JSON list a line,
    so the parent can alternate the arms in short blocks."""
    from gostore import MooncakeDistributedStore
    s = MooncakeDistributedStore()
    if s.setup("127.0.0.1", "P2PHANDSHAKE", 0, 16 * MiB, protocol, "", master) != 0:
        print(json.dumps({"error": "setup failed"}), flush=True)
        return 1
    mem = mmap.mmap(-1, LAT_SIZE)
    base = ctypes.addressof(ctypes.c_char.from_buffer(mem))
    ctypes.memset(base, 0xA5, LAT_SIZE)
    if s.register_buffer(base, LAT_SIZE) != 0:
        print(json.dumps({"error": "register_buffer failed"}), flush=True)
        return 1
    print(json.dumps({"ready": True}), flush=True)
    block = 0
    for line in sys.stdin:
        op, n = line.split()
        keys = [f"lat/{block}/{i}" for i in range(int(n))]
        block += 1
        lat, bad = [], 0
        for k in keys:
            t0 = time.perf_counter()
            rc = s.put_from(k, base, LAT_SIZE)
            dt = time.perf_counter() - t0
            bad += rc != 0
            if op == "put":
                lat.append(dt)
        if op == "get":
            for k in keys:
                t0 = time.perf_counter()
                got = s.get_into(k, base, LAT_SIZE)
                lat.append(time.perf_counter() - t0)
                bad += got != LAT_SIZE
        s.remove_all(True)
        print(json.dumps({"lat": lat, "bad": bad}), flush=True)
    s.unregister_buffer(base)
    s.close()
    return 0


class Arm:
    """One route's master, storage peer and latency worker, kept up so the
    interleaved run can alternate arms block by block."""

    def __init__(self, label: str, route: str, python: str):
        import gostore
        self.label, self.route = label, route
        self.procs: List[subprocess.Popen] = []
        env = route_env(route)
        m = subprocess.Popen([gostore.master_binary_path(), "--rpc_address=127.0.0.1", "--rpc_port=0",
                              "--metrics_port=0"], stdout=subprocess.PIPE, stderr=subprocess.DEVNULL,
                             text=True, env=env)
        self.procs.append(m)
        fields = dict(f.split("=", 1) for f in _readline(m, 15).split() if "=" in f)
        if "rpc" not in fields:
            raise RuntimeError(f"{label}: master did not start")
        me = os.path.abspath(__file__)
        for flag in ("--peer", "--lat-worker"):
            p = subprocess.Popen([python, me, flag, fields["rpc"], "--protocol", route],
                                 stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True, env=env)
            self.procs.append(p)
            if '"ready": true' not in _readline(p, 60):
                raise RuntimeError(f"{label}: {flag} did not start")
        self.worker = self.procs[-1]

    def block(self, op: str, n: int) -> Dict[str, Any]:
        self.worker.stdin.write(f"{op} {n}\n")
        self.worker.stdin.flush()
        return json.loads(_readline(self.worker, 120) or '{"lat": [], "bad": -1}')

    def close(self) -> None:
        for p in reversed(self.procs):
            if p.stdin:
                p.stdin.close()
            try:
                p.wait(10)
            except subprocess.TimeoutExpired:
                pass
            kill(p)


def interleaved(arms: List[Arm], rounds: int, per_block: int) -> Dict[str, Any]:
    """4 KiB single-call latency, the arms alternated in blocks of
    per_block calls (the order rotating each round), so load that comes and
    goes on a shared machine falls on every arm alike."""
    out: Dict[str, Any] = {}
    for op in ("put", "get"):
        lat: Dict[str, List[float]] = {a.label: [] for a in arms}
        bad = {a.label: 0 for a in arms}
        for r in range(rounds):
            for a in arms[r % len(arms):] + arms[:r % len(arms)]:
                res = a.block(op, per_block)
                lat[a.label] += res["lat"]
                bad[a.label] += res["bad"]
        for label, v in lat.items():
            v.sort()
            out[f"{op}/{label}"] = {"calls": len(v), "bad": bad[label],
                                    "p10_us": v[len(v) // 10] * 1e6 if v else None,
                                    "p50_us": statistics.median(v) * 1e6 if v else None,
                                    "p90_us": v[len(v) * 9 // 10] * 1e6 if v else None}
    return out


def run_route(route: str, seconds: float, sizes: List[int]) -> Dict[str, Any]:
    import gostore
    env = route_env(route)
    master = subprocess.Popen([gostore.master_binary_path(), "--rpc_address=127.0.0.1", "--rpc_port=0",
                               "--metrics_port=0"], stdout=subprocess.PIPE, stderr=subprocess.DEVNULL,
                              text=True, env=env)
    peer = None
    try:
        line = _readline(master, 15)
        fields = dict(f.split("=", 1) for f in line.split() if "=" in f)
        if "rpc" not in fields:
            return {"error": f"master did not start: {line!r}"}
        me = os.path.abspath(__file__)
        peer = subprocess.Popen([sys.executable, me, "--peer", fields["rpc"], "--protocol", route],
                                stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True, env=env)
        hello = _readline(peer, 60)
        if '"ready": true' not in hello:
            return {"error": f"storage peer did not start: {hello!r}"}
        w = subprocess.run([sys.executable, me, "--worker", fields["rpc"], "--protocol", route,
                            "--seconds", str(seconds), "--sizes", ",".join(map(str, sizes))],
                           stdout=subprocess.PIPE, text=True, env=env, timeout=900)
        out = w.stdout.strip().splitlines()
        return json.loads(out[-1]) if out else {"error": f"worker exited {w.returncode}"}
    finally:
        if peer is not None and peer.poll() is None:
            peer.stdin.close()
            try:
                peer.wait(10)
            except subprocess.TimeoutExpired:
                kill(peer)
        kill(master)


# ---------------------------------------------------------------------------
# the limit: ucx_perftest


def _free_port() -> int:
    with socket.socket() as so:
        so.bind(("127.0.0.1", 0))
        return so.getsockname()[1]


# What gostore/ucx's NewContext sets for tcp unless the env does
# (DefaultTCPSegSize): the limit gets the same.
ROUTE_UCX_KNOBS = {"UCX_TCP_TX_SEG_SIZE": "64K", "UCX_TCP_RX_SEG_SIZE": "64K"}


def ucx_tool(name: str) -> Tuple[str, Dict[str, str]]:
    """UCX's program ``name`` (ucx_perftest, ucx_info) of the UCX the route
    loads, and the environment it needs: with GOSTORE_LIBUCX set, the one
    in bin/ beside that library's lib/ (found with LD_LIBRARY_PATH there;
    "" where it has none: a limit from another UCX would compare unlike
    things), else the system's."""
    lib = os.environ.get("GOSTORE_LIBUCX", "")
    if not lib:
        return shutil.which(name) or "", {}
    libdir = os.path.dirname(os.path.abspath(lib))
    exe = os.path.join(os.path.dirname(libdir), "bin", name)
    ld = ":".join(p for p in (libdir, os.environ.get("LD_LIBRARY_PATH", "")) if p)
    return (exe if os.access(exe, os.X_OK) else ""), {"LD_LIBRARY_PATH": ld}


def perftest(test: str, size: int, iters: int, wait: str = "") -> Dict[str, Any]:
    """One ucx_perftest run between two processes over UCX_TLS=tcp on
    127.0.0.1: its final CSV line (latency in us, bandwidth in MB/s =
    2^20 B/s, as ucx_perftest prints them). wait "sleep" runs both sides
    event-driven (-E sleep), as the route's owner and initiator are, rather
    than busy-polling."""
    exe, extra = ucx_tool("ucx_perftest")
    if not exe and os.environ.get("GOSTORE_LIBUCX"):
        return {"error": f"no ucx_perftest beside GOSTORE_LIBUCX={os.environ['GOSTORE_LIBUCX']}"}
    if not exe:
        return {"error": "ucx_perftest not installed (make ucx installs ucx-utils)"}
    env = dict(os.environ, UCX_TLS="tcp", **extra)
    for k, v in ROUTE_UCX_KNOBS.items():
        env.setdefault(k, v)
    port = _free_port()
    ev = ["-E", wait] if wait else []
    srv = subprocess.Popen([exe, "-p", str(port)] + ev, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env=env)
    try:
        time.sleep(0.3)  # the server's listen; the client retries its connect anyway
        for _ in range(20):
            try:
                c = subprocess.run([exe, "127.0.0.1", "-p", str(port), "-t", test, "-s", str(size), "-n",
                                    str(iters), "-w", str(max(2, iters // 10)), "-f", "-v"] + ev,
                                   capture_output=True, text=True, env=env, timeout=30 if wait else 120)
            except subprocess.TimeoutExpired:
                # Seen with -E sleep ucp_get on UCX 1.13 now and then: a
                # missing figure, not a failed run.
                return {"error": f"{test} {' '.join(ev)} did not finish"}
            rows = [r for r in c.stdout.splitlines() if r.strip() and r.strip()[0].isdigit()]
            if rows:
                v = [float(x) for x in rows[-1].split(",")]
                return {"test": test + (f" -E {wait}" if wait else ""), "size": size, "iterations": int(v[0]), "p50_us": v[1], "avg_us": v[2],
                        "gbps": v[5] * MiB / 1e9}
            if "Connection refused" not in c.stderr:
                return {"error": (c.stderr or c.stdout)[-300:]}
            time.sleep(0.2)
        return {"error": "ucx_perftest server did not listen"}
    finally:
        kill(srv)


def limits(sizes: List[int]) -> Dict[str, Any]:
    out: Dict[str, Any] = {}
    for size in sizes:
        iters = max(20, min(2000, (256 * MiB) // size))
        out[f"put_bw/{size}"] = perftest("ucp_put_bw", size, iters)
        out[f"get/{size}"] = perftest("ucp_get", size, iters)
    out["put_lat/4096"] = perftest("ucp_put_lat", 4096, 2000)
    # Event-driven on both sides, as the route is (its owner sleeps on the
    # worker's event fd): the fairer latency limit for it.
    out["put_lat_sleep/4096"] = perftest("ucp_put_lat", 4096, 2000, "sleep")
    out["get_sleep/4096"] = perftest("ucp_get", 4096, 2000, "sleep")
    return out


def ucx_version() -> str:
    exe, extra = ucx_tool("ucx_info")
    try:
        return subprocess.run([exe or "ucx_info", "-v"], capture_output=True, text=True, timeout=10,
                              env=dict(os.environ, **extra)).stdout.strip()
    except (OSError, subprocess.SubprocessError):
        return ""


# ---------------------------------------------------------------------------


def run_interleaved(a: argparse.Namespace) -> Dict[str, Any]:
    if a.rounds <= 0:
        return {}
    specs = a.arm or [f"{r}={r}" for r in ROUTES]
    arms: List[Arm] = []
    try:
        for spec in specs:
            label, rest = spec.split("=", 1)
            route, _, python = rest.partition(":")
            arms.append(Arm(label, route, python or sys.executable))
        log(f"interleaved 4 KiB latency: {a.rounds} rounds x {a.per_block} calls per arm ...")
        return interleaved(arms, a.rounds, a.per_block)
    except (RuntimeError, OSError, ValueError) as e:
        log(f"interleaved latency: {e}")
        return {}
    finally:
        for arm in arms:
            arm.close()


def print_interleaved(inter: Dict[str, Any]) -> None:
    if not inter:
        return
    print("\n4 KiB single calls, arms interleaved in blocks (p10 / p50 / p90 us per call):")
    for k, v in inter.items():
        op, label = k.split("/", 1)
        print(f"  {op:<4}{label:<10} {v['p10_us']:7.0f} {v['p50_us']:7.0f} {v['p90_us']:7.0f}"
              f"   ({v['calls']} calls, {v['bad']} bad)")
    for op in ("put", "get"):
        u, t = inter.get(f"{op}/ucx"), inter.get(f"{op}/tcp")
        if u and t and u["p50_us"] and t["p50_us"]:
            print(f"  {op}: ucx p50 / tcp p50 = {u['p50_us'] / t['p50_us']:.2f}"
                  f" ({'goal met' if u['p50_us'] <= t['p50_us'] else 'ABOVE the TCP route'})")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--json", help="write every cell, the limits and the machine here")
    ap.add_argument("--seconds", type=float, default=1.5, help="timed seconds per cell")
    ap.add_argument("--sizes", default=",".join(map(str, SIZES)))
    ap.add_argument("--peer")
    ap.add_argument("--worker")
    ap.add_argument("--protocol", default="ucx")
    ap.add_argument("--lat-worker")
    ap.add_argument("--rounds", type=int, default=10,
                    help="interleaved 4 KiB latency: rounds of one block per arm (0: skip)")
    ap.add_argument("--per-block", type=int, default=100, help="calls per block")
    ap.add_argument("--arm", action="append", default=[], metavar="LABEL=ROUTE[:PYTHON]",
                    help="interleaved arms (default ucx=ucx and tcp=tcp with this Python); "
                         "e.g. ucx-old=ucx:/tmp/old-venv/bin/python to compare builds")
    ap.add_argument("--only-interleaved", action="store_true", help="skip the cells and the limits")
    ap.add_argument("--libucx", metavar="PATH",
                    help="the libucp.so.0 for the route (GOSTORE_LIBUCX) and, from its prefix's bin/, "
                         "ucx_perftest for the limit: e.g. the libucx wheel's")
    a = ap.parse_args()
    if a.libucx:
        os.environ["GOSTORE_LIBUCX"] = os.path.abspath(a.libucx)  # the processes this starts inherit it
    sizes = [int(x) for x in a.sizes.split(",")]
    if a.peer:
        return peer_main(a.peer, a.protocol)
    if a.worker:
        return worker_main(a.worker, a.protocol, a.seconds, sizes)
    if a.lat_worker:
        return lat_worker_main(a.lat_worker, a.protocol)
    if a.only_interleaved:
        inter = run_interleaved(a)
        print_interleaved(inter)
        if a.json:
            with open(a.json, "w") as fjson:
                json.dump({"when": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
                           "machine": {"cpus": os.cpu_count(), "load": os.getloadavg()},
                           "interleaved": inter}, fjson, indent=1)
        return 0 if inter else 1

    t0 = time.time()
    runs = {}
    for route in ROUTES:
        log(f"route {route} ...")
        runs[route] = run_route(route, a.seconds, sizes)
        if "error" in runs[route]:
            log(f"route {route}: {runs[route]['error']}")
    inter = run_interleaved(a) if 4096 in sizes else {}
    log("ucx_perftest (UCX_TLS=tcp, 127.0.0.1) ...")
    lim = limits(sizes)

    def cell(route: str, op: str, size: int, batch: int) -> Optional[Dict[str, Any]]:
        for c in runs[route].get("cells", []):
            if (c["op"], c["size"], c["batch"]) == (op, size, batch):
                return c
        return None

    rows = []
    hdr = (f"{'op':<4}{'size':>8}{'batch':>6} | {'ucx GB/s':>9}{'p50 us':>9} | {'tcp GB/s':>9}{'p50 us':>9} | "
           f"{'perftest GB/s':>14}{'p50 us':>9} | {'ucx/perftest':>12} {'ucx p50<=tcp':>12} {'bad':>4}")
    print(hdr)
    print("-" * len(hdr))
    for op in ("put", "get"):
        for size in sizes:
            for batch in BATCHES:
                u, t = cell("ucx", op, size, batch), cell("tcp", op, size, batch)
                # The bandwidth limit: UCX's better one-sided op at this size
                # (over tcp, ucp_put_bw can trail ucp_get: the responder
                # progresses the emulated puts only between its own polls).
                bw = max((lim.get(f"{t}/{size}", {}) for t in ("put_bw", "get")),
                         key=lambda r: r.get("gbps", -1.0))
                lat = lim.get("put_lat/4096" if op == "put" else f"get/{size}", {}) if size == 4096 else bw
                ratio = u["gbps"] / bw["gbps"] if u and bw.get("gbps") else None
                not_worse = (u["p50_us"] <= t["p50_us"]) if (u and t) else None
                bad = sum(c["failed_keys"] + c["verify_failed"] for c in (u, t) if c)
                goal_bw = ratio >= 0.9 if (ratio is not None and size == 16 * MiB) else None
                rows.append({"op": op, "size": size, "batch": batch, "ucx": u, "tcp": t,
                             "limit_bw": bw, "limit_lat": lat, "ucx_over_perftest": ratio,
                             "goal_90pct_of_perftest": goal_bw,
                             "goal_latency_not_worse_than_tcp": not_worse if size == 4096 else None})

                def f(c: Optional[dict], k: str, fmt: str) -> str:
                    return format(c[k], fmt) if c and k in c else format("-", ">" + fmt.split(".")[0])
                goal = "" if size != 4096 else ("yes" if not_worse else "NO" if not_worse is False else "-")
                rtxt = f"{ratio * 100:.0f} %" if ratio is not None else "-"
                if goal_bw is not None:
                    rtxt += " ok" if goal_bw else " BELOW"
                print(f"{op:<4}{fmt_size(size):>8}{batch:>6} | {f(u, 'gbps', '9.3f')}{f(u, 'p50_us', '9.0f')} | "
                      f"{f(t, 'gbps', '9.3f')}{f(t, 'p50_us', '9.0f')} | {f(bw, 'gbps', '14.3f')}"
                      f"{f(lat, 'p50_us', '9.0f')} | {rtxt:>12} {goal:>12} {bad:>4}")
    print_interleaved(inter)
    if "put_lat_sleep/4096" in lim:
        ps, gs = lim["put_lat_sleep/4096"], lim.get("get_sleep/4096", {})
        print(f"4 KiB latency limits with both sides event-driven (ucx_perftest -E sleep): "
              f"ucp_put_lat {ps.get('p50_us', float('nan')):.0f} us, ucp_get {gs.get('p50_us', float('nan')):.0f} us")
    ucxinfo = runs["ucx"].get("transport_info", {})
    print(f"\nUCX route's transport_info: {json.dumps(ucxinfo.get('ucx', ucxinfo))[:400]}")
    print(f"limits: {ucx_tool('ucx_perftest')[0] or 'ucx_perftest'} ucp_put_bw/ucp_get (bandwidth), "
          f"ucp_put_lat/ucp_get (4 KiB latency), UCX_TLS=tcp on 127.0.0.1; {time.time() - t0:.0f} s in all")
    if a.json:
        with open(a.json, "w") as fjson:
            json.dump({"when": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
                       "machine": {"cpus": os.cpu_count(), "platform": platform.platform(),
                                   "load": os.getloadavg(), "ucx": ucx_version()},
                       "seconds_per_cell": a.seconds, "rows": rows, "limits": lim,
                       "interleaved": inter,
                       "errors": {r: runs[r]["error"] for r in runs if "error" in runs[r]},
                       "transport_info": {r: runs[r].get("transport_info") for r in runs}}, fjson, indent=1)
    return 0 if any("cells" in r for r in runs.values()) else 1


if __name__ == "__main__":
    sys.exit(main())
