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

Then, where etcd-server is installed, the same under HA: three etcd
members on loopback, a leader and a standby started with --enable_ha, the
client on an etcd:// address; the leader is killed with SIGKILL and the
figures are kill -> standby leading (its floor is the lease,
--ha_lease_ttl_ms), kill -> first get, kill -> first put, objects lost, and
the put rate with the log on etcd.

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


def start_master(*flags: str, wait: bool = True) -> subprocess.Popen:
    """The real gostore-master with flags; with wait, once it listens (a
    standby under --enable_ha listens only once it leads)."""
    from gostore import master_binary_path

    proc = subprocess.Popen(
        [master_binary_path(), "--rpc_address=127.0.0.1", "--metrics_port=-1", "--log_level=warn", *flags],
        stdout=subprocess.PIPE, stdin=subprocess.DEVNULL, text=True, preexec_fn=_pdeathsig,
    )
    if wait:
        ready(proc)
    return proc


def ready(proc: subprocess.Popen) -> None:
    """Wait for a master's "listening" line and note its RPC address."""
    line = _readline_timeout(proc, 60)
    if "rpc=" not in line:
        proc.kill()
        raise RuntimeError(f"gostore-master did not start: {line!r}")
    proc.rpc_addr = dict(f.split("=", 1) for f in line.split() if "=" in f)["rpc"]  # type: ignore[attr-defined]


def start_etcd(base: str) -> tuple:
    """Three etcd members on loopback; their processes and "a;b;c"."""
    import socket
    import urllib.request

    def port() -> int:
        with socket.socket() as sk:
            sk.bind(("127.0.0.1", 0))
            return sk.getsockname()[1]

    names = ["e0", "e1", "e2"]
    client = [f"127.0.0.1:{port()}" for _ in names]
    peer = [f"127.0.0.1:{port()}" for _ in names]
    initial = ",".join(f"{n}=http://{p}" for n, p in zip(names, peer))
    procs = [subprocess.Popen(
        [shutil.which("etcd"), "--name", n, "--data-dir", os.path.join(base, n), "--listen-client-urls", f"http://{c}",
         "--advertise-client-urls", f"http://{c}", "--listen-peer-urls", f"http://{p}",
         "--initial-advertise-peer-urls", f"http://{p}", "--initial-cluster", initial, "--log-level", "error"],
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, preexec_fn=_pdeathsig)
        for n, c, p in zip(names, client, peer)]
    for c in client:
        deadline = time.monotonic() + 30
        while True:
            try:
                with urllib.request.urlopen(f"http://{c}/health", timeout=1) as r:
                    if r.status == 200:
                        break
            except OSError:
                pass
            if time.monotonic() > deadline:
                raise RuntimeError(f"etcd at {c} did not start")
            time.sleep(0.05)
    return procs, ";".join(client)


def failover(objects: int, size: int, lease_ms: int) -> dict:
    """kill -9 an HA leader under a live client: how long until a standby
    serves gets and puts, and what was lost."""
    from gostore import MooncakeDistributedStore

    base = tempfile.mkdtemp(prefix="gostore-ha-bench-")
    procs, endpoints = start_etcd(base)
    try:
        # Each master has its own state directory (its snapshots) and an
        # HTTP port (where a leader serves them): --enable_ha wants both.
        ha_flags = ("--rpc_port=0", "--metrics_port=0", "--enable_ha", f"--etcd_endpoints={endpoints}",
                    f"--ha_lease_ttl_ms={lease_ms}")
        a = start_master(*ha_flags, f"--snapshot_backup_dir={base}/a")
        s = MooncakeDistributedStore()
        assert s.setup("127.0.0.1", "P2PHANDSHAKE", 512 << 20, 64 << 20, "tcp", "", "etcd://" + endpoints) == 0
        keys = [f"ha/{i}" for i in range(objects)]
        t0 = time.monotonic()
        for lo in range(0, len(keys), 64):
            batch = keys[lo:lo + 64]
            assert s.put_batch(batch, [value(lo + j, size) for j in range(len(batch))]) == 0
        put_s = time.monotonic() - t0
        log_bytes = etcd_log_bytes(endpoints.split(";")[0])
        b = start_master(*ha_flags, f"--snapshot_backup_dir={base}/b", wait=False)
        time.sleep(0.5)  # b campaigns (and waits) before the kill
        kill_at = time.monotonic()
        a.send_signal(signal.SIGKILL)
        a.wait()
        ready(b)
        leads_s = time.monotonic() - kill_at
        while s.get(keys[0]) != value(0, size):
            time.sleep(0.01)
        first_get_s = time.monotonic() - kill_at
        while s.put("ha/new", b"n" * size) != 0:
            time.sleep(0.01)
        first_put_s = time.monotonic() - kill_at
        got = s.get_batch(keys)
        lost = sum(1 for i, g in enumerate(got) if g != value(i, size))
        s.close()
        b.kill()
        b.wait()
    finally:
        for p in procs:
            p.kill()
            p.wait()
        shutil.rmtree(base, ignore_errors=True)
    return {"lease_ms": lease_ms, "objects": objects, "puts_per_s_with_etcd_log": objects / put_s,
            "kill_to_standby_leading_ms": leads_s * 1000, "kill_to_first_get_ms": first_get_s * 1000,
            "kill_to_first_put_ms": first_put_s * 1000, "objects_lost": lost,
            "etcd_log_bytes_per_object": log_bytes / objects}


