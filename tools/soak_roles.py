"""soak_roles.py: the child processes of the chaos soak (tools/soak.py).

    python tools/soak_roles.py storage --master A --port P --segment N --parent PID
    python tools/soak_roles.py writer  --id I --master A --http H --keys N --seed S --log F --parent PID
    python tools/soak_roles.py reader  --id J --master A --writers W --keys N --seed S --log F --parent PID
    python tools/soak_roles.py exec --parent PID -- PROGRAM ARGS...

Each dies with the soak (PR_SET_PDEATHSIG) and prints one JSON line when
ready (``{"ready": true, ...}``). A *storage* client contributes a segment
and does nothing else until its stdin closes. A *writer* owns the keys
``w<I>/k<j>`` and writes new versions of them (put, upsert, batch puts and
upserts, removes) until it reads ``final`` on stdin; it then runs the final
phase (see soak_model's doc) and prints its summary line. A *reader* reads
random keys of every writer (get_into, batch_get_into) and checks every
byte until it reads ``stop``. ``exec`` runs a program (the master) so that
it, too, dies with the soak.

Writers and readers log one JSON list per operation to ``--log``:

    ["w", op, key, version, t0, t1, rc, segs]   a write; segs: the replicas'
                                                 segments after the ack (None:
                                                 unknown)
    ["x", key, t0, t1, rc]                       a remove
    ["r", op, key, t0, t1, rc, version, wrong, why]
                                                 a read (op: get, batch_get,
                                                 query_key): rc the bytes read
                                                 or a code; wrong: bytes that
                                                 differ from what was written
    ["f", key, ok, seconds, codes]               a key's final phase

Values derive from (key, version): a 32-byte header (magic, a hash of the
key, the version, the size) and pseudo-random bytes seeded by both, 1 KiB
to 2 MiB, so any reader can tell which version it got and check each byte.
"""

from __future__ import annotations

import argparse
import ctypes
import hashlib
import json
import os
import random
import signal
import struct
import sys
import threading
import time
import urllib.error
import urllib.parse
import urllib.request
from typing import IO, Dict, List, Optional, Tuple

MiB = 1 << 20
HEADER = struct.Struct("<8sQQQ")  # magic, key hash, version, size
MAGIC = b"gsoak\x00v1"
MAX_VALUE = 2 * MiB
MAX_BATCH = 6
NOT_FOUND = -704
ERROR_PAUSE = 0.01  # after a failed call (the master restarting, say), as a client would back off


# ---------------------------------------------------------------------------
# values


def _h64(text: str) -> int:
    return int.from_bytes(hashlib.blake2b(text.encode(), digest_size=8).digest(), "little")


def key_name(writer: int, index: int) -> str:
    return f"w{writer}/k{index:04d}"


def value_size(key: str, version: int) -> int:
    """1-64 KiB (55% of keys), 64-512 KiB (35%) or 512 KiB-2 MiB (10%); a
    key keeps its size (upserts rewrite in place, as KV-cache pages do)
    but for one version in twenty, which takes another size (an upsert that
    moves: the old ranges wait out --put_start_release_timeout_sec)."""
    rng = random.Random(_h64(f"size\0{key}"))
    if random.Random(_h64(f"moves\0{key}\0{version}")).random() < 0.05:
        rng = random.Random(_h64(f"size\0{key}\0{version}"))
    x = rng.random()
    if x < 0.55:
        return rng.randint(1 << 10, 64 << 10)
    if x < 0.90:
        return rng.randint(64 << 10, 512 << 10)
    return rng.randint(512 << 10, MAX_VALUE)


def make_value(key: str, version: int) -> bytes:
    size = value_size(key, version)
    body = random.Random(_h64(f"body\0{key}\0{version}")).randbytes(size - HEADER.size)
    return HEADER.pack(MAGIC, _h64(key), version, size) + body


def check_value(key: str, data: bytes) -> Tuple[Optional[int], int, str]:
    """``(version, wrong_bytes, why)`` of bytes read for ``key``: the version
    the header names, and how many bytes differ from that version's value
    (all of them when the header names no version of this key)."""
    if len(data) < HEADER.size:
        return None, len(data), "shorter than a header"
    magic, khash, version, size = HEADER.unpack_from(data)
    if magic != MAGIC or khash != _h64(key):
        return None, len(data), "header of another key or no header"
    if size != len(data) or size != value_size(key, version):
        return version, len(data), f"size {len(data)}, header says {size}"
    want = make_value(key, version)
    if data == want:
        return version, 0, ""
    wrong = sum(1 for a, b in zip(data, want) if a != b)
    first = next(i for i, (a, b) in enumerate(zip(data, want)) if a != b)
    return version, wrong, f"{wrong} bytes differ, first at offset {first}"


