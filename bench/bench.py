#!/usr/bin/env python3
"""gostore benchmark: put/get throughput and latency against the physical limits.

What runs (per transport pass, each in a fresh child process of this script):

* the real ``gostore-master`` executable,
* one *storage peer* process (this script with ``--peer``) that contributes
  the only memory segment of the cluster,
* the *worker* (this script with ``--worker``): the client under test. It sets
  up with ``global_segment_size=0``, so every byte it puts or gets crosses to
  the peer -- over shared memory (``shm``, the default between processes of
  one host) or over loopback TCP (``GOSTORE_TRANSPORT=tcp`` in the peer's and
  the worker's environment; the engine reads it when the Go runtime starts,
  hence one process per pass),
* in the ``standalone`` pass, a ``gostore-client`` process between them: the
  worker calls ``setup_dummy`` and its arenas come from
  ``alloc_from_mem_pool``; the client reaches the peer over shared memory,
  so the rows compare with the shm rows (same cells, one more hop).

Matrix: {put, get} x {copying API, zero-copy API} x {single call, batch of 32}
x {4 KiB, 1 MiB, 16 MiB} x {shm, tcp, standalone}. For every cell: GB/s, keys/s,
p50/p99 latency per call (a batch call is one call), the physical limit
measured in the same run (Go memcpy for shm and standalone rows, one raw loopback TCP stream
for tcp rows, both at the cell's value size) and the ratio to it, the number
of failed keys, and the share of the machine other processes used meanwhile
(the machine may be shared). References printed beside the limits: a cold
libc memcpy and a loopback ping-pong RTT between two Python processes (an
echo child, ``--echo``). Only the API call itself is timed; key lists,
pointer lists, stamping and verification happen outside the timed region.

Honesty rules: every put writes fresh keys (a re-put of an existing key returns
0 without writing); the segment is emptied with ``remove_all(force=True)``
(untimed) before it could fill; every non-zero return code is counted and
printed; gets read keys written before and a sample of every value read (its
per-put stamp and three windows of its pattern) is verified after the call.

The Mooncake column: when Mooncake's wheel is there (``make bench-peers`` puts
it in ``.venv-peers/mooncake-wheel``, or GOSTORE_BENCH_MOONCAKE_WHEEL names a
``pip install --target`` of it; the same discovery as bench/engines.py), the
tcp pass is followed by the same cells on Mooncake: its own ``mooncake_master``,
a storage peer and a worker that are this script again (``--store mooncake``)
with the wheel first on PYTHONPATH, so that ``mooncake.store`` is the real
one and the timed loops, stamps and checks are the very code gostore's cells
run. Mooncake's wheel moves bytes between processes over TCP here (no RDMA),
so its cells are set beside gostore's tcp rows ("gostore vs Mooncake").

The script prints; it never fails on a number (exit 1 only when it could not
run at all). ``--json PATH`` writes every cell, the limits, the targets and
the machine. ``--quick`` is a ~30 s smoke run.
"""

from __future__ import annotations

import argparse
import ctypes
import datetime as _dt
import json
import mmap
import os
import platform
import signal
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from typing import Any, Callable, Dict, List, Optional, Set, Tuple

import mooncake_wheel as mooncake_wheel_mod  # bench/ is this script's directory

KiB = 1 << 10
MiB = 1 << 20
GiB = 1 << 30

SIZES = [4 * KiB, 1 * MiB, 16 * MiB]
BATCH = 32
BATCHES = [1, BATCH]
TRANSPORTS = ["shm", "tcp", "standalone"]
APIS = ["copy", "zero_copy"]

# Method names per (op, api, batched).
METHOD = {
    ("put", "copy", False): "put",
    ("put", "copy", True): "put_batch",
    ("put", "zero_copy", False): "put_from",
    ("put", "zero_copy", True): "batch_put_from",
    ("get", "copy", False): "get",
    ("get", "copy", True): "get_batch",
    ("get", "zero_copy", False): "get_into",
    ("get", "zero_copy", True): "batch_get_into",
    # get_into of keys another client wrote, each read once: no spot of
    # this client's own write or earlier read (gostore tcp pass only).
    ("get", "other_client", False): "get_into_other",
    ("get", "buffer", True): "batch_get_buffer",  # a get cell only, on get_batch's keys
    ("get", "tensor", True): "batch_get_tensor",  # and the tensor reads, on tensors of their own
    ("get", "tensor_into", True): "batch_get_tensor_into",
}

# Room for a tensor object's header in each destination slot of
# batch_get_tensor_into (gostore's headers and Mooncake's are a few hundred
# bytes).
TENSOR_ROOM = 4 * KiB

# Value pattern: byte at arena offset a is PAT[a % PERIOD]; a prime period so
# that a value read from the wrong offset does not match by accident. The
# first STAMP bytes of every value are overwritten by a per-put unique stamp.
PERIOD = 4093
PAT = bytes((i * 131 + (i >> 8) * 17 + 7) & 0xFF for i in range(PERIOD))
PATD = PAT + PAT
STAMP = 8
WIN = 16  # verified window length

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)

STORES = ["gostore", "mooncake"]
# The worker's local_buffer_size. gostore's copying calls do not need theirs
# to hold a batch. Mooncake's copying calls stage every value in its local
# buffer, and its get_batch returns empty values for whatever does not fit
# (counted as errors): 1 GiB holds a batch of 32 x 16 MiB (512 MiB) with room.
LOCAL_BUFFER = {"gostore": 64 * MiB, "mooncake": 1 * GiB}


def log(msg: str) -> None:
    sys.stderr.write(msg + "\n")
    sys.stderr.flush()


def fmt_size(n: int) -> str:
    if n >= MiB and n % MiB == 0:
        return f"{n // MiB} MiB"
    if n >= KiB and n % KiB == 0:
        return f"{n // KiB} KiB"
    return f"{n} B"


def pct(sorted_vals: List[float], q: float) -> float:
    """Nearest-rank percentile of an ascending list."""
    if not sorted_vals:
        return float("nan")
    k = max(0, min(len(sorted_vals) - 1, int(round(q / 100.0 * len(sorted_vals) + 0.5)) - 1))
    return sorted_vals[k]


# --------------------------------------------------------------------------
# machine description


def machine_info() -> Dict[str, Any]:
    model = ""
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    model = line.split(":", 1)[1].strip()
                    break
    except OSError:
        pass
    mem_total = None
    try:
        with open("/proc/meminfo") as f:
            for line in f:
                if line.startswith("MemTotal:"):
                    mem_total = int(line.split()[1]) * 1024
                    break
    except OSError:
        pass
    try:
        affinity = len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        affinity = None
    commit = None
    try:
        root = os.path.dirname(HERE)
        commit = subprocess.run(
            ["git", "-C", root, "rev-parse", "HEAD"], capture_output=True, text=True, timeout=5
        ).stdout.strip() or None
        if commit:
            dirty = subprocess.run(
                ["git", "-C", root, "status", "--porcelain", "--untracked-files=no"],
                capture_output=True, text=True, timeout=5,
            ).stdout.strip()
            if dirty:
                commit += "+dirty"
    except (OSError, subprocess.SubprocessError):
        pass
    return {
        "nproc": os.cpu_count(),
        "nproc_affinity": affinity,
        "cpu_model": model,
        "kernel": platform.release(),
        "kernel_version": platform.version(),
        "mem_total_bytes": mem_total,
        "python": sys.version.split()[0],
        "git_commit": commit,
    }


# --------------------------------------------------------------------------
# child processes


def _pdeathsig() -> None:
    """preexec_fn: die with SIGTERM when the process that started us dies.

    Runs in the forked child before exec; the parent has not loaded the Go
    runtime yet when it starts children (see Worker.run).
    """
    try:
        libc = ctypes.CDLL(None)
        libc.prctl(1, signal.SIGTERM)  # PR_SET_PDEATHSIG
    except Exception:
        pass


def _readline_timeout(proc: subprocess.Popen, timeout: float) -> str:
    out: List[str] = []

    def rd() -> None:
        try:
            out.append(proc.stdout.readline() if proc.stdout else "")
        except Exception:
            out.append("")

    t = threading.Thread(target=rd, daemon=True)
    t.start()
    t.join(timeout)
    return out[0] if out else ""


def mooncake_wheel() -> Optional[str]:
    """Mooncake's unpacked wheel, or None (bench/mooncake_wheel.py)."""
    return mooncake_wheel_mod.wheel_dir()


def mooncake_version(wheel: str) -> str:
    """The wheel's version from its dist-info directory (no import needed)."""
    for name in sorted(os.listdir(wheel)):
        if name.startswith("mooncake_transfer_engine") and name.endswith(".dist-info"):
            return name[:-len(".dist-info")].rsplit("-", 1)[-1]
    return "unknown"


def child_env(transport: str, store: str = "gostore") -> Dict[str, str]:
    env = dict(os.environ, GOSTORE_LOG_LEVEL="warn")
    if transport == "tcp" and store == "gostore":
        env["GOSTORE_TRANSPORT"] = "tcp"
    else:
        env.pop("GOSTORE_TRANSPORT", None)
    if store == "mooncake":
        wheel = mooncake_wheel()
        if wheel is None:
            raise RuntimeError("Mooncake's wheel is not there (make bench-peers)")
        # The wheel first on the path: ``mooncake.store`` is the real one. The
        # alias hook would make it gostore's, so it must stay off.
        path = [p for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p and p != wheel]
        env["PYTHONPATH"] = os.pathsep.join([wheel] + path)
        env["GOSTORE_BENCH_MOONCAKE_WHEEL"] = wheel
        env.pop("GOSTORE_AS_MOONCAKE", None)
        # Mooncake's INFO lines (a dozen per setup) would bury the progress
        # lines; warnings and errors still show.
        env.setdefault("MC_LOG_LEVEL", "WARNING")
    return env