def put_rate(master: str, objects: int, size: int, batch: int = 64) -> float:
    """Puts per second of a client writing objects in batches (over TCP),
    values made before the clock starts; the keys are removed after."""
    from gostore import MooncakeDistributedStore

    s = MooncakeDistributedStore()
    assert s.setup("127.0.0.1", "P2PHANDSHAKE", 512 << 20, 64 << 20, "tcp", "", master) == 0
    batches = [([f"rate/{lo + j}" for j in range(min(batch, objects - lo))],
                [value(lo + j, size) for j in range(min(batch, objects - lo))]) for lo in range(0, objects, batch)]
    t0 = time.monotonic()
    for keys, values in batches:
        assert s.put_batch(keys, values) == 0
    rate = objects / (time.monotonic() - t0)
    s.remove_all()
    s.close()
    return rate


def fsync_rate(directory: str, seconds: float = 0.5) -> float:
    """4 KiB append+fsync round trips per second in directory: the floor
    of a synced journal's one sequential writer."""
    path = os.path.join(directory, "fsync-probe")
    fd = os.open(path, os.O_CREAT | os.O_WRONLY | os.O_APPEND, 0o600)
    try:
        n, t0, block = 0, time.monotonic(), b"\0" * 4096
        while time.monotonic() - t0 < seconds:
            os.write(fd, block)
            os.fsync(fd)
            n += 1
        return n / (time.monotonic() - t0)
    finally:
        os.close(fd)
        os.remove(path)