# ---------------------------------------------------------------------------
# process plumbing


def die_with_parent(parent: int) -> None:
    """SIGKILL this process when the soak dies (and exit now if it has)."""
    ctypes.CDLL(None).prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG
    if os.getppid() != parent:
        os._exit(1)


def say(obj: dict) -> None:
    sys.stdout.write(json.dumps(obj) + "\n")
    sys.stdout.flush()


def watch_stdin(words: Dict[str, threading.Event]) -> None:
    """Set ``words[line]`` for each line read; set them all at EOF."""

    def run() -> None:
        for line in sys.stdin:
            ev = words.get(line.strip())
            if ev:
                ev.set()
        for ev in words.values():
            ev.set()

    threading.Thread(target=run, daemon=True).start()


def open_store(master: str, segment: int, buffer: int, hostname: str = "127.0.0.1"):
    from gostore import MooncakeDistributedStore

    store = MooncakeDistributedStore()
    rc = store.setup(hostname, "P2PHANDSHAKE", segment, buffer, "tcp", "", master)
    if rc != 0:
        say({"ready": False, "rc": rc})
        sys.exit(1)
    return store


class Log:
    """The operation log: one JSON list per line, flushed every 64 lines."""

    def __init__(self, path: str) -> None:
        self._f: IO[str] = open(path, "w")
        self._n = 0

    def __call__(self, *rec: object) -> None:
        self._f.write(json.dumps(rec) + "\n")
        self._n += 1
        if self._n % 64 == 0:
            self._f.flush()

    def close(self) -> None:
        self._f.close()


class Registered:
    """A registered buffer of ``slots`` slots of MAX_VALUE bytes."""

    def __init__(self, store, slots: int) -> None:
        self.size = slots * MAX_VALUE
        self._buf = ctypes.create_string_buffer(self.size)
        self.addr = ctypes.addressof(self._buf)
        rc = store.register_buffer(self.addr, self.size)
        if rc != 0:
            raise RuntimeError(f"register_buffer: {rc}")

    def slot(self, i: int) -> int:
        return self.addr + i * MAX_VALUE

    def put(self, i: int, data: bytes) -> None:
        ctypes.memmove(self.slot(i), data, len(data))

    def get(self, i: int, n: int) -> bytes:
        return ctypes.string_at(self.slot(i), n)


def read_key(store, reg: Registered, key: str, log: Log) -> Tuple[int, Optional[int], int]:
    """get_into one key and check it: ``(rc, version, wrong_bytes)``, logged."""
    t0 = time.monotonic()
    rc = store.get_into(key, reg.slot(0), MAX_VALUE)
    t1 = time.monotonic()
    version, wrong, why = (None, 0, "") if rc <= 0 else check_value(key, reg.get(0, rc))
    log("r", "get", key, t0, t1, rc, version, wrong, why)
    return rc, version, wrong


# ---------------------------------------------------------------------------
# storage


def storage(args: argparse.Namespace) -> int:
    """Set up, as a supervisor restarting an engine would: retrying while
    the master still lists a dead predecessor's segment of the same name
    (-102) or cannot be reached (-900: the schedule may restart this client
    while the master is down). Then say ready and wait for stdin to close."""
    from gostore import MooncakeDistributedStore

    deadline = time.monotonic() + args.retry_s
    refused = 0
    while True:
        store = MooncakeDistributedStore()
        rc = store.setup(f"127.0.0.1:{args.port}", "P2PHANDSHAKE", args.segment, 4 * MiB, "tcp", "", args.master)
        if rc == 0:
            break
        store.close()
        if rc not in (-102, -900) or time.monotonic() > deadline:
            say({"ready": False, "rc": rc, "refused": refused})
            return 1
        refused += rc == -102
        time.sleep(0.2)
    say({"ready": True, "hostname": store.get_hostname(), "pid": os.getpid(), "refused": refused})
    for _ in sys.stdin:
        pass
    store.close()
    return 0


# ---------------------------------------------------------------------------
# writer


