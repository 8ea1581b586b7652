#!/usr/bin/env python3
"""GPU benchmark: gostore's device paths beside the copies they are made of,
measured in the same run on the same GPU (``tests/gpu/run.sh`` runs it).

Limits (cudaMemcpy itself through CuPy's runtime binding, timed with a
synchronize after each): HtoD and DtoH from pinned and from pageable host
memory, DtoD, and a host memmove. Rows:

* ``driver HtoD/DtoH``: gostore's loader (``gs_device_copy``: cuMemcpy and a
  context synchronize) between a pinned host tensor and device memory,
  against torch's pinned copies.
* ``GPU buffer -> host segment`` / ``host segment -> GPU buffer``:
  ``put_from`` / ``get_into`` of registered device memory with the store's
  own host segment; staged through pinned memory (a pinned cudaMemcpy and a
  parallel host copy); limit: the pinned cudaMemcpy alone.
* ``host buffer -> GPU segment (ipc|tcp)`` and back: ``put_from`` /
  ``get_into`` of registered host memory where the only segment is GPU
  memory of another process, reached through its CUDA IPC handle (the
  registered buffer is page-locked at its first copy: limit the pinned
  cudaMemcpy) or over loopback TCP through its transfer server (limit: one
  loopback TCP stream).
* ``GPU buffer -> GPU segment (ipc)`` and back: registered device memory to
  another process's GPU segment, one device-to-device copy through the IPC
  mapping; limit: cudaMemcpy DtoD.

Each figure is the median of ``--reps`` timed loops; every put writes fresh
keys; every get's bytes are checked once after the timed loops. ``--json``
writes everything.
"""

from __future__ import annotations

import argparse
import ctypes
import json
import os
import statistics
import subprocess
import sys
import time
from typing import Any, Callable, Dict, List

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
sys.path.insert(0, os.path.join(ROOT, "bench"))

MiB = 1 << 20
GiB = 1 << 30


def owner_main(master: str, size: int) -> int:
    """The other process: contributes a GPU segment until stdin closes."""
    import gostore

    s = gostore.MooncakeDistributedStore()
    rc = s.setup("127.0.0.1", "P2PHANDSHAKE", size, 16 * MiB, "tcp", "", master,
                 segment_location="cuda:0")
    print(f"ready {s.get_hostname()}" if rc == 0 else f"failed {rc}", flush=True)
    if rc != 0:
        return 1
    sys.stdin.read()
    s.close()
    return 0