def start_master(transport: str) -> subprocess.Popen:
    from gostore import master_binary_path  # pure Python: does not load the library

    binary = master_binary_path()
    if not os.path.exists(binary):
        raise RuntimeError(f"gostore-master not found at {binary} (set GOSTORE_MASTER_BIN)")
    proc = subprocess.Popen(
        # GOSTORE_BENCH_MASTER_FLAGS: extra master flags, say a state
        # directory to measure the journal's cost on the same cells.
        [binary, "--rpc_address=127.0.0.1", "--rpc_port=0", "--metrics_port=0", "--log_level=warn",
         *os.environ.get("GOSTORE_BENCH_MASTER_FLAGS", "").split()],
        stdout=subprocess.PIPE, stdin=subprocess.DEVNULL, text=True,
        env=child_env(transport), preexec_fn=_pdeathsig,
    )
    line = _readline_timeout(proc, 30)
    if "rpc=" not in line:
        kill(proc)
        raise RuntimeError(f"gostore-master did not start: {line!r}")
    fields = dict(f.split("=", 1) for f in line.split() if "=" in f)
    proc.rpc_addr = fields["rpc"]  # type: ignore[attr-defined]
    return proc


def start_mooncake_master() -> subprocess.Popen:
    """Mooncake's own ``mooncake_master`` (bench/mooncake_wheel.py), its
    log kept only when the pass fails."""
    wheel = mooncake_wheel()
    assert wheel is not None
    proc, addr, log_path = mooncake_wheel_mod.start_master(wheel, child_env("tcp", "mooncake"), preexec_fn=_pdeathsig)
    proc.rpc_addr = addr  # type: ignore[attr-defined]
    proc.log_path = log_path  # type: ignore[attr-defined]
    return proc


def start_peer(master: str, segment: int, transport: str, store: str = "gostore") -> subprocess.Popen:
    proc = subprocess.Popen(
        [sys.executable, os.path.abspath(__file__), "--peer", master, "--segment", str(segment),
         "--store", store],
        stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True,
        env=child_env(transport, store), preexec_fn=_pdeathsig,
    )
    line = _readline_timeout(proc, 60)
    if not line.startswith("ready"):
        kill(proc)
        raise RuntimeError(f"{store} storage peer did not start: {line!r}")
    proc.hostname = line.split()[1]  # type: ignore[attr-defined]
    return proc


def start_client_process(master: str) -> subprocess.Popen:
    """A ``gostore-client`` (standalone mode) with no segment of its own."""
    ipc = os.path.join(tempfile.mkdtemp(prefix="gostore-bench-"), "client.sock")
    proc = subprocess.Popen(
        [sys.executable, "-m", "gostore.client_server", "--host=127.0.0.1", "--port=0",
         f"--master_server_address={master}", "--global_segment_size=0", "--local_buffer_size=64MB",
         "--metadata_server=P2PHANDSHAKE", f"--ipc_socket_path={ipc}", "--log_level=warn"],
        stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, text=True,
        env=child_env("shm"), preexec_fn=_pdeathsig,
    )
    line = _readline_timeout(proc, 60)
    if '"ready"' not in line:
        kill(proc)
        raise RuntimeError(f"gostore-client did not start: {line!r}")
    proc.server_address = f"127.0.0.1:{json.loads(line)['port']}"  # type: ignore[attr-defined]
    return proc


def kill(proc: Optional[subprocess.Popen], grace: float = 5.0) -> None:
    """Stop one process we started: close its stdin, SIGTERM, then SIGKILL."""
    if proc is None:
        return
    try:
        if proc.stdin and not proc.stdin.closed:
            proc.stdin.close()
    except OSError:
        pass
    if proc.poll() is None:
        try:
            proc.wait(timeout=grace if proc.stdin else 0.01)
        except subprocess.TimeoutExpired:
            pass
    if proc.poll() is None:
        proc.terminate()
        try:
            proc.wait(timeout=grace)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
    try:
        if proc.stdout:
            proc.stdout.close()
    except OSError:
        pass


def peer_main(master: str, segment: int, store: str) -> int:
    """Peer role: contribute the cluster's only segment until stdin closes.
    gostore's is the demo's storage client; Mooncake's does the same on the
    wheel (same protocol on stdout: ``ready HOST:PORT`` or ``error CODE``)."""
    from gostore.demo import storage_main

    if store == "gostore":
        return storage_main(master, segment)
    from mooncake.store import MooncakeDistributedStore as MooncakeStore

    return storage_main(master, segment, store_class=MooncakeStore)


# --------------------------------------------------------------------------
# background load and round-trip reference


def _proc_cpu_ticks(pid: int) -> int:
    try:
        with open(f"/proc/{pid}/stat") as f:
            fields = f.read().rsplit(")", 1)[1].split()
        return int(fields[11]) + int(fields[12])  # utime + stime, all threads
    except (OSError, IndexError, ValueError):
        return 0


def _machine_ticks() -> Tuple[int, int]:
    """(busy, total) jiffies over all CPUs from /proc/stat."""
    try:
        with open("/proc/stat") as f:
            v = [int(x) for x in f.readline().split()[1:]]
    except (OSError, ValueError):
        return 0, 0
    total = sum(v[:8])  # user nice system idle iowait irq softirq steal
    return total - v[3] - v[4], total


class CpuMon:
    """How much of the machine other processes used while we measured.

    busy(all CPUs) - CPU time of our own processes (worker, master, peer),
    as a fraction of all CPU time in the interval. The machine may be shared;
    a high value means the numbers of that interval are disturbed.
    """

    def __init__(self, pids: List[int]) -> None:
        self.pids = pids
        self.snap()

    def snap(self) -> None:
        self.busy, self.total = _machine_ticks()
        self.ours = sum(_proc_cpu_ticks(p) for p in self.pids)

    def foreign(self) -> Dict[str, float]:
        busy, total = _machine_ticks()
        ours = sum(_proc_cpu_ticks(p) for p in self.pids)
        dt = max(1, total - self.total)
        out = {
            "machine_busy": (busy - self.busy) / dt,
            "ours": (ours - self.ours) / dt,
            "foreign": max(0.0, (busy - self.busy) - (ours - self.ours)) / dt,
        }
        self.busy, self.total, self.ours = busy, total, ours
        return out


def echo_main() -> int:
    """Echo role: answer every message on a loopback socket (RTT reference)."""
    import socket

    srv = socket.socket()
    srv.bind(("127.0.0.1", 0))
    srv.listen(1)
    print(srv.getsockname()[1], flush=True)
    c, _ = srv.accept()
    c.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    while True:
        d = c.recv(256)
        if not d:
            return 0
        c.sendall(d)


class Echo:
    """A loopback ping-pong between this process and an echo child: the
    round trip of two processes on this machine, without gostore (Python
    sockets, 32-byte messages)."""

    def __init__(self) -> None:
        import socket

        self.proc = subprocess.Popen(
            [sys.executable, os.path.abspath(__file__), "--echo"], stdout=subprocess.PIPE,
            stdin=subprocess.DEVNULL, text=True, preexec_fn=_pdeathsig,
        )
        port = int(_readline_timeout(self.proc, 30) or 0)
        self.sock = socket.create_connection(("127.0.0.1", port), timeout=10)
        self.sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)

    def rtt(self, n: int) -> Dict[str, float]:
        lat = []
        msg = b"x" * 32
        for _ in range(n):
            t0 = time.perf_counter_ns()
            self.sock.sendall(msg)
            got = 0
            while got < len(msg):
                got += len(self.sock.recv(256))
            lat.append(time.perf_counter_ns() - t0)
        lat.sort()
        return {"p50_us": pct(lat, 50) / 1e3, "p99_us": pct(lat, 99) / 1e3, "n": n}

    def close(self) -> None:
        try:
            self.sock.close()
        except OSError:
            pass
        kill(self.proc)


def tcp_sockets() -> List[List[str]]:
    """The rows of /proc/net/tcp and tcp6, each split into its fields:
    [1] local and [2] remote address (hex ``IP:PORT``), [3] the state
    (01 ESTABLISHED, 0A LISTEN), [9] the inode."""
    rows: List[List[str]] = []
    for name in ("/proc/net/tcp", "/proc/net/tcp6"):
        try:
            with open(name) as f:
                next(f)
                rows.extend(line.split() for line in f)
        except OSError:
            pass
    return rows


def hex_port(addr: str) -> int:
    return int(addr.split(":")[1], 16)


def listening_ports(pid: int) -> Set[int]:
    """The TCP ports process pid listens on (its socket inodes in /proc/net)."""
    inodes: Set[str] = set()
    try:
        for fd in os.listdir(f"/proc/{pid}/fd"):
            try:
                target = os.readlink(f"/proc/{pid}/fd/{fd}")
            except OSError:
                continue
            if target.startswith("socket:["):
                inodes.add(target[8:-1])
    except OSError:
        return set()
    return {hex_port(r[1]) for r in tcp_sockets() if r[3] == "0A" and r[9] in inodes}


# --------------------------------------------------------------------------
# memory arenas


class Arena:
    """Page-aligned memory, faulted in, optionally filled with PAT: anonymous,
    or (``at``) memory the caller got elsewhere (standalone mode's pool)."""

    def __init__(self, size: int, fill: bool, at: int = 0) -> None:
        self.size = size
        if at:
            self.mm = (ctypes.c_char * size).from_address(at)
            self.addr = at
        else:
            self.mm = mmap.mmap(-1, size, flags=mmap.MAP_PRIVATE | mmap.MAP_ANONYMOUS)
            self._c = ctypes.c_char.from_buffer(self.mm)
            self.addr = ctypes.addressof(self._c)
        if fill:
            n = min(PERIOD, size)
            ctypes.memmove(self.addr, PAT, n)
            while n < size:  # doubling keeps the period: n is a multiple of PERIOD
                k = min(n, size - n)
                ctypes.memmove(self.addr + n, self.addr, k)
                n += k
        else:
            ctypes.memset(self.addr, 0, size)
        self.view = memoryview(self.mm)  # lives as long as the process


def expected(base: int, off: int, n: int) -> bytes:
    s = (base + off) % PERIOD
    return PATD[s:s + n]