class Writer:
    """One writer's keys, what it believes of each, and its operations."""

    def __init__(self, args: argparse.Namespace) -> None:
        from gostore import ReplicateConfig

        self.args = args
        self.rng = random.Random(args.seed)
        self.store = open_store(args.master, 0, 32 * MiB)
        self.reg = Registered(self.store, MAX_BATCH)
        self.log = Log(args.log)
        self.keys = [key_name(args.id, j) for j in range(args.keys)]
        self.version = {k: 0 for k in self.keys}
        self.absent = {k: True for k in self.keys}  # surely absent: put, not upsert
        self.counts: Dict[str, List[int]] = {}
        self.failed_last = False
        self.config = ReplicateConfig

    def count(self, op: str, ok: bool, n: int = 1) -> None:
        c = self.counts.setdefault(op, [0, 0])
        c[0 if ok else 1] += n

    def segments(self, key: str) -> Optional[List[str]]:
        """The segments of the key's replicas, [] when the master has no
        such key (logged as a miss to be judged), None when it does not
        answer."""
        t0 = time.monotonic()
        url = f"http://{self.args.http}/query_key?key={urllib.parse.quote(key, safe='')}"
        try:
            with urllib.request.urlopen(url, timeout=2) as r:
                info = json.load(r)
        except urllib.error.HTTPError as e:
            if e.code == 404:
                self.log("r", "query_key", key, t0, time.monotonic(), NOT_FOUND, None, 0, "")
                return []
            return None
        except (OSError, ValueError):
            return None
        return sorted({r["segment"] for r in info.get("replicas") or []})

    def _written(self, op: str, key: str, version: int, t0: float, t1: float, rc: int) -> None:
        segs = self.segments(key) if rc == 0 else None
        self.log("w", op, key, version, t0, t1, rc, segs)
        self.failed_last = rc != 0
        self.absent[key] = False
        self.count(op, rc == 0)

    def write_one(self, key: str, config) -> int:
        self.version[key] += 1
        v = self.version[key]
        value = make_value(key, v)
        op = "put" if self.absent[key] else "upsert"
        t0 = time.monotonic()
        rc = (self.store.put if op == "put" else self.store.upsert)(key, value, config)
        self._written(op, key, v, t0, time.monotonic(), rc)
        return rc

    def write_batch(self, keys: List[str], config) -> None:
        for op, group in (("put_batch", [k for k in keys if self.absent[k]]),
                          ("upsert_batch", [k for k in keys if not self.absent[k]])):
            if not group:
                continue
            sizes = []
            for i, k in enumerate(group):
                self.version[k] += 1
                value = make_value(k, self.version[k])
                self.reg.put(i, value)
                sizes.append(len(value))
            call = self.store.batch_put_from if op == "put_batch" else self.store.batch_upsert_from
            t0 = time.monotonic()
            rcs = call(group, [self.reg.slot(i) for i in range(len(group))], sizes, config)
            t1 = time.monotonic()
            for k, rc in zip(group, rcs):
                self._written(op, k, self.version[k], t0, t1, rc)

    def remove(self, key: str) -> int:
        t0 = time.monotonic()
        rc = self.store.remove(key)
        self.log("x", key, t0, time.monotonic(), rc)
        if rc in (0, NOT_FOUND):
            self.absent[key] = True
        elif rc not in (-706, -703, -708):  # refused: still there; otherwise: unknown
            self.absent[key] = False
        self.count("remove", rc in (0, NOT_FOUND, -706))
        return rc

    def step(self) -> None:
        if self.failed_last:
            time.sleep(ERROR_PAUSE)
        rng = self.rng
        config = self.config(replica_num=rng.choice((1, 1, 2)))
        x = rng.random()
        if x < 0.05:
            key = rng.choice(self.keys)
            if not self.absent[key]:
                self.remove(key)
                return
        if x < 0.30:
            self.write_batch(rng.sample(self.keys, rng.randint(2, MAX_BATCH)), config)
        else:
            self.write_one(rng.choice(self.keys), config)

    def final(self, bound: float) -> Dict[str, object]:
        """Every key: read it, upsert a fresh version and read that back
        (all judged like any read), then remove it; within ``bound``
        seconds in all. Keys left undone are stuck."""
        start = time.monotonic()
        deadline = start + bound
        codes: Dict[str, List[int]] = {k: [] for k in self.keys}
        pending = list(self.keys)
        for k in pending:
            read_key(self.store, self.reg, k, self.log)
        phase = {k: "write" for k in self.keys}
        config = self.config(replica_num=1)
        while pending and time.monotonic() < deadline:
            left, progress = [], False
            for k in pending:
                if phase[k] == "write":
                    rc = self.write_one(k, config)
                    if rc == 0:
                        rc, version, _ = read_key(self.store, self.reg, k, self.log)
                        if version == self.version[k]:
                            phase[k] = "remove"
                            left.append(k)
                            progress = True
                            continue
                else:
                    rc = self.remove(k)
                    if rc in (0, NOT_FOUND):  # NOT_FOUND: lost since the read back (judged there)
                        self.log("f", k, True, time.monotonic() - start, codes[k][-8:])
                        progress = True
                        continue
                codes[k].append(rc)
                left.append(k)
            if not progress:
                time.sleep(0.1)  # leases to run out, or a fault to clear: retry, bounded by deadline
            pending = left
        for k in pending:
            self.log("f", k, False, time.monotonic() - start, codes[k][-8:])
        return {"stuck": pending, "final_s": time.monotonic() - start}