def timed(fn: Callable[[], Any], reps: int, sync: Callable[[], None],
          before: Callable[[], Any] = lambda: None) -> float:
    """Median seconds of fn() over reps runs (one warm-up), each after an
    untimed before()."""
    before()
    fn()
    sync()
    out = []
    for _ in range(reps):
        before()
        t0 = time.perf_counter()
        fn()
        sync()
        out.append(time.perf_counter() - t0)
    return statistics.median(out)


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--owner", help=argparse.SUPPRESS)
    ap.add_argument("--segment", type=int, default=2 * GiB)
    ap.add_argument("--sizes", default="1,16,64", help="object sizes in MiB")
    ap.add_argument("--reps", type=int, default=5)
    ap.add_argument("--json")
    args = ap.parse_args()
    if args.owner:
        return owner_main(args.owner, args.segment)

    import torch

    import gostore
    from bench import kill, start_master

    os.environ.setdefault("GOSTORE_LOG_LEVEL", "warn")
    sizes = [int(x) * MiB for x in args.sizes.split(",")]
    sync = torch.cuda.synchronize
    lib = gostore._native.lib()
    info = gostore.gpu_info()
    rows: List[Dict[str, Any]] = []
    limits: Dict[int, Dict[str, float]] = {}

    def gbps(n: int, secs: float) -> float:
        return n / secs / 1e9

    # ---- limits, per size: cudaMemcpy itself (through CuPy's runtime
    # binding; torch's copy_ where CuPy is missing) and a host memmove ----
    try:
        import cupy
        rt = cupy.cuda.runtime
        memcpy_kind = {"htod": rt.memcpyHostToDevice, "dtoh": rt.memcpyDeviceToHost, "dtod": rt.memcpyDeviceToDevice}
        reference = "cudaMemcpy (CuPy runtime)"
    except ImportError:
        cupy = None
        reference = "torch copy_ (cupy missing)"
    for n in sizes:
        pinned = torch.empty(n, dtype=torch.uint8).pin_memory()
        pageable = torch.ones(n, dtype=torch.uint8)  # touched
        d1 = torch.empty(n, dtype=torch.uint8, device="cuda")
        d2 = torch.empty(n, dtype=torch.uint8, device="cuda")
        h1, h2 = bytearray(b"x" * n), bytearray(b"y" * n)
        a1 = ctypes.addressof(ctypes.c_char.from_buffer(h1))
        a2 = ctypes.addressof(ctypes.c_char.from_buffer(h2))

        def copy(dst, src, kind):
            if cupy is not None:
                return lambda: rt.memcpy(dst.data_ptr(), src.data_ptr(), n, memcpy_kind[kind])
            return lambda: dst.copy_(src)

        lim = {
            "htod_pinned": gbps(n, timed(copy(d1, pinned, "htod"), args.reps, sync)),
            "dtoh_pinned": gbps(n, timed(copy(pinned, d1, "dtoh"), args.reps, sync)),
            "htod_pageable": gbps(n, timed(copy(d1, pageable, "htod"), args.reps, sync)),
            "dtoh_pageable": gbps(n, timed(copy(pageable, d1, "dtoh"), args.reps, sync)),
            "dtod": gbps(n, timed(copy(d2, d1, "dtod"), args.reps, sync)),
            "memcpy": gbps(n, timed(lambda: ctypes.memmove(a2, a1, n), args.reps, lambda: None)),
            "tcp_loopback": tcp_loopback(n, args.reps),
        }
        limits[n] = lim
        for name, dst, src, ref in (("driver HtoD (pinned)", d1, pinned, "htod_pinned"),
                                    ("driver DtoH (pinned)", pinned, d1, "dtoh_pinned")):
            secs = timed(lambda: lib.gs_device_copy(dst.data_ptr(), src.data_ptr(), n), args.reps, lambda: None)
            rows.append({"row": name, "size": n, "gbps": gbps(n, secs), "limit": lim[ref], "limit_name": ref})
        del pinned, pageable, d1, d2, h1, h2

    master = start_master("shm")
    owner = None
    try:
        addr = master.rpc_addr
        # ---- registered GPU memory and this process's host segment ----------
        s = gostore.MooncakeDistributedStore()
        assert s.setup("127.0.0.1", "P2PHANDSHAKE", args.segment, 16 * MiB, "tcp", "", addr) == 0
        gpu_rows(s, torch, sizes, args.reps, rows, limits, "host segment",
                 lambda lim: lim["dtoh_pinned"], "dtoh_pinned", lambda lim: lim["htod_pinned"], "htod_pinned")
        s.close()

        # ---- another process's GPU segment, over IPC and TCP ----------------
        owner = subprocess.Popen([sys.executable, __file__, "--owner", addr, "--segment", str(args.segment)],
                                 stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
        line = owner.stdout.readline()
        if not line.startswith("ready"):
            raise RuntimeError(f"GPU segment owner did not start: {line!r}")
        for transport in ("ipc", "tcp"):
            if transport == "tcp":
                os.environ["GOSTORE_TRANSPORT"] = "tcp"
            c = gostore.MooncakeDistributedStore()
            assert c.setup("127.0.0.1", "P2PHANDSHAKE", 0, 16 * MiB, "tcp", "", addr) == 0
            host_rows(c, sizes, args.reps, rows, limits, f"GPU segment ({transport})")
            if transport == "ipc":
                gpu_rows(c, torch, sizes, args.reps, rows, limits, "GPU segment (ipc)",
                         lambda lim: lim["dtod"], "dtod", lambda lim: lim["dtod"], "dtod")
            c.close()
            os.environ.pop("GOSTORE_TRANSPORT", None)
    finally:
        if owner is not None:
            kill(owner)
        kill(master)

    print(f"GPU: {info['devices'][0]['name'] if info['devices'] else '?'}, driver {info.get('driver_version')}; "
          f"limits: {reference}, host memmove")
    print(f"{'row':52} {'size':>7} {'GB/s':>8} {'limit GB/s':>11} {'of limit':>9}  limit")
    for r in rows:
        print(f"{r['row']:52} {r['size'] // MiB:>5}Mi {r['gbps']:8.2f} {r['limit']:11.2f} "
              f"{100 * r['gbps'] / r['limit']:8.0f}%  {r['limit_name']}")
    print("limits (GB/s):")
    for n, lim in limits.items():
        print(f"  {n // MiB:>3} MiB: " + ", ".join(f"{k} {v:.2f}" for k, v in lim.items()))
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"gpu": info, "reference": reference, "rows": rows,
                       "limits": {str(k): v for k, v in limits.items()}}, f, indent=1)
    return 0


