"""``python -m gostore.demo`` (what ``make run`` runs): the store end to end.

It starts the real ``gostore-master`` executable and two storage clients in
their own processes on loopback, runs a short workload from this process
(copying put/get, batches, zero-copy put_from/get_into), verifies every byte,
prints a table, and stops everything it started. A second part shows the SSD
tier: a master with ``--enable_offload`` and one storage client with a small
segment and an SSD tier in a temporary directory; four times its memory is
written and read back, most of it from disk.
"""

from __future__ import annotations

import argparse
import ctypes
import os
import subprocess
import sys
import tempfile
import time
from typing import Any, Callable, Dict, List, Optional

# The Go runtime reads its environment when the library loads: set the log
# level before anything here can load it.
os.environ.setdefault("GOSTORE_LOG_LEVEL", "warn")

from .. import MooncakeDistributedStore, ReplicateConfig, master_binary_path  # noqa: E402

MiB = 1 << 20


def storage_main(master: str, segment: int, ssd: Optional[str] = None, store_class: Optional[Callable[[], Any]] = None) -> int:
    """Storage-client role (the demo's and the benchmark's peers): contribute
    a segment of ``segment`` bytes (with an SSD tier in ``ssd`` if given)
    until stdin closes. Prints ``ready HOST:PORT`` once set up, or ``error
    CODE``. ``store_class`` (default gostore's MooncakeDistributedStore)
    lets the benchmark run the same role on Mooncake's wheel."""
    store = (store_class or MooncakeDistributedStore)()
    tier = {} if ssd is None else {"enable_ssd_offload": True, "ssd_offload_path": ssd}
    rc = store.setup("127.0.0.1", "P2PHANDSHAKE", segment, 16 * MiB, "tcp", "", master, **tier)
    if rc != 0:
        print(f"error {rc}", flush=True)
        return 1
    print(f"ready {store.get_hostname()}", flush=True)
    try:
        sys.stdin.read()  # the parent closes our stdin to stop us
    except KeyboardInterrupt:
        pass
    store.close()
    return 0


class _Progress:
    """A one-line progress bar on stderr (no dependency needed)."""

    def __init__(self, total: int, width: int = 40) -> None:
        self.total, self.width, self.done, self.shown = total, width, 0, -1

    def step(self, label: str, n: int = 1) -> None:
        self.done += n
        frac = self.done / self.total
        fill = int(frac * self.width)
        if fill == self.shown and self.done < self.total:
            return  # redraw only when the bar grows: cheap, and quiet in logs
        self.shown = fill
        bar = "#" * fill + "-" * (self.width - fill)
        sys.stderr.write(f"\r[{bar}] {frac * 100:5.1f}%  {label:<28}")
        sys.stderr.flush()
        if self.done >= self.total:
            sys.stderr.write("\n")