def windows(size: int) -> List[int]:
    """Offsets (past the stamp) of the verified windows of a value."""
    return sorted({STAMP, max(STAMP, size // 2 - WIN // 2), max(STAMP, size - WIN)})


# --------------------------------------------------------------------------
# the worker: one transport pass


class Cell:
    def __init__(self, store: str, transport: str, op: str, api: str, batch: int, size: int) -> None:
        self.store = store
        self.transport, self.op, self.api, self.batch, self.size = transport, op, api, batch, size
        self.method = METHOD[(op, api, batch > 1)]
        self.lat_ns: List[int] = []
        self.first_ns: List[int] = []  # the warm-up calls' times (gets), not in the figures
        self.keys = 0
        self.errors = 0  # failed keys
        self.codes: Dict[str, int] = {}
        self.verified = 0  # keys whose sample was checked
        self.verify_failures = 0
        self.segment_resets = 0
        self.notes: List[str] = []
        self.load: Dict[str, float] = {}

    def record_get(self, dt: int, bad_codes: List[Any], verify_failures: int, warm_up: bool) -> None:
        """One get call of the cell: ``dt`` ns, the codes of its keys that
        failed, and how many of the others read wrong bytes. A warm-up
        call's time is kept apart (first_ns) and its failures noted."""
        if warm_up:
            self.first_ns.append(dt)
            if bad_codes or verify_failures:
                self.notes.append(f"warm-up get failed: codes {bad_codes[:3]}, {verify_failures} verify failures")
            return
        self.lat_ns.append(dt)
        self.keys += self.batch
        self.verified += self.batch - len(bad_codes)
        self.verify_failures += verify_failures
        for c in bad_codes:
            self.code(c)

    def code(self, c: Any, n: int = 1) -> None:
        self.errors += n
        k = str(c)
        self.codes[k] = self.codes.get(k, 0) + n

    def result(self, limit_name: str, limit_gbps: float) -> Dict[str, Any]:
        lat = sorted(self.lat_ns)
        total_s = sum(lat) / 1e9
        calls = len(lat)
        nbytes = self.keys * self.size
        ok_keys = self.keys - self.errors - self.verify_failures
        gbps = (ok_keys * self.size) / total_s / 1e9 if total_s > 0 else 0.0
        kps = ok_keys / total_s if total_s > 0 else 0.0
        p50 = pct(lat, 50) / 1e3 if lat else float("nan")
        p99 = pct(lat, 99) / 1e3 if lat else float("nan")
        return {
            "store": self.store,
            "transport": self.transport,
            "op": self.op,
            "api": self.api,
            "method": self.method,
            "batch": self.batch,
            "size": self.size,
            "calls": calls,
            "keys": self.keys,
            "bytes": nbytes,
            "timed_s": total_s,
            "gbps": gbps,
            "keys_per_s": kps,
            "calls_per_s": calls / total_s if total_s > 0 else 0.0,
            "p50_us": p50,
            "p99_us": p99,
            "mean_us": (total_s / calls * 1e6) if calls else float("nan"),
            "min_us": lat[0] / 1e3 if lat else float("nan"),
            "max_us": lat[-1] / 1e3 if lat else float("nan"),
            "p50_us_per_key": p50 / self.batch,
            "first_calls_ms": [t / 1e6 for t in self.first_ns],
            "limit": limit_name,
            "limit_gbps": limit_gbps,
            "pct_of_limit": (100.0 * gbps / limit_gbps) if limit_gbps > 0 else None,
            "errors": self.errors,
            "error_codes": self.codes,
            "verified_keys": self.verified,
            "verify_failures": self.verify_failures,
            "segment_resets": self.segment_resets,
            "background_cpu": self.load.get("foreign"),
            "load": self.load,
            "notes": self.notes,
        }


class Budget:
    """Iteration/time bounds of one timed loop: at least min_calls timed
    calls, then stop at max calls (cell_bytes moved) or when the cell's wall
    clock budget (untimed work included) is spent, whichever comes first."""

    def __init__(self, quick: bool) -> None:
        self.quick = quick
        self.cell_s = 0.25 if quick else 2.0
        self.cell_bytes = (256 * MiB) if quick else (6 * GiB)
        self.max_calls = 400 if quick else 20000

    def min_calls(self, size: int, batch: int) -> int:
        huge = size * batch >= 256 * MiB  # 32 x 16 MiB: up to seconds per call
        if self.quick:
            return 1 if huge else 2
        return 3 if huge else 5

    def calls(self, size: int, batch: int) -> int:
        return max(self.min_calls(size, batch), min(self.max_calls, self.cell_bytes // (size * batch)))


class Worker:
    def __init__(self, transport: str, quick: bool, segment: int, store: str = "gostore") -> None:
        self.store_kind = store  # whose MooncakeDistributedStore, master and peer: gostore or mooncake
        self.transport = transport
        self.quick = quick
        self.segment = segment
        self.budget = Budget(quick)
        # The segment is emptied before it would pass this many bytes: well
        # below the master's eviction high watermark (0.90).
        self.cap = int(segment * 0.6)
        self.used = 0
        self.store: Any = None
        self.other: Any = None  # a second client of the tcp pass: reads what the worker's client wrote
        self.src: Optional[Arena] = None
        self.dst: Optional[Arena] = None
        self.stamp = 0
        self.run_id = f"{os.getpid():x}{int(time.time()) & 0xFFFF:x}"
        self.limits: Dict[str, Dict[str, Any]] = {"memcpy": {}, "tcp_stream": {}}
        self.info: Dict[str, Any] = {}
        self.data_pid = os.getpid()  # the process whose engine moves the bytes

    # ---- helpers ----------------------------------------------------------

    def reset_segment(self) -> None:
        n = self.store.remove_all(True)
        if n < 0:
            log(f"  remove_all(force=True) returned {n}")
        self.used = 0

    def next_stamp(self) -> bytes:
        self.stamp += 1
        # Unique per put in this run (the run id keeps passes apart too).
        return (self.stamp | (os.getpid() << 40)).to_bytes(8, "little")

    def measure_limits(self) -> None:
        from gostore import _native

        reps = 3
        for size in SIZES:
            it_mem = max(8, min(200000, (256 * MiB if self.quick else GiB) // size))
            it_tcp = max(8, min(50000, (128 * MiB if self.quick else 768 * MiB) // size))
            try:
                mem = [_native.bench_memcpy(size, it_mem) for _ in range(reps)]
            except (NotImplementedError, AttributeError) as e:  # an old library
                log(f"  memcpy probe unavailable: {e}")
                mem = [0.0]
            try:
                tcp = [_native.bench_tcp_stream(size, it_tcp) for _ in range(reps)]
            except (NotImplementedError, AttributeError) as e:
                log(f"  tcp stream probe unavailable: {e}")
                tcp = [0.0]
            self.limits["memcpy"][str(size)] = {"gbps": max(mem), "samples": mem, "iters": it_mem}
            self.limits["tcp_stream"][str(size)] = {"gbps": max(tcp), "samples": tcp, "iters": it_tcp}
            log(f"  [{self.transport}] limits {fmt_size(size):>7}: memcpy {max(mem):7.2f} GB/s, "
                f"tcp stream {max(tcp):6.2f} GB/s")

    def measure_cold_memcpy(self) -> None:
        """Reference only: libc memcpy (ctypes.memmove) of size bytes from
        rotating slots of the 512 MiB source arena into rotating slots of the
        destination arena, so the data is not cache-hot like in the Go probe
        (which copies the same two buffers again and again). Sizes >= 1 MiB;
        at 4 KiB the ctypes call would dominate."""
        assert self.src is not None and self.dst is not None
        out: Dict[str, Any] = {}
        for size in SIZES:
            if size < MiB:
                continue
            slots = self.src.size // size
            n = max(8, min(256, (GiB if not self.quick else 256 * MiB) // size))
            best = 0.0
            for _ in range(3):
                t0 = time.perf_counter()
                for i in range(n):
                    k = (i * 7) % slots
                    ctypes.memmove(self.dst.addr + ((i * 13) % slots) * size, self.src.addr + k * size, size)
                best = max(best, n * size / (time.perf_counter() - t0) / 1e9)
            out[str(size)] = {"gbps": best, "iters": n}
        self.limits["memcpy_cold_libc"] = out
        ctypes.memset(self.dst.addr, 0, self.dst.size)

    def measure_fresh_memory(self) -> None:
        """Reference only: how fast this process writes memory it has never
        touched (a new anonymous mapping, written once with memset), the
        page faults included: what a copying read's first calls pay for
        the objects they return."""
        n = (128 if self.quick else 512) * MiB
        samples = []
        for _ in range(3):
            m = mmap.mmap(-1, n)
            view = (ctypes.c_char * n).from_buffer(m)
            t0 = time.perf_counter()
            ctypes.memset(ctypes.addressof(view), 1, n)
            samples.append(n / (time.perf_counter() - t0) / 1e9)
            del view
            m.close()
        self.limits["fresh_memory"] = {"gbps": max(samples), "samples": samples, "bytes": n}

    def measure_cross_memory(self) -> None:
        """Reference only (standalone pass): the copy gostore-client makes
        into an application's own memory, process_vm_writev, here from one
        buffer of this process into another (the same kernel path: it pins
        the destination's pages a few at a time), one thread per core as
        the server's library does. What copying reads in standalone mode
        are bound by, where zero-copy ones are bound by memcpy."""
        libc = ctypes.CDLL(None, use_errno=True)
        pvm = libc.process_vm_writev
        pvm.restype = ctypes.c_ssize_t
        pvm.argtypes = [ctypes.c_int, ctypes.c_void_p, ctypes.c_ulong, ctypes.c_void_p, ctypes.c_ulong,
                        ctypes.c_ulong]

        class Iovec(ctypes.Structure):
            _fields_ = [("base", ctypes.c_void_p), ("len", ctypes.c_size_t)]

        span = 64 * MiB
        bufs = [mmap.mmap(-1, span) for _ in range(2)]
        views = [(ctypes.c_char * span).from_buffer(b) for b in bufs]
        src, dst = (ctypes.addressof(v) for v in views)
        ctypes.memset(src, 1, span)
        ctypes.memset(dst, 2, span)
        pid, workers = os.getpid(), max(1, os.cpu_count() or 1)
        failed: List[int] = []

        def copy(offs: List[int], size: int) -> None:
            for off in offs:
                local, remote = Iovec(src + off, size), Iovec(dst + off, size)
                if pvm(pid, ctypes.byref(local), 1, ctypes.byref(remote), 1, 0) != size:
                    failed.append(ctypes.get_errno())
                    return

        out: Dict[str, Any] = {}
        for size in SIZES:
            if size < MiB:
                continue
            rounds = max(1, (128 if self.quick else 512) * MiB // span)
            offs = list(range(0, span, size))
            best = 0.0
            for _ in range(3):
                t0 = time.perf_counter()
                for _r in range(rounds):
                    ts = [threading.Thread(target=copy, args=(offs[w::workers], size)) for w in range(workers)]
                    for t in ts:
                        t.start()
                    for t in ts:
                        t.join()
                best = max(best, rounds * span / (time.perf_counter() - t0) / 1e9)
            out[str(size)] = {"gbps": best, "threads": workers}
        del views
        for b in bufs:
            b.close()
        if failed:
            log(f"  cross-memory probe failed (errno {failed[0]}): not measured")
            return
        self.limits["cross_memory"] = out

    def limit_for(self, size: int) -> Tuple[str, float]:
        """The cell's limit; 0 when this pass measured none (Mooncake's pass:
        the parent fills in the tcp pass's figures)."""
        name = "tcp_stream" if self.transport == "tcp" else "memcpy"
        return name, self.limits[name].get(str(size), {}).get("gbps", 0.0)

    def wait_prefault(self) -> float:
        """The engine maps a same-host peer segment on first use and faults
        its pages in from a background goroutine. Wait (untimed) until this
        process's shared RSS stops growing so that the prefault neither
        competes with the measured calls for CPU nor leaves faults to them.
        In the standalone pass that process is the gostore-client."""
        if self.transport == "tcp":
            return 0.0
        status = f"/proc/{self.data_pid}/status"

        def rss_shmem() -> int:
            try:
                with open(status) as f:
                    for line in f:
                        if line.startswith("RssShmem:"):
                            return int(line.split()[1]) * 1024
            except OSError:
                pass
            return -1

        t0 = time.perf_counter()
        last, stable_since = rss_shmem(), time.perf_counter()
        while time.perf_counter() - t0 < 30:
            time.sleep(0.05)
            cur = rss_shmem()
            if cur < 0 or cur >= self.segment * 0.98:
                break
            if cur != last:
                last, stable_since = cur, time.perf_counter()
            elif time.perf_counter() - stable_since > 0.5:
                break
        return time.perf_counter() - t0

    def check_path(self, peer_host: str, peer_pid: int) -> Dict[str, Any]:
        """Which path the data actually took: TCP connections to the peer's
        transfer port, and whether a memfd segment is mapped here. Mooncake's
        peer moves bytes on a port of its own, not the one in its hostname
        (the handshake's), so there every port the peer listens on counts."""
        ports = {int(peer_host.rsplit(":", 1)[1])}
        if self.store_kind == "mooncake":
            ports |= listening_ports(peer_pid)
        conns = sum(1 for r in tcp_sockets() if r[3] == "01" and hex_port(r[2]) in ports)
        memfd = False
        try:
            with open(f"/proc/{self.data_pid}/maps") as f:
                memfd = any("memfd:gostore" in line for line in f)
        except OSError:
            pass
        return {"tcp_conns_to_peer": conns, "peer_memfd_mapped": memfd}

    # ---- one cell ----------------------------------------------------------

    def run_put(self, api: str, batch: int, size: int) -> Tuple[Cell, List[List[Tuple[str, int, bytes]]]]:
        """Timed puts with fresh keys. Returns the cell and the groups of
        (key, slot, stamp) still stored afterwards (for the get cell)."""
        cell = Cell(self.store_kind, self.transport, "put", api, batch, size)
        st, src = self.store, self.src
        assert src is not None
        prefix = f"{self.run_id}/{self.transport[0]}/{api[0]}{batch}/{size}/"
        slots = list(range(batch))
        ptrs = [src.addr + j * size for j in slots]
        sizes = [size] * batch
        views = [src.view[j * size:(j + 1) * size] for j in slots]
        call_bytes = size * batch
        live: List[List[Tuple[str, int, bytes]]] = []
        max_calls = self.budget.calls(size, batch)
        min_calls = self.budget.min_calls(size, batch)
        t_end = time.perf_counter() + self.budget.cell_s
        it = -1  # -1: warm-up call, not recorded
        while True:
            if it >= 0 and (it >= max_calls or (time.perf_counter() >= t_end and it >= min_calls)):
                break
            if self.used + call_bytes > self.cap:
                self.reset_segment()
                live.clear()
                if it >= 0:
                    cell.segment_resets += 1
            keys = [f"{prefix}{it + 1}/{j}" for j in slots]
            stamps = [self.next_stamp() for _ in slots]
            for j in slots:
                ctypes.memmove(ptrs[j], stamps[j], STAMP)
            fail: Optional[List[Any]] = None
            if api == "copy":
                if batch == 1:
                    t0 = time.perf_counter_ns()
                    rc = st.put(keys[0], views[0])
                    dt = time.perf_counter_ns() - t0
                    fail = [rc] if rc != 0 else []
                else:
                    t0 = time.perf_counter_ns()
                    rc = st.put_batch(keys, views)
                    dt = time.perf_counter_ns() - t0
                    # put_batch reports only the first error: count the batch.
                    fail = [rc] * batch if rc != 0 else []
            else:
                if batch == 1:
                    t0 = time.perf_counter_ns()
                    rc = st.put_from(keys[0], ptrs[0], size)
                    dt = time.perf_counter_ns() - t0
                    fail = [rc] if rc != 0 else []
                else:
                    t0 = time.perf_counter_ns()
                    rcs = st.batch_put_from(keys, ptrs, sizes)
                    dt = time.perf_counter_ns() - t0
                    fail = [r for r in rcs if r != 0]
            for j in slots:  # restore the pattern under the stamps (later cells use other slots)
                ctypes.memmove(ptrs[j], expected(j * size, 0, STAMP), STAMP)
            self.used += call_bytes
            if it >= 0:
                cell.lat_ns.append(dt)
                cell.keys += batch
                for c in fail:
                    cell.code(c)
            elif fail:
                cell.notes.append(f"warm-up put failed: {fail[:3]}")
            if not fail:
                live.append([(keys[j], j, stamps[j]) for j in slots])
            elif any(c == -200 for c in fail):
                self.reset_segment()  # no space: empty it, keep going (counted)
                live.clear()
            it += 1
        return cell, live

    def run_get(self, api: str, batch: int, size: int, groups: List[List[Tuple[str, int, bytes]]]) -> Cell:
        """A get cell over the put cell's keys (``groups``), in turns. The
        other_client api reads them with the second client, each key once."""
        cell = Cell(self.store_kind, self.transport, "get", api, batch, size)
        st, dst = (self.other if api == "other_client" else self.store), self.dst
        assert dst is not None
        if not groups:
            cell.notes.append("no keys were stored by the put cell: nothing to read")
            return cell
        if api == "other_client" and len(groups) < 2:
            cell.notes.append("one group of keys: the warm-up call reads it, none is left to time")
            return cell
        dptrs = [dst.addr + j * size for j in range(batch)]
        sizes = [size] * batch
        wins = windows(size)
        key_lists = [[k for k, _, _ in g] for g in groups]
        held: List[Any] = [None]  # a copying call's results, alive through the next call, as a caller's

        def one(it: int) -> Tuple[int, List[Any], int]:
            gi = (it + 1) % len(groups)
            group, keys = groups[gi], key_lists[gi]
            if api == "copy":
                if batch == 1:
                    t0 = time.perf_counter_ns()
                    vals = [st.get(keys[0])]
                    dt = time.perf_counter_ns() - t0
                else:
                    t0 = time.perf_counter_ns()
                    vals = st.get_batch(keys)
                    dt = time.perf_counter_ns() - t0
                held[0] = vals
                res = [len(v) for v in vals]  # b"" is a miss or an error
                reads = [bytes(v[:STAMP]) for v in vals], [
                    [bytes(v[w:w + WIN]) for w in wins] for v in vals]
            elif api == "buffer":
                t0 = time.perf_counter_ns()
                vals = st.batch_get_buffer(keys)
                dt = time.perf_counter_ns() - t0
                held[0] = vals
                # ptr() and size(): what both stores' buffer handles have.
                res = [0 if v is None else v.size() for v in vals]
                reads = [b"" if v is None else ctypes.string_at(v.ptr(), STAMP) for v in vals], [
                    [b"" if v is None else ctypes.string_at(v.ptr() + w, WIN) for w in wins] for v in vals]
            else:
                # Poison the sampled bytes of the destination so that a call
                # that writes nothing cannot pass verification.
                for j in range(batch):
                    ctypes.memset(dptrs[j], 0, STAMP)
                    for w in wins:
                        ctypes.memset(dptrs[j] + w, 0, WIN)
                if batch == 1:
                    t0 = time.perf_counter_ns()
                    res = [st.get_into(keys[0], dptrs[0], size)]
                    dt = time.perf_counter_ns() - t0
                else:
                    t0 = time.perf_counter_ns()
                    res = st.batch_get_into(keys, dptrs, sizes)
                    dt = time.perf_counter_ns() - t0
                reads = [ctypes.string_at(dptrs[j], STAMP) for j in range(batch)], [
                    [ctypes.string_at(dptrs[j] + w, WIN) for w in wins] for j in range(batch)]
            # verify (untimed)
            bad_codes: List[Any] = []
            vfail = 0
            for j, (key, slot, stamp) in enumerate(group):
                r = res[j]
                if r != size:
                    bad_codes.append(r if r < 0 else ("empty" if r == 0 else f"short:{r}"))
                    continue
                ok = reads[0][j] == stamp and all(
                    reads[1][j][wi] == expected(slot * size, w, WIN) for wi, w in enumerate(wins))
                if not ok:
                    vfail += 1
                    if os.environ.get("BENCH_DEBUG"):
                        log(f"    verify failed {key} slot {slot}: stamp {reads[0][j].hex()} want {stamp.hex()}; "
                            + ", ".join(f"@{w} {reads[1][j][wi] == expected(slot * size, w, WIN)}"
                                        for wi, w in enumerate(wins)))
            return dt, bad_codes, vfail

        # The warm-up call reads group 0, the timed ones 1, 2, ...: at most
        # one turn for a cell that must read each key once.
        self.timed_gets(cell, one, len(groups) - 1 if api == "other_client" else None)
        return cell

    def timed_gets(self, cell: Cell, one: Callable[[int], Tuple[int, List[Any], int]],
                   most: Optional[int] = None) -> None:
        """Runs ``one(it)`` (a get call: its ns, failed keys' codes, verify
        failures) within the cell's budget, recorded in the cell; ``it``
        counts the timed calls from 0, the warm-up ones before them from
        below. A copying read returns new objects, and the loop holds one
        call's results while it makes the next, so its first two calls
        fault in fresh memory for them (later calls reuse what the previous
        ones freed, see gostore.buffers.heap): both are warm-up, their times kept
        apart as first_calls_ms. A zero-copy read's destination was faulted
        in before the cell: one warm-up call. ``most`` caps the timed calls."""
        max_calls = self.budget.calls(cell.size, cell.batch)
        if most is not None:
            max_calls = min(max_calls, most)
        min_calls = self.budget.min_calls(cell.size, cell.batch)
        t_end = time.perf_counter() + self.budget.cell_s
        it = -1 if cell.api in ("zero_copy", "tensor_into", "other_client") else -2
        while not (it >= 0 and (it >= max_calls or (time.perf_counter() >= t_end and it >= min(min_calls, max_calls)))):
            dt, bad_codes, vfail = one(it)
            cell.record_get(dt, bad_codes, vfail, warm_up=it < 0)
            it += 1

    def run_tensor_gets(self, size: int, mon: "CpuMon") -> List[Cell]:
        """batch_get_tensor against batch_get_tensor_into, its zero-copy
        form: BATCH uint8 tensors of ``size`` bytes of the source pattern,
        stored (untimed) under two groups of fresh keys with
        batch_put_tensor. Each result must be a tensor of the right length
        whose sampled bytes are the pattern; batch_get_tensor_into's slots
        have their first bytes (the header) zeroed before each call, so a
        call that writes nothing cannot pass."""
        if self.store_kind == "mooncake":
            return []  # Mooncake's tensor calls take torch tensors, which this virtualenv lacks
        import numpy as np

        st, src, dst = self.store, self.src, self.dst
        assert src is not None and dst is not None
        cells = [Cell(self.store_kind, self.transport, "get", api, BATCH, size) for api in ("tensor", "tensor_into")]
        self.reset_segment()
        tensors = [np.frombuffer(src.view[j * size:(j + 1) * size], dtype=np.uint8) for j in range(BATCH)]
        groups = []
        for g in range(2):
            keys = [f"{self.run_id}/t{size}-{g}/{j}" for j in range(BATCH)]
            rcs = st.batch_put_tensor(keys, tensors)
            if any(rcs):
                for c in cells:
                    c.notes.append(f"batch_put_tensor failed: {[r for r in rcs if r][:3]}")
                return cells
            groups.append(keys)
        self.used += 2 * BATCH * size
        slot = size + TENSOR_ROOM
        ptrs = [dst.addr + j * slot for j in range(BATCH)]
        wins = [0] + windows(size)
        held: List[Any] = [None]  # the last call's tensors, alive through the next call, as a caller's

        def one(api: str, it: int) -> Tuple[int, List[Any], int]:
            keys = groups[it % 2]
            if api == "tensor":
                t0 = time.perf_counter_ns()
                out = held[0] = st.batch_get_tensor(keys)
                dt = time.perf_counter_ns() - t0
            else:
                for p in ptrs:
                    ctypes.memset(p, 0, min(slot, 2 * TENSOR_ROOM))
                t0 = time.perf_counter_ns()
                out = st.batch_get_tensor_into(keys, ptrs, [slot] * BATCH)
                dt = time.perf_counter_ns() - t0
            bad: List[Any] = []
            vfail = 0
            for j, t in enumerate(out):
                if t is None or isinstance(t, int):
                    bad.append("none" if t is None else t)
                    continue
                a = np.asarray(t)
                if a.nbytes != size or any(a[w:w + (STAMP if w == 0 else WIN)].tobytes()
                                           != expected(j * size, w, STAMP if w == 0 else WIN) for w in wins):
                    vfail += 1
            return dt, bad, vfail

        for cell in cells:
            mon.snap()
            self.timed_gets(cell, lambda it, api=cell.api: one(api, it))
            held[0] = None
            cell.load = mon.foreign()
        return cells

    # ---- the pass -------------------------------------------------------------

    def run(self) -> Dict[str, Any]:
        master = peer = client = None
        echo: Optional[Echo] = None
        cells: List[Dict[str, Any]] = []
        t_start = time.perf_counter()
        tag = self.transport if self.store_kind == "gostore" else "mooncake"  # of the progress lines
        failed = True
        try:
            # Children first: nothing may fork after the Go runtime is loaded.
            on_mooncake = self.store_kind == "mooncake"
            master = start_mooncake_master() if on_mooncake else start_master(self.transport)
            peer = start_peer(master.rpc_addr, self.segment, self.transport, self.store_kind)
            self.info.update(master=master.rpc_addr, peer=peer.hostname,
                             master_pid=master.pid, peer_pid=peer.pid)
            echo = Echo()  # also a child: started before the Go runtime loads
            if self.transport == "standalone":
                client = start_client_process(master.rpc_addr)
                self.data_pid = client.pid
                self.info.update(client_pid=client.pid)
            self.info["rtt_start"] = echo.rtt(1000 if self.quick else 4000)
            if on_mooncake:
                from mooncake.store import MooncakeDistributedStore

                # Refuse to label gostore's figures as Mooncake's.
                wheel = mooncake_wheel()
                module = sys.modules["mooncake.store"].__file__ or ""
                if not wheel or not os.path.abspath(module).startswith(os.path.abspath(wheel) + os.sep):
                    raise RuntimeError(f"mooncake.store is {module}, not from the wheel {wheel}")
                self.info.update(mooncake_store_module=module, mooncake_version=mooncake_version(wheel))
            else:
                from gostore import MooncakeDistributedStore

            mon = CpuMon([os.getpid(), master.pid, peer.pid] + ([client.pid] if client else []))
            if on_mooncake:
                # The probes are gostore's library: loading its Go runtime
                # into Mooncake's process could disturb what is measured.
                log("  [mooncake] limits: the tcp pass's, measured in its own process")
            else:
                self.measure_limits()
                self.measure_fresh_memory()
                if client is not None:
                    self.measure_cross_memory()
            arena = BATCH * max(SIZES)
            dst_arena = arena + BATCH * TENSOR_ROOM  # a tensor's header beside its data
            self.store = st = MooncakeDistributedStore()
            local_buffer = LOCAL_BUFFER[self.store_kind]
            self.info["local_buffer_size"] = local_buffer
            if client is not None:
                rc = st.setup_dummy(arena + dst_arena + MiB, 64 * MiB, client.server_address)
                at = [st.alloc_from_mem_pool(n) for n in (arena, dst_arena)]
                if rc != 0 or not all(at):
                    raise RuntimeError(f"setup_dummy failed: {rc}, pool {at}")
            else:
                rc = st.setup("127.0.0.1", "P2PHANDSHAKE", 0, local_buffer, "tcp", "", master.rpc_addr)
                at = [0, 0]
                if rc != 0:
                    raise RuntimeError(f"setup failed: {rc}")
            self.src = Arena(arena, fill=True, at=at[0])
            self.dst = Arena(dst_arena, fill=False, at=at[1])
            self.measure_cold_memcpy()
            self.info["load_limits"] = mon.foreign()
            for a in (self.src, self.dst):
                rc = st.register_buffer(a.addr, a.size)
                if rc != 0:
                    raise RuntimeError(f"register_buffer failed: {rc}")
            if not on_mooncake and self.transport == "tcp":
                # A second client, as a decode node reading a prefill node's
                # pages: gostore's client reads its own writes from where it
                # wrote them (client/spots.go), this one cannot.
                other = MooncakeDistributedStore()
                rc = other.setup("127.0.0.1", "P2PHANDSHAKE", 0, 16 * MiB, "tcp", "", master.rpc_addr)
                if rc == 0:
                    rc = other.register_buffer(self.dst.addr, self.dst.size)
                if rc == 0:
                    self.other = other
                else:  # the pass goes on without the get_into_other cells
                    log(f"  [{tag}] the second client's setup failed ({rc}): no get_into_other cells")
                    other.close()
            # Warm-up: maps the peer segment / opens the connections. At most
            # the arena: with --sizes 4K it is 128 KiB, and a 16 MiB warm-up
            # would read past it (gostore refuses the range, Mooncake's TCP
            # transport fails with EFAULT and stalls 30 s).
            t0 = time.perf_counter()
            wk = f"{self.run_id}/warmup"
            wsize = min(16 * MiB, arena)
            rc1 = st.put_from(wk, self.src.addr, wsize)
            rc2 = st.get_into(wk, self.dst.addr, wsize)
            self.info["warmup_s"] = time.perf_counter() - t0
            self.info["warmup_codes"] = [rc1, rc2]
            self.info["warmup_bytes"] = wsize
            self.info["prefault_wait_s"] = self.wait_prefault()
            self.info["path"] = self.check_path(peer.hostname, peer.pid)
            path = self.info["path"]
            log(f"  [{tag}] warm-up {self.info['warmup_s'] * 1e3:.0f} ms (put {rc1}, get {rc2}), "
                f"prefault wait {self.info['prefault_wait_s']:.2f} s; "
                f"tcp connections to peer: {path['tcp_conns_to_peer']}, "
                f"peer memfd mapped: {path['peer_memfd_mapped']}")
            if self.transport != "tcp" and path["tcp_conns_to_peer"]:
                log("  WARNING: shm pass has TCP connections to the peer")
            if self.transport == "tcp" and not path["tcp_conns_to_peer"]:
                log("  WARNING: tcp pass has no TCP connection to the peer")
            self.reset_segment()

            for size in SIZES:
                for batch in BATCHES:
                    for api in APIS:
                        self.reset_segment()
                        mon.snap()
                        pc, groups = self.run_put(api, batch, size)
                        pc.load = mon.foreign()
                        gc = self.run_get(api, batch, size, groups)
                        gc.load = mon.foreign()
                        done = [pc, gc]
                        if api == "zero_copy" and batch == 1 and self.other is not None:
                            mon.snap()
                            oc = self.run_get("other_client", 1, size, groups)
                            oc.load = mon.foreign()
                            done.append(oc)
                        if api == "copy" and batch > 1:  # the other copying batch read, same keys
                            mon.snap()
                            bc = self.run_get("buffer", batch, size, groups)
                            bc.load = mon.foreign()
                            done.append(bc)
                        if api == "zero_copy" and batch > 1:
                            done += self.run_tensor_gets(size, mon)
                        lname, lgbps = self.limit_for(size)
                        for c in done:
                            r = c.result(lname, lgbps)
                            cells.append(r)
                            log(f"  [{tag}] {r['method']:<21}{batch:>3} x {fmt_size(size):>7}: "
                                f"{r['gbps']:7.2f} GB/s {r['keys_per_s']:>10.0f} keys/s "
                                f"p50 {r['p50_us']:9.1f} us  ({r['calls']} calls, {r['errors']} errors, "
                                f"{r['verify_failures']} bad, background cpu {100 * c.load['foreign']:.0f}%)")
            self.reset_segment()
            self.info["rtt_end"] = echo.rtt(1000 if self.quick else 4000)
            failed = False
        finally:
            for store in (self.other, self.store):
                if store is not None:
                    try:
                        store.close()
                    except Exception as e:  # never mask the original error
                        log(f"  close failed: {e!r}")
            kill(client)
            kill(peer)
            kill(master)
            if echo is not None:
                echo.close()
            master_log = getattr(master, "log_path", None)  # mooncake_master's
            if master_log and failed:
                log(f"  mooncake_master's log: {master_log}")
            elif master_log:
                os.unlink(master_log)
        left = [p.pid for p in (client, peer, master, echo.proc if echo else None) if p is not None and p.poll() is None]
        self.info["children_left_running"] = left
        self.info["pass_s"] = time.perf_counter() - t_start
        return {"store": self.store_kind, "transport": self.transport, "limits": self.limits, "cells": cells,
                "info": self.info}


def worker_main(args: argparse.Namespace) -> int:
    def on_term(*_a: Any) -> None:
        raise SystemExit(143)  # run the finally blocks: kill master and peer

    signal.signal(signal.SIGTERM, on_term)
    os.environ["GOSTORE_LOG_LEVEL"] = "warn"
    is_tcp = (os.environ.get("GOSTORE_TRANSPORT") or "").lower() == "tcp"
    if args.store == "gostore" and is_tcp != (args.transport == "tcp"):
        log(f"worker: GOSTORE_TRANSPORT={os.environ.get('GOSTORE_TRANSPORT')!r} does not match --transport")
        return 1
    w = Worker(args.transport, args.quick, args.segment, args.store)
    try:
        out = w.run()
    except KeyboardInterrupt:
        return 130  # Worker.run's finally stopped the master and the peer
    with open(args.out, "w") as f:
        json.dump(out, f)
    return 0


# --------------------------------------------------------------------------
# orchestration, report


def run_pass(transport: str, args: argparse.Namespace, store: str = "gostore") -> Dict[str, Any]:
    fd, out = tempfile.mkstemp(prefix=f"gostore-bench-{store}-{transport}-", suffix=".json")
    os.close(fd)
    cmd = [sys.executable, os.path.abspath(__file__), "--worker", "--transport", transport,
           "--out", out, "--segment", str(args.segment), "--store", store]
    if args.quick:
        cmd.append("--quick")
    if args.sizes:
        cmd += ["--sizes", args.sizes]
    proc = subprocess.Popen(cmd, env=child_env(transport, store), preexec_fn=_pdeathsig)
    try:
        rc = proc.wait()
    except BaseException:
        proc.terminate()
        try:
            proc.wait(timeout=15)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
        raise
    try:
        if rc != 0:
            raise RuntimeError(f"{transport if store == 'gostore' else store} pass failed (exit {rc})")
        with open(out) as f:
            return json.load(f)
    finally:
        os.unlink(out)


def find(cells: List[Dict[str, Any]], transport: str, method: str, batch: int, size: int) -> Optional[Dict[str, Any]]:
    for c in cells:
        if (c["transport"], c["method"], c["batch"], c["size"]) == (transport, method, batch, size):
            return c
    return None


def attach_tcp_limits(mc_cells: List[Dict[str, Any]], tcp_limits: Optional[Dict[str, Any]]) -> None:
    """Mooncake's pass measures no limits of its own (the probes are gostore's
    library): give its cells the raw TCP stream that the tcp pass measured
    in this run, at the cell's value size."""
    for c in mc_cells:
        lim = ((tcp_limits or {}).get("tcp_stream") or {}).get(str(c["size"]))
        if lim and lim["gbps"] > 0:
            c["limit"] = "tcp_stream (measured in the tcp pass)"
            c["limit_gbps"] = lim["gbps"]
            c["pct_of_limit"] = 100.0 * c["gbps"] / lim["gbps"]


def more_mooncake_rounds(args: argparse.Namespace) -> List[Dict[str, Any]]:
    """Rounds 2..args.rounds of the comparison with Mooncake: a gostore tcp
    pass and a Mooncake pass at 4 KiB each, alternating. Small operations
    over loopback follow the machine's state (how fast an idle vCPU wakes),
    which drifts within a minute; the median of several pairs is the ratio
    one pair only samples. A pair whose pass fails is left out."""
    small = argparse.Namespace(**{**vars(args), "sizes": "4K"})
    out: List[Dict[str, Any]] = []
    for r in range(2, args.rounds + 1):
        log(f"== round {r} of {args.rounds}: gostore and Mooncake tcp passes at 4 KiB")
        try:
            g = run_pass("tcp", small)
            m = run_pass("tcp", small, store="mooncake")
        except RuntimeError as e:
            log(f"  round {r} left out: {e}")
            continue
        out.append({"ratios": compare_mooncake(g["cells"], m["cells"]), "rtt": pass_rtts(g["info"], m["info"])})
    return out


def pass_rtts(gostore_info: Dict[str, Any], mooncake_info: Dict[str, Any]) -> Dict[str, Any]:
    """The ping-pong RTT p50s at the start and end of a pair of passes."""
    return {side: [((i.get(k) or {}).get("p50_us")) for k in ("rtt_start", "rtt_end")]
            for side, i in (("gostore", gostore_info), ("mooncake", mooncake_info))}


def median_ratios(rounds: List[Dict[str, Any]]) -> Dict[Tuple[str, int, int], List[float]]:
    """Each (method, batch, size)'s ratios over the rounds that measured it
    with no failed key on either side, lowest first."""
    out: Dict[Tuple[str, int, int], List[float]] = {}
    for rnd in rounds:
        for r in rnd["ratios"]:
            if r["ratio"] is not None and not r["mooncake_errors"] and not r["gostore_errors"]:
                out.setdefault((r["method"], r["batch"], r["size"]), []).append(r["ratio"])
    return {k: sorted(v) for k, v in out.items()}


def compare_mooncake(cells: List[Dict[str, Any]], mc_cells: List[Dict[str, Any]]) -> List[Dict[str, Any]]:
    """One row per Mooncake cell beside gostore's tcp cell of the same
    method, batch and size. ``ratio`` is gostore's verified keys/s over
    Mooncake's (a batch moves the same 32 keys on both, so it is also the
    ratio of calls/s); a failed key counts on neither side."""
    out: List[Dict[str, Any]] = []
    pairs = [(m, m["method"]) for m in mc_cells]
    # Mooncake's get_into knows nothing of earlier writes: it is also the
    # figure beside gostore's read of another client's write.
    pairs += [(m, "get_into_other") for m in mc_cells if m["method"] == "get_into"]
    for m, method in pairs:
        g = find(cells, "tcp", method, m["batch"], m["size"])
        if g is None and method != m["method"]:
            continue
        row: Dict[str, Any] = {**{k: m[k] for k in ("op", "batch", "size")}, "method": method,
                               "api": m["api"] if method == m["method"] else "other_client"}
        for side, c in (("gostore", g), ("mooncake", m)):
            row.update({f"{side}_{k}": (c[k] if c else None)
                        for k in ("keys_per_s", "gbps", "p50_us", "p99_us", "verified_keys")})
            row[f"{side}_errors"] = (c["errors"] + c["verify_failures"]) if c else None
        row["ratio"] = (g["keys_per_s"] / m["keys_per_s"]) if g and m["keys_per_s"] > 0 else None
        out.append(row)
    return out


def evaluate_targets(cells: List[Dict[str, Any]], transports: List[str],
                     mc_cells: Optional[List[Dict[str, Any]]] = None,
                     limits: Optional[Dict[str, Any]] = None,
                     mc_rounds: Optional[List[Dict[str, Any]]] = None) -> List[Dict[str, Any]]:
    """Targets, evaluated on this run's cells. ``mc_cells``: Mooncake's (None
    when its pass did not run); ``limits``: each pass's, for the detail lines."""
    out: List[Dict[str, Any]] = []

    def add(name: str, cell: Optional[Dict[str, Any]], measured: Optional[float], unit: str,
            op: str, target: float, detail: str, also: Optional[Dict[str, Any]] = None) -> None:
        """``also``: a second gostore cell the figure depends on; its
        failures, like ``cell``'s, keep the verdict from PASS."""
        if cell is None or measured is None:
            out.append({"target": name, "verdict": "N/A", "detail": "cell not run"})
            return
        ok = measured >= target if op == ">=" else measured <= target
        for c in (cell, also):
            if c is not None and (c["errors"] or c["verify_failures"]):
                ok = False
                detail += f"; {c['method']}: {c['errors']} errors, {c['verify_failures']} verify failures"
        out.append({"target": name, "verdict": "PASS" if ok else "BELOW", "measured": measured,
                    "unit": unit, "op": op, "threshold": target, "detail": detail})

    big = 16 * MiB
    for tr in transports:
        lim_name = "raw loopback TCP stream" if tr == "tcp" else "memcpy"
        for m in ("put_from", "get_into"):
            c = find(cells, tr, m, 1, big)
            if c is not None:
                add(f"{tr}: {m} 16 MiB >= 70% of {lim_name}", c, c["pct_of_limit"], "%", ">=", 70.0,
                    f"{c['gbps']:.2f} GB/s vs {c['limit_gbps']:.2f} GB/s")
        for m in ("batch_put_from", "batch_get_into"):
            c = find(cells, tr, m, BATCH, big)
            if c is not None:
                add(f"{tr}: {m} 32x16 MiB >= 70% of {lim_name} (batch form)", c, c["pct_of_limit"], "%",
                    ">=", 70.0, f"{c['gbps']:.2f} GB/s vs {c['limit_gbps']:.2f} GB/s")
        for m in ("batch_put_from", "batch_get_into"):
            c = find(cells, tr, m, BATCH, 4 * KiB)
            if c is not None:
                add(f"{tr}: {m} 32x4 KiB >= 100k keys/s", c, c["keys_per_s"], "keys/s", ">=", 100000.0,
                    f"{c['keys_per_s']:.0f} keys/s, p50 {c['p50_us']:.1f} us per call of 32")
        c = find(cells, tr, "get", 1, 4 * KiB)
        if c is not None:
            add(f"{tr}: get 4 KiB p50 <= 60 us", c, c["p50_us"], "us", "<=", 60.0,
                f"p50 {c['p50_us']:.1f} us, p99 {c['p99_us']:.1f} us")
        # Copying batch reads should cost little more than zero-copy ones.
        for size in SIZES:
            for copying, zero in (("get_batch", "batch_get_into"), ("batch_get_buffer", "batch_get_into"),
                                  ("batch_get_tensor", "batch_get_tensor_into")):
                cb, zb = find(cells, tr, copying, BATCH, size), find(cells, tr, zero, BATCH, size)
                if cb is None or zb is None:
                    continue
                share = 100.0 * cb["gbps"] / zb["gbps"] if zb["gbps"] > 0 else None
                first = ", ".join(f"{t:.1f}" for t in cb.get("first_calls_ms") or [])
                cross = (((limits or {}).get(tr) or {}).get("cross_memory") or {}).get(str(size))
                bound = (f"; cross-memory copy limit {cross['gbps']:.2f} GB/s "
                         f"({100 * cb['gbps'] / cross['gbps']:.0f}% of it)") if cross and cross["gbps"] > 0 else ""
                add(f"{tr}: {copying} 32x{fmt_size(size)} >= 80% of {zero}", cb, share,
                    "% of zero-copy", ">=", 80.0,
                    f"{cb['gbps']:.2f} vs {zb['gbps']:.2f} GB/s ({share or 0:.0f}%); first two calls "
                    f"(fresh memory, warm-up) {first} ms{bound}", also=zb)

    # The issue's targets on the TCP path (Mooncake's wheel moves bytes over
    # TCP here, so its cells compare with the tcp rows).
    if "tcp" in transports:
        for m in ("get", "get_into", "get_into_other"):
            c = find(cells, "tcp", m, 1, 4 * KiB)
            if c is not None:
                add(f"tcp: {m} 4 KiB p50 <= 100 us", c, c["p50_us"], "us", "<=", 100.0,
                    f"p50 {c['p50_us']:.1f} us, p99 {c['p99_us']:.1f} us")
        for m in ("put_from", "get_into", "get_into_other"):
            name = f"tcp: {m} 4 KiB >= 3x Mooncake's keys/s (same run)"
            if m == "get_into_other":
                name = "tcp: get_into 4 KiB of another client's write >= 3x Mooncake's get_into keys/s (same run)"
            g = find(cells, "tcp", m, 1, 4 * KiB)
            mc = find(mc_cells or [], "tcp", "get_into" if m == "get_into_other" else m, 1, 4 * KiB)
            if mc_cells is None:
                out.append({"target": name, "verdict": "N/A", "detail": "the Mooncake column did not run"})
            elif g is None or mc is None:
                out.append({"target": name, "verdict": "N/A", "detail": "cell not run"})
            elif mc["errors"] or mc["verify_failures"] or mc["keys_per_s"] <= 0:
                # A Mooncake figure cut by failures would flatter gostore.
                out.append({"target": name, "verdict": "N/A",
                            "detail": f"Mooncake's cell failed: {mc['errors']} errors, "
                                      f"{mc['verify_failures']} verify failures"})
            else:
                # The median over the rounds (more_mooncake_rounds) when
                # there were several; the first round's figures beside it.
                ratios = median_ratios(mc_rounds or []).get((m, 1, 4 * KiB)) or [g["keys_per_s"] / mc["keys_per_s"]]
                rounds = (f"; median of {len(ratios)} rounds ({', '.join(f'{r:.2f}x' for r in ratios)})"
                          if len(ratios) > 1 else "")
                add(name, g, statistics.median(ratios), "x", ">=", 3.0,
                    f"{g['keys_per_s']:.0f} vs {mc['keys_per_s']:.0f} keys/s "
                    f"({g['keys_per_s'] / mc['keys_per_s']:.2f}x), p50 {g['p50_us']:.1f} vs {mc['p50_us']:.1f} us"
                    f"{rounds}")
    return out


def print_report(doc: Dict[str, Any]) -> None:
    m = doc["machine"]
    print()
    print(f"gostore benchmark  {doc['timestamp']}  {'(quick)' if doc['config']['quick'] else ''}")
    print(f"machine: {m['nproc']} CPUs ({m['cpu_model']}), kernel {m['kernel']}, "
          f"python {m['python']}, commit {m['git_commit']}")
    print(f"peer segment {fmt_size(doc['config']['segment'])}, client global_segment_size=0, "
          f"batch {BATCH}; a batch call counts as one call for p50/p99; keys/s counts objects")
    for tr in doc["config"]["transports"]:
        rows = [c for c in doc["cells"] if c["transport"] == tr]
        if not rows:
            continue
        lim = doc["limits"][tr]
        info = doc["passes"][tr]
        print()
        print(f"== transport {tr}")
        print("   limits measured in this pass (GB/s): Go memcpy probe "
              + ", ".join(f"{fmt_size(int(s))} {v['gbps']:.2f}" for s, v in lim["memcpy"].items())
              + "; raw loopback TCP stream "
              + ", ".join(f"{fmt_size(int(s))} {v['gbps']:.2f}" for s, v in lim["tcp_stream"].items()))
        cold = lim.get("memcpy_cold_libc") or {}
        rs, re_ = info.get("rtt_start") or {}, info.get("rtt_end") or {}
        print("   reference only: libc memcpy, cold (rotating over 512 MiB) "
              + ", ".join(f"{fmt_size(int(s))} {v['gbps']:.2f}" for s, v in cold.items())
              + f" GB/s; loopback ping-pong RTT p50 {rs.get('p50_us', float('nan')):.1f} us at start, "
              f"{re_.get('p50_us', float('nan')):.1f} us at end (two Python processes)")
        fresh = lim.get("fresh_memory")
        if fresh:
            lo = min(fresh["samples"])
            print(f"   reference only: writing memory this process never touched (page faults included) "
                  f"{lo:.2f}-{fresh['gbps']:.2f} GB/s in {len(fresh['samples'])} new mappings of "
                  f"{fmt_size(fresh['bytes'])}: {BATCH * max(SIZES) / fresh['gbps'] / 1e6:.0f}-"
                  f"{BATCH * max(SIZES) / lo / 1e6:.0f} ms for {BATCH} x {fmt_size(max(SIZES))} of fresh objects")
        cross = lim.get("cross_memory")
        if cross:
            print("   reference only: cross-memory copy (process_vm_writev, what gostore-client's copying reads "
                  f"into the application's memory make; {next(iter(cross.values()))['threads']} threads) "
                  + ", ".join(f"{fmt_size(int(s))} {v['gbps']:.2f}" for s, v in cross.items()) + " GB/s")
        firsts = [c for c in rows if c["op"] == "get" and c["api"] in ("copy", "buffer", "tensor")
                  and c.get("first_calls_ms")]
        if firsts:
            print("   copying gets' first two calls, warm-up outside the figures (they fault in fresh memory for "
                  "the objects returned; later calls reuse it): "
                  + "; ".join(f"{c['method']} {c['batch']}x{fmt_size(c['size'])} "
                              + ", ".join(f"{t:.1f}" for t in c["first_calls_ms"]) + " ms" for c in firsts))
        print(f"   the '% limit' column is against the {'raw TCP stream' if tr == 'tcp' else 'Go memcpy probe'}"
              " at the cell's value size; 'bg cpu' is the share of the machine used by other processes")
        hdr = (f"{'op':<4} {'api':<21} {'batch':>5} {'size':>7} {'GB/s':>8} {'keys/s':>10} "
               f"{'p50 us':>9} {'p99 us':>9} {'limit GB/s':>10} {'% limit':>8} {'errors':>6} {'calls':>6} {'bg cpu':>6}")
        print(hdr)
        print("-" * len(hdr))
        for c in rows:
            err = c["errors"] + c["verify_failures"]
            pl = f"{c['pct_of_limit']:.0f}%" if c["pct_of_limit"] is not None else "-"
            bg = c.get("background_cpu")
            bgs = f"{100 * bg:.0f}%" if bg is not None else "-"
            print(f"{c['op']:<4} {c['method']:<21} {c['batch']:>5} {fmt_size(c['size']):>7} "
                  f"{c['gbps']:>8.2f} {c['keys_per_s']:>10.0f} {c['p50_us']:>9.1f} {c['p99_us']:>9.1f} "
                  f"{c['limit_gbps']:>10.2f} {pl:>8} {err:>6} {c['calls']:>6} {bgs:>6}")
        bad = [c for c in rows if c["errors"] or c["verify_failures"] or c["notes"]]
        for c in bad:
            print(f"  ! {c['method']} {c['batch']}x{fmt_size(c['size'])}: codes {c['error_codes']}, "
                  f"{c['verify_failures']} verify failures; {'; '.join(c['notes'])}")
        bgs = [c["background_cpu"] for c in rows if c.get("background_cpu") is not None]
        if bgs and max(bgs) > 0.10:
            print(f"  ! other processes used up to {100 * max(bgs):.0f}% of the machine during this pass "
                  f"(mean {100 * sum(bgs) / len(bgs):.0f}%): its numbers are disturbed")
        print(f"   path check: {info.get('path')}; pass took {info.get('pass_s', 0):.1f} s")
    print_vs_mooncake(doc)
    print()
    print("== targets (reported, never enforced)")
    for t in doc["targets"]:
        if t["verdict"] == "N/A":
            print(f"  N/A    {t['target']}" + (f" ({t['detail']})" if t.get("detail") != "cell not run" else ""))
        else:
            print(f"  {t['verdict']:<6} {t['target']}: {t['detail']}"
                  + (f" ({t['measured']:.0f}% of limit)" if t["unit"] == "%" else ""))


def print_vs_mooncake(doc: Dict[str, Any]) -> None:
    mc = doc["config"]["mooncake"]
    print()
    if mc.get("skipped"):
        print(f"Mooncake column skipped: {mc['skipped']}")
        return
    info = doc["passes"].get("mooncake") or {}
    print(f"== gostore vs Mooncake {mc['version'].split('.post')[0]} (same run)")
    print(f"   Mooncake {mc['version']} from {mc['wheel']}, with its own mooncake_master; its wheel moves bytes "
          "between processes over TCP here (no RDMA), so each cell is set beside gostore's tcp row")
    print(f"   same loops, keys, stamps and checks; worker local_buffer_size: gostore "
          f"{fmt_size(LOCAL_BUFFER['gostore'])}, Mooncake {fmt_size(LOCAL_BUFFER['mooncake'])} (Mooncake's "
          "copying calls stage values in it and its get_batch returns empty values past it: counted as errors)")
    print("   ratio = gostore keys/s / Mooncake keys/s (verified keys); p50 per call")

    def rtt(i: Dict[str, Any]) -> str:
        return (f"{(i.get('rtt_start') or {}).get('p50_us', float('nan')):.1f} -> "
                f"{(i.get('rtt_end') or {}).get('p50_us', float('nan')):.1f} us")

    # On a VM that is slow to wake an idle vCPU, small calls are faster while
    # other work keeps the CPUs busy: this reference tells whether the two
    # passes saw the machine alike.
    print(f"   loopback ping-pong RTT p50 (start -> end of pass): gostore tcp pass "
          f"{rtt(doc['passes'].get('tcp') or {})}, Mooncake pass {rtt(info)}")
    hdr = (f"{'method':<16} {'batch':>5} {'size':>7} {'gostore keys/s':>14} {'Mooncake keys/s':>15} {'ratio':>7} "
           f"{'gostore p50':>11} {'Mooncake p50':>12} {'gostore GB/s':>12} {'Mooncake GB/s':>13} {'errors g/M':>10}")
    print(hdr)
    print("-" * len(hdr))

    def num(v: Optional[float], f: str) -> str:
        return format(v, f) if v is not None else "-"

    for r in doc["vs_mooncake"]:
        ratio = f"{r['ratio']:.2f}x" if r["ratio"] is not None else "-"
        errs = f"{num(r['gostore_errors'], 'd')}/{r['mooncake_errors']}"
        print(f"{r['method']:<16} {r['batch']:>5} {fmt_size(r['size']):>7} {num(r['gostore_keys_per_s'], '.0f'):>14} "
              f"{r['mooncake_keys_per_s']:>15.0f} {ratio:>7} {num(r['gostore_p50_us'], '.1f'):>8} us "
              f"{r['mooncake_p50_us']:>9.1f} us {num(r['gostore_gbps'], '.2f'):>12} {r['mooncake_gbps']:>13.2f} "
              f"{errs:>10}")
    rounds = doc.get("vs_mooncake_rounds") or []
    if len(rounds) > 1:
        print(f"   {len(rounds)} rounds (the table is round 1; rounds 2 on ran at 4 KiB): the ratios, lowest first, "
              "and their median")
        for key, ratios in sorted(median_ratios(rounds).items(), key=lambda kv: (kv[0][2], kv[0][1], kv[0][0])):
            if len(ratios) > 1:
                print(f"     {key[0]:<16} {key[1]:>3} x {fmt_size(key[2]):>6}: "
                      f"{', '.join(f'{x:.2f}x' for x in ratios)}  median {statistics.median(ratios):.2f}x")
        print("   RTT p50 (start -> end) per round, gostore | Mooncake pass: " + "; ".join(
            " | ".join(f"{num(a, '.0f')} -> {num(b, '.0f')} us" for a, b in (rd['rtt']['gostore'], rd['rtt']['mooncake']))
            for rd in rounds))
    for c in doc["mooncake"]:
        if c["errors"] or c["verify_failures"] or c["notes"]:
            print(f"  ! Mooncake {c['method']} {c['batch']}x{fmt_size(c['size'])}: codes {c['error_codes']}, "
                  f"{c['verify_failures']} verify failures; {'; '.join(c['notes'])}")
    bgs = [c["background_cpu"] for c in doc["mooncake"] if c.get("background_cpu") is not None]
    if bgs and max(bgs) > 0.10:
        print(f"  ! other processes used up to {100 * max(bgs):.0f}% of the machine during Mooncake's pass: "
              "its numbers are disturbed")
    print(f"   Mooncake path check: {info.get('path')}; pass took {info.get('pass_s', 0):.1f} s")


def parse_size(text: str) -> int:
    """4096, 4K, 1M, 16M -> bytes."""
    t = text.strip().upper().rstrip("B").rstrip("I")
    mult = {"K": KiB, "M": MiB, "G": GiB}.get(t[-1:], 1)
    return int(t[:-1] if mult > 1 else t) * mult


def main(argv: Optional[List[str]] = None) -> int:
    ap = argparse.ArgumentParser(description="gostore put/get benchmark (see bench/README.md)")
    ap.add_argument("--json", metavar="PATH", help="write every cell, the limits and the machine here")
    ap.add_argument("--quick", action="store_true", help="a ~30 s smoke run")
    ap.add_argument("--transport", choices=TRANSPORTS + ["both", "all"], default="all",
                    help="one pass, 'both' (shm and tcp) or 'all' (default: also standalone)")
    ap.add_argument("--segment", type=int, default=2 * GiB, help="peer segment bytes (default 2 GiB)")
    ap.add_argument("--sizes", metavar="LIST",
                    help="value sizes to run, e.g. 4K,1M (default: 4K,1M,16M); limits stay measured")
    ap.add_argument("--no-mooncake", action="store_true",
                    help="skip the Mooncake column (it runs with the tcp pass when Mooncake's wheel is there)")
    ap.add_argument("--rounds", type=int, metavar="N",
                    help="gostore/Mooncake pairs of tcp passes behind the ratios to Mooncake: the first at "
                         "every size, the others at 4 KiB; a ratio is the median of its pairs "
                         "(default 3, 1 with --quick)")
    ap.add_argument("--store", choices=STORES, default="gostore", help=argparse.SUPPRESS)
    ap.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    ap.add_argument("--out", help=argparse.SUPPRESS)
    ap.add_argument("--peer", metavar="MASTER", help=argparse.SUPPRESS)
    ap.add_argument("--echo", action="store_true", help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    if args.rounds is None:
        args.rounds = 1 if args.quick else 3
    if args.sizes:
        global SIZES
        SIZES = [parse_size(x) for x in args.sizes.split(",") if x.strip()]

    if args.echo:
        return echo_main()
    if args.peer:
        return peer_main(args.peer, args.segment, args.store)
    if args.worker:
        return worker_main(args)

    transports = {"all": TRANSPORTS, "both": ["shm", "tcp"]}.get(args.transport, [args.transport])
    wheel = mooncake_wheel()
    mc_conf: Dict[str, Any] = {"wheel": wheel, "version": mooncake_version(wheel) if wheel else None,
                               "local_buffer_size": LOCAL_BUFFER["mooncake"], "skipped": None}
    if args.no_mooncake:
        mc_conf["skipped"] = "--no-mooncake"
    elif "tcp" not in transports:
        mc_conf["skipped"] = "it runs with the tcp pass (its cells compare with the tcp rows)"
    elif wheel is None:
        mc_conf["skipped"] = ("Mooncake's wheel is not installed (`make bench-peers` puts it in "
                              ".venv-peers/mooncake-wheel, and needs Debian's libibverbs1; or set "
                              "GOSTORE_BENCH_MOONCAKE_WHEEL to a `pip install --target` of it)")
    doc: Dict[str, Any] = {
        "timestamp": _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds"),
        "machine": machine_info(),
        "config": {"quick": args.quick, "segment": args.segment, "batch": BATCH, "sizes": SIZES,
                   "transports": transports, "python": sys.executable,
                   "GOSTORE_LIB": os.environ.get("GOSTORE_LIB"),
                   "GOSTORE_MASTER_BIN": os.environ.get("GOSTORE_MASTER_BIN"), "mooncake": mc_conf},
        "limits": {}, "cells": [], "passes": {}, "targets": [], "mooncake": [], "vs_mooncake": [],
        "vs_mooncake_rounds": [],
    }
    t0 = time.perf_counter()
    failed = []
    for tr in transports:
        log(f"== {tr} pass")
        try:
            res = run_pass(tr, args)
        except RuntimeError as e:
            log(f"  {e}")
            failed.append(tr)
            continue
        doc["limits"][tr] = res["limits"]
        doc["cells"].extend(res["cells"])
        doc["passes"][tr] = res["info"]
        if tr == "tcp" and not mc_conf["skipped"]:
            # Right after gostore's tcp pass, so that both see the machine alike.
            log("== Mooncake pass (tcp)")
            try:
                mc = run_pass("tcp", args, store="mooncake")
            except RuntimeError as e:
                log(f"  {e}")
                mc_conf["skipped"] = f"its pass failed ({e})"
            else:
                attach_tcp_limits(mc["cells"], res["limits"])
                doc["mooncake"] = mc["cells"]
                doc["passes"]["mooncake"] = mc["info"]
                doc["limits"]["mooncake"] = mc["limits"]
                doc["vs_mooncake"] = compare_mooncake(doc["cells"], mc["cells"])
                doc["vs_mooncake_rounds"] = [{"ratios": doc["vs_mooncake"], "rtt": pass_rtts(res["info"], mc["info"])}]
                doc["vs_mooncake_rounds"] += more_mooncake_rounds(args)
    if "tcp" in failed and not mc_conf["skipped"]:
        mc_conf["skipped"] = "gostore's tcp pass failed"
    doc["targets"] = evaluate_targets(doc["cells"], [t for t in transports if t not in failed],
                                      None if mc_conf["skipped"] else doc["mooncake"], doc["limits"],
                                      doc.get("vs_mooncake_rounds"))
    doc["total_s"] = time.perf_counter() - t0
    print_report(doc)
    print(f"\ntotal {doc['total_s']:.1f} s" + (f"; FAILED passes: {failed}" if failed else ""))
    if args.json:
        d = os.path.dirname(os.path.abspath(args.json))
        os.makedirs(d, exist_ok=True)
        with open(args.json, "w") as f:
            json.dump(doc, f, indent=1)
        print(f"wrote {args.json}")
    return 1 if len(failed) == len(transports) else 0


if __name__ == "__main__":
    try:
        sys.exit(main())
    except KeyboardInterrupt:
        log("interrupted")
        sys.exit(130)