def tcp_loopback(n: int, reps: int) -> float:
    """GB/s of one loopback TCP stream carrying n bytes (median of reps),
    the same socket buffer sizes as the transfer engine (4 MiB)."""
    import socket
    import threading

    ln = socket.create_server(("127.0.0.1", 0))
    got = threading.Event()

    def sink() -> None:
        conn, _ = ln.accept()
        conn.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4 * MiB)
        buf = bytearray(4 * MiB)
        left = n * (reps + 1)
        while left > 0:
            k = conn.recv_into(buf, min(len(buf), left))
            if k == 0:
                break
            left -= k
            if left % n == 0:
                got.set()
        got.set()
        conn.close()

    t = threading.Thread(target=sink, daemon=True)
    t.start()
    c = socket.create_connection(ln.getsockname())
    c.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, 4 * MiB)
    payload = memoryview(bytearray(n))
    out = []
    for i in range(reps + 1):
        got.clear()
        t0 = time.perf_counter()
        c.sendall(payload)
        got.wait(30)
        if i:
            out.append(time.perf_counter() - t0)
    c.close()
    t.join(5)
    ln.close()
    return n / statistics.median(out) / 1e9


def put_get_times(s, n: int, k: int, src: int, dst: int, reps: int, sync, batch: bool):
    """Median seconds of writing k objects of n bytes from the registered
    memory at src (put_from, or batch_put_from) under fresh keys, and of
    reading them back into dst (get_into, or batch_get_into)."""
    gen = [0]
    ptrs = [src + i * n for i in range(k)]
    outs = [dst + i * n for i in range(k)]

    def keys() -> List[str]:
        return [f"o{gen[0]}-{i}" for i in range(k)]

    def fresh() -> None:
        gen[0] += 1
        s.remove_all(True)

    def put() -> None:
        if batch:
            assert s.batch_put_from(keys(), ptrs, [n] * k) == [0] * k
        else:
            assert all(s.put_from(key, p, n) == 0 for key, p in zip(keys(), ptrs))

    def get() -> None:
        if batch:
            assert s.batch_get_into(keys(), outs, [n] * k) == [n] * k
        else:
            assert all(s.get_into(key, p, n) == n for key, p in zip(keys(), outs))

    return timed(put, reps, sync, fresh), timed(get, reps, sync)


def gpu_rows(s, torch, sizes, reps, rows, limits, where, put_limit, put_name, get_limit, get_name) -> None:
    """put_from / get_into of registered device memory against ``where``."""
    for n in sizes:
        k = max(2, min(16, (512 * MiB) // n))
        src = torch.randint(0, 256, (k * n,), dtype=torch.uint8, device="cuda")
        dst = torch.empty(k * n, dtype=torch.uint8, device="cuda")
        for t in (src, dst):
            assert s.register_buffer(t.data_ptr(), t.numel()) == 0
        lim = limits[n]
        for batch in (False, True):
            dst.zero_()
            t_put, t_get = put_get_times(s, n, k, src.data_ptr(), dst.data_ptr(), reps, torch.cuda.synchronize, batch)
            assert torch.equal(dst, src), f"bytes differ after get_into from {where}"
            label = f" (batch of {k})" if batch else ""
            rows.append({"row": f"GPU buffer -> {where}{label}", "size": n, "gbps": k * n / t_put / 1e9,
                         "limit": put_limit(lim), "limit_name": put_name})
            rows.append({"row": f"{where} -> GPU buffer{label}", "size": n, "gbps": k * n / t_get / 1e9,
                         "limit": get_limit(lim), "limit_name": get_name})
        for t in (src, dst):
            s.unregister_buffer(t.data_ptr())
        s.remove_all(True)


def host_rows(s, sizes, reps, rows, limits, where) -> None:
    """put_from / get_into of registered (pageable, touched) host memory
    against ``where``."""
    import numpy as np

    for n in sizes:
        k = max(2, min(16, (512 * MiB) // n))
        src = np.frombuffer(os.urandom(k * n), dtype=np.uint8).copy()
        dst = np.ones(k * n, dtype=np.uint8)
        for a in (src, dst):
            assert s.register_buffer(a.ctypes.data, a.nbytes) == 0
        t_put, t_get = put_get_times(s, n, k, src.ctypes.data, dst.ctypes.data, reps, lambda: None, False)
        assert np.array_equal(src, dst), f"bytes differ after get_into from {where}"
        lim = limits[n]
        # IPC: the registered buffers are page-locked at their first copy,
        # so the pinned copy is the limit; TCP: one loopback stream.
        up, down = ("htod_pinned", "dtoh_pinned") if "ipc" in where else ("tcp_loopback", "tcp_loopback")
        rows.append({"row": f"host buffer -> {where}", "size": n, "gbps": k * n / t_put / 1e9,
                     "limit": lim[up], "limit_name": up})
        rows.append({"row": f"{where} -> host buffer", "size": n, "gbps": k * n / t_get / 1e9,
                     "limit": lim[down], "limit_name": down})
        for a in (src, dst):
            s.unregister_buffer(a.ctypes.data)
        s.remove_all(True)


if __name__ == "__main__":
    sys.exit(main())
