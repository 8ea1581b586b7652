#!/usr/bin/env python3
"""How long a lone master's restart takes the cluster, and what it loses
(make bench): a master with a state directory (``--snapshot_backup_dir``)
holds N objects a client wrote, is killed with SIGKILL, and is started
again on the same port and directory. Printed, beside the time a bare
master takes to start (the floor):

* kill -> the restarted master listening;
* kill -> the first successful get of an old object (the client found the
  new master by itself);
* kill -> the first successful put (the ranges of puts in flight at the
  kill are held out of use; the rest of the pool takes new objects at once);
* objects lost: every acknowledged object is read back and its bytes
  checked (must be 0).

It never fails on a number.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time

from bench import _pdeathsig, _readline_timeout  # the same child handling as bench.py


def start_master(state: str, port: int = 0) -> subprocess.Popen:
    from gostore import master_binary_path

    proc = subprocess.Popen(
        [master_binary_path(), "--rpc_address=127.0.0.1", f"--rpc_port={port}", "--metrics_port=-1",
         "--log_level=warn", f"--snapshot_backup_dir={state}"],
        stdout=subprocess.PIPE, stdin=subprocess.DEVNULL, text=True, preexec_fn=_pdeathsig,
    )
    line = _readline_timeout(proc, 60)
    if "rpc=" not in line:
        proc.kill()
        raise RuntimeError(f"gostore-master did not start: {line!r}")
    proc.rpc_addr = dict(f.split("=", 1) for f in line.split() if "=" in f)["rpc"]  # type: ignore[attr-defined]
    return proc


def value(i: int, size: int) -> bytes:
    return (i.to_bytes(8, "little") * (size // 8 + 1))[:size]


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--objects", type=int, default=2000)
    ap.add_argument("--size", type=int, default=16 << 10)
    ap.add_argument("--json", default="")
    args = ap.parse_args()
    from gostore import MooncakeDistributedStore

    state = tempfile.mkdtemp(prefix="gostore-restart-bench-")
    try:
        t0 = time.monotonic()
        bare = start_master(os.path.join(state, "bare"))
        start_s = time.monotonic() - t0
        bare.kill()
        bare.wait()

        m = start_master(os.path.join(state, "dir"))
        port = int(m.rpc_addr.rsplit(":", 1)[1])
        s = MooncakeDistributedStore()
        assert s.setup("127.0.0.1", "P2PHANDSHAKE", 512 << 20, 64 << 20, "tcp", "", m.rpc_addr) == 0
        keys = [f"restart/{i}" for i in range(args.objects)]
        for lo in range(0, len(keys), 64):
            batch = keys[lo:lo + 64]
            assert s.put_batch(batch, [value(lo + j, args.size) for j in range(len(batch))]) == 0

        kill_at = time.monotonic()
        m.send_signal(signal.SIGKILL)
        m.wait()
        m2 = start_master(os.path.join(state, "dir"), port)
        listening_s = time.monotonic() - kill_at
        while s.get(keys[0]) != value(0, args.size):
            time.sleep(0.01)
        first_get_s = time.monotonic() - kill_at
        while s.put("restart/new", b"n" * args.size) != 0:
            time.sleep(0.01)
        first_put_s = time.monotonic() - kill_at
        got = s.get_batch(keys)
        lost = sum(1 for i, g in enumerate(got) if g != value(i, args.size))
        s.close()
        m2.kill()
        m2.wait()
    finally:
        shutil.rmtree(state, ignore_errors=True)

    print(f"\nmaster restart on its state directory: {args.objects} objects of {args.size} bytes")
    print(f"  a bare master starts in            {start_s * 1000:8.0f} ms (the floor)")
    print(f"  kill -> restarted master listening {listening_s * 1000:8.0f} ms")
    print(f"  kill -> first get of an old object {first_get_s * 1000:8.0f} ms")
    print(f"  kill -> first new put              {first_put_s * 1000:8.0f} ms")
    print(f"  objects lost                       {lost:8d} (must be 0)")
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"objects": args.objects, "size": args.size, "bare_start_ms": start_s * 1000,
                       "kill_to_listening_ms": listening_s * 1000, "kill_to_first_get_ms": first_get_s * 1000,
                       "kill_to_first_put_ms": first_put_s * 1000, "objects_lost": lost}, f, indent=2)
    return 0


if __name__ == "__main__":
    sys.exit(main())