def _pattern(seed: int, n: int) -> bytes:
    block = bytes((seed * 131 + i * 7) & 0xFF for i in range(256))
    return (block * (n // 256 + 1))[:n]


def _start_master(*flags: str) -> subprocess.Popen:
    binary = master_binary_path()
    proc = subprocess.Popen(
        [binary, "--rpc_address=127.0.0.1", "--rpc_port=0", "--metrics_port=0", "--log_level=warn",
         *flags],
        stdout=subprocess.PIPE, text=True,
    )
    line = proc.stdout.readline() if proc.stdout else ""
    if "rpc=" not in line:
        proc.kill()
        raise RuntimeError(f"gostore-master did not start: {line!r}")
    fields = dict(f.split("=", 1) for f in line.split() if "=" in f)
    proc.rpc_addr = fields["rpc"]  # type: ignore[attr-defined]
    proc.http_addr = fields["http"]  # type: ignore[attr-defined]
    return proc


def _start_storage(master: str, segment: int, ssd: Optional[str] = None,
                   env: Optional[Dict[str, str]] = None) -> subprocess.Popen:
    penv = dict(os.environ, GOSTORE_LOG_LEVEL="warn", **(env or {}))
    args = [sys.executable, "-m", "gostore.tools.demo", "--storage", master, "--segment", str(segment)]
    if ssd is not None:
        args += ["--ssd", ssd]
    proc = subprocess.Popen(args, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True, env=penv)
    line = proc.stdout.readline() if proc.stdout else ""
    if not line.startswith("ready"):
        proc.kill()
        raise RuntimeError(f"storage client did not start: {line!r}")
    proc.hostname = line.split()[1]  # type: ignore[attr-defined]
    return proc


def _stop(procs: List[subprocess.Popen], master: Optional[subprocess.Popen]) -> None:
    for p in procs:
        if p.stdin:
            p.stdin.close()
    for p in procs:
        try:
            p.wait(timeout=10)
        except subprocess.TimeoutExpired:
            p.kill()
            p.wait()
    if master is not None:
        master.terminate()
        try:
            master.wait(timeout=10)
        except subprocess.TimeoutExpired:
            master.kill()
            master.wait()


def _run_workload(store: MooncakeDistributedStore) -> List[tuple]:
    rows = []
    n_single, n_batches, batch, n_zero = 64, 8, 32, 16
    prog = _Progress(n_single * 2 + n_batches * 2 + n_zero * 2)

    def timed(name: str, count: int, nbytes: int, fn: Callable[[], bool]) -> None:
        t0 = time.perf_counter()
        ok = fn()
        dt = time.perf_counter() - t0
        rows.append((name, count, nbytes, dt, ok))

    values = [_pattern(i, 1 * MiB) for i in range(n_single)]

    def copy_put() -> bool:
        ok = True
        for i, v in enumerate(values):
            ok &= store.put(f"demo/copy/{i}", v) == 0
            prog.step("put (copying, 1 MiB)")
        return ok

    def copy_get() -> bool:
        ok = True
        for i, v in enumerate(values):
            ok &= store.get(f"demo/copy/{i}") == v
            prog.step("get (copying, 1 MiB)")
        return ok

    timed("put        1 MiB", n_single, n_single * MiB, copy_put)
    timed("get        1 MiB", n_single, n_single * MiB, copy_get)

    small = [[_pattern(b * batch + j, 64 << 10) for j in range(batch)] for b in range(n_batches)]

    def batch_put() -> bool:
        ok = True
        for b in range(n_batches):
            keys = [f"demo/batch/{b}/{j}" for j in range(batch)]
            ok &= store.put_batch(keys, small[b]) == 0
            prog.step(f"put_batch ({batch} x 64 KiB)")
        return ok

    def batch_get() -> bool:
        ok = True
        for b in range(n_batches):
            keys = [f"demo/batch/{b}/{j}" for j in range(batch)]
            ok &= store.get_batch(keys) == small[b]
            prog.step(f"get_batch ({batch} x 64 KiB)")
        return ok

    timed(f"put_batch  {batch}x64 KiB", n_batches * batch, n_batches * batch * (64 << 10), batch_put)
    timed(f"get_batch  {batch}x64 KiB", n_batches * batch, n_batches * batch * (64 << 10), batch_get)

    size = 4 * MiB
    src = (ctypes.c_char * size).from_buffer_copy(_pattern(99, size))
    dst = (ctypes.c_char * size)()
    src_ptr, dst_ptr = ctypes.addressof(src), ctypes.addressof(dst)
    store.register_buffer(src_ptr, size)
    store.register_buffer(dst_ptr, size)

    def zc_put() -> bool:
        ok = True
        for i in range(n_zero):
            ok &= store.put_from(f"demo/zc/{i}", src_ptr, size) == 0
            prog.step("put_from (zero-copy, 4 MiB)")
        return ok

    def zc_get() -> bool:
        ok = True
        for i in range(n_zero):
            ctypes.memset(dst_ptr, 0, size)
            ok &= store.get_into(f"demo/zc/{i}", dst_ptr, size) == size and dst.raw == src.raw
            prog.step("get_into (zero-copy, 4 MiB)")
        return ok

    timed("put_from   4 MiB", n_zero, n_zero * size, zc_put)
    timed("get_into   4 MiB", n_zero, n_zero * size, zc_get)
    store.unregister_buffer(src_ptr)
    store.unregister_buffer(dst_ptr)
    return rows


def _run_ssd_tier() -> List[tuple]:
    """Four times a 32 MiB pool through a client with an SSD tier."""
    segment, obj, n = 32 * MiB, MiB, 128
    rows: List[tuple] = []
    master, storage = None, []
    store = MooncakeDistributedStore()
    with tempfile.TemporaryDirectory(prefix="gostore-demo-ssd-") as ssd:
        try:
            master = _start_master("--enable_offload", "--eviction_high_watermark_ratio=0.8",
                                   "--tick_interval_ms=20")
            storage = [_start_storage(master.rpc_addr, segment, ssd, {
                "MOONCAKE_OFFLOAD_HEARTBEAT_INTERVAL_SECONDS": "0.2",
                "MOONCAKE_OFFLOAD_LOCAL_BUFFER_SIZE_BYTES": str(64 * MiB),
            })]
            print(f"SSD tier: master --enable_offload, one client with a {segment // MiB} MiB segment "
                  f"and an SSD tier in {ssd}; writing {n * obj // MiB} MiB ...")
            if store.setup("127.0.0.1", "P2PHANDSHAKE", 0, 64 * MiB, "tcp", "", master.rpc_addr) != 0:
                raise RuntimeError("setup against the offload master failed")
            values = [_pattern(1000 + i, obj) for i in range(n)]
            t0 = time.perf_counter()
            for i, v in enumerate(values):
                while (rc := store.put(f"ssd/{i}", v)) != 0:
                    if rc != -200:  # the pool is full until the tier has the older objects
                        raise RuntimeError(f"put ssd/{i}: {rc}")
                    time.sleep(0.005)
            rows.append(("put 4x pool, SSD tier", n, n * obj, time.perf_counter() - t0, True))
            t0 = time.perf_counter()
            got = [store.get(f"ssd/{i}") for i in range(n)]
            dt = time.perf_counter() - t0
            rows.append(("get from memory + SSD", n, n * obj, dt, got == values))
        finally:
            store.close()
            _stop(storage, master)
    return rows


def _print_table(rows: List[tuple]) -> None:
    print()
    print(f"{'operation':<24}{'objects':>9}{'MiB':>9}{'ms':>10}{'GB/s':>8}{'ops/s':>10}  verified")
    print("-" * 80)
    for name, count, nbytes, dt, ok in rows:
        print(f"{name:<24}{count:>9}{nbytes / MiB:>9.0f}{dt * 1e3:>10.1f}{nbytes / dt / 1e9:>8.2f}"
              f"{count / dt:>10.0f}  {'yes' if ok else 'NO'}")
    print("(timings include verification on gets; `make bench` measures properly)")


def main(argv: Optional[List[str]] = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--storage", metavar="MASTER", help=argparse.SUPPRESS)
    ap.add_argument("--segment", type=int, default=256 * MiB, help=argparse.SUPPRESS)
    ap.add_argument("--ssd", help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    if args.storage:
        return storage_main(args.storage, args.segment, args.ssd)

    master, storage = None, []
    store = MooncakeDistributedStore()
    try:
        print("starting gostore-master and two storage clients on loopback ...")
        master = _start_master()
        storage = [_start_storage(master.rpc_addr, 256 * MiB) for _ in range(2)]
        print(f"master rpc={master.rpc_addr} http={master.http_addr}; "
              f"storage clients {', '.join(p.hostname for p in storage)}")
        # This process contributes no memory: every byte crosses to a peer.
        rc = store.setup("127.0.0.1", "P2PHANDSHAKE", 0, 64 * MiB, "tcp", "", master.rpc_addr)
        if rc != 0:
            print(f"setup failed: {rc}")
            return 1
        rows = _run_workload(store)
    finally:
        store.close()
        _stop(storage, master)
    rows += _run_ssd_tier()
    _print_table(rows)
    ok = all(r[4] for r in rows)
    leftovers = [p for p in storage + ([master] if master else []) if p.poll() is None]
    shm = [f for f in os.listdir("/dev/shm") if "gostore" in f] if os.path.isdir("/dev/shm") else []
    print(f"stopped: {len(storage) + 1} processes, {len(leftovers)} still running, "
          f"{len(shm)} shared-memory files left (segments are memfds the kernel frees)")
    return 0 if ok and not leftovers and not shm else 1


if __name__ == "__main__":
    sys.exit(main())
