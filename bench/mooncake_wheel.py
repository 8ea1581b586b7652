"""Mooncake 0.3.13's wheel beside gostore in the benchmarks: where it is,
and its own ``mooncake_master`` started on free ports.

``bench/bench.py`` and ``bench/engines.py`` both run Mooncake's cells
against this master; neither loads the wheel itself from here (the wheel
is imported only in the processes that run on it).
"""

from __future__ import annotations

import os
import socket
import subprocess
import tempfile
import time
from typing import Dict, Optional, Tuple

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def wheel_dir() -> Optional[str]:
    """The unpacked wheel (``make bench-peers`` puts it in
    .venv-peers/mooncake-wheel; GOSTORE_BENCH_MOONCAKE_WHEEL names another),
    or None."""
    d = os.environ.get("GOSTORE_BENCH_MOONCAKE_WHEEL") or os.path.join(ROOT, ".venv-peers", "mooncake-wheel")
    return d if os.path.exists(os.path.join(d, "mooncake", "mooncake_master")) else None


def free_port() -> int:
    """A TCP port free on 127.0.0.1 a moment ago."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def start_master(wheel: str, env: Optional[Dict[str, str]] = None, **popen) -> Tuple[subprocess.Popen, str, str]:
    """``mooncake_master`` from ``wheel`` on free ports, its HTTP metadata
    server off (the clients use P2PHANDSHAKE), its output in a log file:
    (process, RPC address, log path) once its RPC port answers. It prints
    nothing one could wait for."""
    port = free_port()
    fd, log_path = tempfile.mkstemp(prefix="gostore-bench-mooncake-master-", suffix=".log")
    proc = subprocess.Popen(
        [os.path.join(wheel, "mooncake", "mooncake_master"), f"--rpc_port={port}",
         f"--metrics_port={free_port()}", "--enable_http_metadata_server=false"],
        stdout=fd, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, env=env, **popen,
    )
    os.close(fd)
    deadline = time.monotonic() + 30
    while True:
        try:
            socket.create_connection(("127.0.0.1", port), 1).close()
            return proc, f"127.0.0.1:{port}", log_path
        except OSError:
            if proc.poll() is not None or time.monotonic() > deadline:
                proc.kill()
                proc.wait()
                raise RuntimeError(f"mooncake_master did not start: see {log_path}")
            time.sleep(0.05)