def log_cost(rounds: int = 3) -> dict:
    """The change log's cost on batched puts: one client, batches of 32,
    against masters with no log, a local journal, one acknowledging before
    the sync, and (with etcd) the log on etcd, measured in turns, each
    figure the median of its rounds, beside the disk's fsync rate."""
    base = tempfile.mkdtemp(prefix="gostore-logcost-bench-")
    etcd = []
    masters = {}
    try:
        masters["no log"] = start_master("--rpc_port=0")
        masters["journal"] = start_master("--rpc_port=0", f"--snapshot_backup_dir={base}/j")
        masters["journal, ack before sync"] = start_master(
            "--rpc_port=0", f"--snapshot_backup_dir={base}/ja", "--journal_ack_before_sync")
        if shutil.which("etcd"):
            etcd, endpoints = start_etcd(base)
            m = start_master("--rpc_port=0", "--metrics_port=0", "--enable_ha", f"--etcd_endpoints={endpoints}",
                             f"--snapshot_backup_dir={base}/ha")
            masters["log on etcd"] = m
            m.client_addr = "etcd://" + endpoints  # type: ignore[attr-defined]
        fsyncs = fsync_rate(base)
        shapes = [(16 << 10, 1024), (1 << 20, 128)]
        rates: dict = {f"{size}": {name: [] for name in masters} for size, _ in shapes}
        for _ in range(rounds):
            for size, objects in shapes:
                for name, m in masters.items():
                    addr = getattr(m, "client_addr", m.rpc_addr)
                    rates[f"{size}"][name].append(put_rate(addr, objects, size, batch=32))
        return {"batch": 32, "rounds": rounds, "fsyncs_per_s": fsyncs,
                "puts_per_s": {size: {name: sorted(v)[len(v) // 2] for name, v in by.items()}
                               for size, by in rates.items()}}
    finally:
        for p in list(masters.values()) + etcd:
            p.kill()
            p.wait()
        shutil.rmtree(base, ignore_errors=True)


def etcd_log_bytes(endpoint: str) -> int:
    """The bytes of the master's log values on etcd (keys included)."""
    import base64
    import json
    import urllib.request

    prefix = b"/gostore/mooncake_cluster/master/log/"
    end = prefix[:-1] + bytes([prefix[-1] + 1])
    body = json.dumps({"key": base64.b64encode(prefix).decode(), "range_end": base64.b64encode(end).decode()})
    req = urllib.request.Request(f"http://{endpoint}/v3/kv/range", data=body.encode(), method="POST")
    with urllib.request.urlopen(req, timeout=10) as r:
        kvs = json.load(r).get("kvs", [])
    return sum(len(base64.b64decode(kv["key"])) + len(base64.b64decode(kv.get("value", ""))) for kv in kvs)


def value(i: int, size: int) -> bytes:
    return (i.to_bytes(8, "little") * (size // 8 + 1))[:size]


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--objects", type=int, default=2000)
    ap.add_argument("--size", type=int, default=16 << 10)
    ap.add_argument("--json", default="")
    ap.add_argument("--lease-ms", type=int, default=5000, help="the HA leader's lease (the master's default)")
    args = ap.parse_args()
    from gostore import MooncakeDistributedStore

    state = tempfile.mkdtemp(prefix="gostore-restart-bench-")
    try:
        t0 = time.monotonic()
        bare = start_master("--rpc_port=0")
        start_s = time.monotonic() - t0
        off_rate = put_rate(bare.rpc_addr, args.objects, args.size)
        bare.kill()
        bare.wait()

        m = start_master("--rpc_port=0", f"--snapshot_backup_dir={os.path.join(state, 'dir')}")
        port = int(m.rpc_addr.rsplit(":", 1)[1])
        s = MooncakeDistributedStore()
        assert s.setup("127.0.0.1", "P2PHANDSHAKE", 512 << 20, 64 << 20, "tcp", "", m.rpc_addr) == 0
        keys = [f"restart/{i}" for i in range(args.objects)]
        t0 = time.monotonic()
        for lo in range(0, len(keys), 64):
            batch = keys[lo:lo + 64]
            assert s.put_batch(batch, [value(lo + j, args.size) for j in range(len(batch))]) == 0
        journal_rate = args.objects / (time.monotonic() - t0)

        kill_at = time.monotonic()
        m.send_signal(signal.SIGKILL)
        m.wait()
        m2 = start_master(f"--rpc_port={port}", f"--snapshot_backup_dir={os.path.join(state, 'dir')}")
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

    ha = None
    if shutil.which("etcd"):
        ha = failover(args.objects, args.size, args.lease_ms)
    cost = log_cost()

    print(f"\nputs of {args.size} bytes in batches of 64, one client: no journal {off_rate:8.0f} /s, "
          f"local journal {journal_rate:8.0f} /s ({100 * journal_rate / off_rate:.0f}%)"
          + ("" if ha is None else f", log on etcd {ha['puts_per_s_with_etcd_log']:8.0f} /s "
             f"({100 * ha['puts_per_s_with_etcd_log'] / off_rate:.0f}%)"))
    print(f"\nmaster restart on its state directory: {args.objects} objects of {args.size} bytes")
    print(f"  a bare master starts in            {start_s * 1000:8.0f} ms (the floor)")
    print(f"  kill -> restarted master listening {listening_s * 1000:8.0f} ms")
    print(f"  kill -> first get of an old object {first_get_s * 1000:8.0f} ms")
    print(f"  kill -> first new put              {first_put_s * 1000:8.0f} ms")
    print(f"  objects lost                       {lost:8d} (must be 0)")
    if ha is None:
        print("\nfailover on etcd: skipped (etcd-server is not installed)")
    else:
        print(f"\nfailover on etcd (three members, lease {ha['lease_ms']} ms): kill -9 the leader under a live client")
        print(f"  puts of {args.size} bytes with the log on etcd {ha['puts_per_s_with_etcd_log']:8.0f} /s")
        print(f"  kill -> standby leading            {ha['kill_to_standby_leading_ms']:8.0f} ms (the floor: the lease)")
        print(f"  kill -> first get of an old object {ha['kill_to_first_get_ms']:8.0f} ms")
        print(f"  kill -> first new put              {ha['kill_to_first_put_ms']:8.0f} ms")
        print(f"  objects lost                       {ha['objects_lost']:8d} (must be 0)")
        print(f"  bytes on etcd per object written   {ha['etcd_log_bytes_per_object']:8.0f} (the log: start and end records)")
    names = list(next(iter(cost["puts_per_s"].values())))
    print(f"\nthe change log's cost on batched puts: one client, batches of {cost['batch']}, tcp, median of "
          f"{cost['rounds']} rounds in turns; this disk does {cost['fsyncs_per_s']:.0f} 4 KiB write+fsync/s")
    print(f"{'value':>8} " + " ".join(f"{n:>26}" for n in names))
    for size, by in cost["puts_per_s"].items():
        off = by["no log"]
        cells = [f"{v:10.0f} /s ({100 * v / off:3.0f}%)" for v in by.values()]
        print(f"{int(size) >> 10:>5} KiB " + " ".join(f"{c:>26}" for c in cells))
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"objects": args.objects, "size": args.size, "bare_start_ms": start_s * 1000,
                       "kill_to_listening_ms": listening_s * 1000, "kill_to_first_get_ms": first_get_s * 1000,
                       "kill_to_first_put_ms": first_put_s * 1000, "objects_lost": lost, "failover": ha,
                       "puts_per_s_no_journal": off_rate, "puts_per_s_local_journal": journal_rate,
                       "log_cost": cost}, f, indent=2)
    return 0


if __name__ == "__main__":
    sys.exit(main())