def writer(args: argparse.Namespace) -> int:
    w = Writer(args)
    final = threading.Event()
    watch_stdin({"final": final})
    say({"ready": True, "pid": os.getpid()})
    while not final.is_set():
        w.step()
    result = w.final(args.final_bound)
    w.log.close()
    say({"done": True, "ops": w.counts, **result})
    w.store.close()
    return 0


# ---------------------------------------------------------------------------
# reader


def reader(args: argparse.Namespace) -> int:
    rng = random.Random(args.seed)
    store = open_store(args.master, 0, 32 * MiB)
    reg = Registered(store, 8)
    log = Log(args.log)
    keys = [key_name(w, j) for w in range(args.writers) for j in range(args.keys)]
    counts: Dict[str, Dict[str, int]] = {}
    wrong_total = 0
    stop = threading.Event()
    watch_stdin({"stop": stop})
    say({"ready": True, "pid": os.getpid()})

    def count(op: str, rc: int) -> None:
        c = counts.setdefault(op, {"ok": 0, "miss": 0, "error": 0})
        c["ok" if rc > 0 else "miss" if rc == NOT_FOUND else "error"] += 1

    while not stop.is_set():
        if rng.random() < 0.7:
            rc, _, wrong = read_key(store, reg, rng.choice(keys), log)
            count("get", rc)
            wrong_total += wrong
            if rc < 0 and rc != NOT_FOUND:
                time.sleep(ERROR_PAUSE)
            continue
        batch = rng.sample(keys, rng.randint(2, 8))
        t0 = time.monotonic()
        rcs = store.batch_get_into(batch, [reg.slot(i) for i in range(len(batch))], [MAX_VALUE] * len(batch))
        t1 = time.monotonic()
        for i, (k, rc) in enumerate(zip(batch, rcs)):
            version, wrong, why = (None, 0, "") if rc <= 0 else check_value(k, reg.get(i, rc))
            log("r", "batch_get", k, t0, t1, rc, version, wrong, why)
            count("batch_get", rc)
            wrong_total += wrong
        if any(rc < 0 and rc != NOT_FOUND for rc in rcs):
            time.sleep(ERROR_PAUSE)
    log.close()
    say({"done": True, "ops": counts, "wrong_bytes": wrong_total})
    store.close()
    return 0


# ---------------------------------------------------------------------------


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    sub = ap.add_subparsers(dest="role", required=True)
    for role in ("storage", "writer", "reader", "exec"):
        p = sub.add_parser(role)
        p.add_argument("--parent", type=int, required=True)
        if role == "exec":
            p.add_argument("argv", nargs=argparse.REMAINDER)
            continue
        p.add_argument("--master", required=True)
        if role == "storage":
            p.add_argument("--port", type=int, required=True)
            p.add_argument("--segment", type=int, required=True)
            p.add_argument("--retry-s", type=float, default=10.0,
                           help="how long setup retries while the segment's name is taken (-102) or the master is down (-900)")
            continue
        p.add_argument("--id", type=int, required=True)
        p.add_argument("--keys", type=int, required=True)
        p.add_argument("--seed", type=int, required=True)
        p.add_argument("--log", required=True)
        if role == "writer":
            p.add_argument("--http", required=True)
            p.add_argument("--final-bound", type=float, default=30.0)
        else:
            p.add_argument("--writers", type=int, required=True)
    args = ap.parse_args()
    die_with_parent(args.parent)
    if args.role == "exec":
        argv = args.argv[1:] if args.argv[:1] == ["--"] else args.argv
        os.execv(argv[0], argv)
    return {"storage": storage, "writer": writer, "reader": reader}[args.role](args)


if __name__ == "__main__":
    sys.exit(main())
