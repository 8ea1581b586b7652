"""A gostore client in its own process, driven over JSON lines.

Started by the tests (``conftest.Peer``) as::

    python tests/peer.py --master IP:PORT [--segment 64MB] [--buffer 16MB]
                         [--hostname 127.0.0.1] [--ssd PATH] [--protocol tcp]

(``--tenant NAME``: setup's ``tenant_id``; ``--ssd`` turns the SSD tier on: ``setup(..., enable_ssd_offload=True,
ssd_offload_path=PATH)``; its settings come from the MOONCAKE_OFFLOAD_*
environment; ``--protocol``: setup's protocol, ``ucx`` for the UCX route.)

It calls ``setup()`` against the master and prints one JSON line
``{"ready": true, "rc": 0, "hostname": "host:port", "pid": N}`` (or ``"ready":
false`` with the setup error, then exits). Then it reads one JSON command per
line on stdin and answers one JSON line on stdout per command:

==================  ====================================================
``put``             ``key``, ``hex`` [, ``replica_num``, ``preferred_segment``]
                    -> ``{"rc": int}``
``get``             ``key`` -> ``{"hex": str}`` ("" on a miss)
``is_exist``        ``key`` -> ``{"rc": int}``
``get_size``        ``key`` -> ``{"rc": int}``
``remove``          ``key`` [, ``force``] -> ``{"rc": int}``
``put_pattern``     ``key``, ``size``, ``seed`` [, ``replica_num``,
                    ``preferred_segment``] -> ``{"rc": int}``
``check_pattern``   ``key``, ``size``, ``seed`` -> ``{"ok": bool, "size": int}``
``unregistered``    ``key``, ``size``, ``seed`` [, config as ``put``]: put_from
                    out of memory never registered, then get_into other such
                    memory -> ``{"put": rc, "get": rc, "ok": bytes equal}``
``batch_pattern``   ``keys``, ``size``, ``seed`` [, config as ``put``]: put_batch
                    of a pattern per key (seed + index), then get_batch ->
                    ``{"put": [rc...], "ok": [bytes equal...]}``
``get_batch_pattern`` ``keys``, ``size``, ``seed``: get_batch, each checked
                    against the pattern of seed + index -> ``{"ok": [bytes equal...]}``
``registered``      ``keys``, ``size``, ``seed`` [, config as ``put``]:
                    batch_put_from out of a registered buffer, then
                    batch_get_into another -> ``{"put": [rc...], "get":
                    [rc...], "ok": bytes equal}``
``transport_info``  -> ``{"info": store.transport_info()}``
``disk_reads``      -> ``{"n": store.get_offload_rpc_read_count()}``
``allocate_segment`` ``size`` -> ``store.allocate_and_mount_segment(size)``
``unmount_segment``  ``ids`` [, ``free``] -> ``{"rc": int}``
``upsert``          ``key``, ``hex`` [, ``replica_num``, ``preferred_segment``,
                    ``hard_pin``, ``soft_pin``] -> ``{"rc": int}``
``upsert_pattern``  ``key``, ``size``, ``seed`` [, config as ``upsert``] -> ``{"rc": int}``
``upsert_loop``     ``key``, ``size``, ``seeds``, ``iters`` [, ``min_ok``,
                    ``max_seconds``]: ``iters`` upserts cycling through the
                    seeds' patterns (the next seed only after a success), and
                    more until ``min_ok`` returned 0 or ``max_seconds`` pass
                    -> ``{"codes": {"rc": count}, "last_ok_seed": seed of the
                    last upsert that returned 0 (or null)}``
``read_loop``       ``key``, ``size``, ``seeds``, ``threads``, ``seconds`` [,
                    ``stop_file``, ``read_file``]: ``threads`` threads ``get``
                    the key until ``seconds`` pass or ``stop_file`` exists
                    (``read_file`` is created at the first read that
                    matched a pattern); each read must be
                    ``b""`` or exactly one of the patterns -> ``{"reads",
                    "empty", "match": {"seed": n}, "bad": n, "bad_samples"}``
``copy_task``       ``key``, ``targets`` -> ``{"id": [high, low], "rc": int}``
``move_task``       ``key``, ``source``, ``target`` -> ``{"id": [high, low], "rc": int}``
``query_task``      ``id`` -> ``{"rc": int, "status": str, "task_error": str}``
``hostname``        -> ``{"hostname": str}``
``health``          -> ``{"rc": int}``
``mapped_segments`` -> ``{"names": [...]}``: the gostore memfds this process
                    has mapped (its own segment, plus every peer segment it
                    reached through shared memory)
``batch_is_exist``  ``keys`` -> ``{"rc": [int...]}``
``remove_by_regex`` ``pattern`` [, ``force``] -> ``{"rc": int}``
``remove_all``      [``force``] -> ``{"rc": int}``
``close``           -> ``{"rc": int}``
``exit``            -> ``{"rc": 0}``, then the process exits
==================  ====================================================

Any exception is answered as ``{"error": "<traceback>"}`` so that the test
shows what went wrong in the peer. Diagnostics go to stderr only: stdout
carries nothing but answers.
"""

from __future__ import annotations

import argparse
import json
import random
import sys
import time
import traceback


def pattern(seed: int, size: int) -> bytes:
    """``size`` deterministic pseudo-random bytes for ``seed`` (no repeats)."""
    return random.Random(seed).randbytes(size)


def mapped_segments() -> list:
    names = set()
    with open("/proc/self/maps") as f:
        for line in f:
            parts = line.split(None, 5)
            if len(parts) == 6 and "/memfd:gostore:" in parts[5]:
                name = parts[5].strip().split("/memfd:gostore:", 1)[1]
                names.add(name.replace(" (deleted)", ""))
    return sorted(names)


def _config(cmd: dict):
    from gostore import ReplicateConfig

    return ReplicateConfig(
        replica_num=int(cmd.get("replica_num", 1)),
        preferred_segment=cmd.get("preferred_segment", "") or "",
        with_hard_pin=bool(cmd.get("hard_pin", False)),
        with_soft_pin=bool(cmd.get("soft_pin", False)),
    )


def read_loop(store, key: str, size: int, seeds: list, threads: int, seconds: float,
              stop_file: str = "", read_file: str = "") -> dict:
    """Concurrent gets of ``key``; classifies every result (see the op table)."""
    import os
    import threading
    import time

    versions = [(int(seed), pattern(int(seed), size)) for seed in seeds]
    lock = threading.Lock()
    stats = {"reads": 0, "empty": 0, "match": {}, "bad": 0, "bad_samples": []}
    deadline = time.monotonic() + seconds

    def reader() -> None:
        n = 0
        while time.monotonic() < deadline:
            n += 1
            if stop_file and n % 4 == 0 and os.path.exists(stop_file):
                break
            got = store.get(key)
            which = None
            if got:
                for seed, v in versions:
                    if got == v:
                        which = seed
                        break
            with lock:
                stats["reads"] += 1
                if not got:
                    stats["empty"] += 1
                elif which is None:
                    stats["bad"] += 1
                    if len(stats["bad_samples"]) < 5:
                        stats["bad_samples"].append(_describe_bad(got, versions))
                else:
                    m = stats["match"]
                    m[str(which)] = m.get(str(which), 0) + 1
                    if read_file and not os.path.exists(read_file):
                        open(read_file, "w").close()

    ts = [threading.Thread(target=reader) for _ in range(threads)]
    for t in ts:
        t.start()
    for t in ts:
        t.join()
    return stats


def _describe_bad(got: bytes, versions: list) -> dict:
    """Which version each 64 KiB block of a torn read came from."""
    blk = 64 << 10
    blocks = []
    for off in range(0, len(got), blk):
        src = "?"
        for seed, v in versions:
            if got[off:off + blk] == v[off:off + blk]:
                src = seed
                break
        if not blocks or blocks[-1][0] != src:
            blocks.append([src, off])
    return {"size": len(got), "runs": blocks[:20]}


def handle(store, cmd: dict) -> dict:
    op = cmd["op"]
    if op == "put":
        return {"rc": store.put(cmd["key"], bytes.fromhex(cmd["hex"]), _config(cmd))}
    if op == "get":
        return {"hex": store.get(cmd["key"]).hex()}
    if op == "is_exist":
        return {"rc": store.is_exist(cmd["key"])}
    if op == "get_size":
        return {"rc": store.get_size(cmd["key"])}
    if op == "remove":
        return {"rc": store.remove(cmd["key"], bool(cmd.get("force", False)))}
    if op == "put_pattern":
        data = pattern(int(cmd["seed"]), int(cmd["size"]))
        return {"rc": store.put(cmd["key"], data, _config(cmd))}
    if op == "check_pattern":
        got = store.get(cmd["key"])
        want = pattern(int(cmd["seed"]), int(cmd["size"]))
        return {"ok": got == want, "size": len(got)}
    if op == "unregistered":
        import ctypes

        size = int(cmd["size"])
        data = pattern(int(cmd["seed"]), size)
        src, dst = ctypes.create_string_buffer(data, size), ctypes.create_string_buffer(size)
        put = store.put_from(cmd["key"], ctypes.addressof(src), size, _config(cmd))
        got = store.get_into(cmd["key"], ctypes.addressof(dst), size)
        return {"put": put, "get": got, "ok": dst.raw == data}
    if op == "batch_pattern":
        keys, size, seed = list(cmd["keys"]), int(cmd["size"]), int(cmd["seed"])
        datas = [pattern(seed + i, size) for i in range(len(keys))]
        put = store.put_batch(keys, datas, _config(cmd))
        got = store.get_batch(keys)
        return {"put": put if isinstance(put, list) else [put] * len(keys),
                "ok": [g == d for g, d in zip(got, datas)]}
    if op == "get_batch_pattern":
        keys, size, seed = list(cmd["keys"]), int(cmd["size"]), int(cmd["seed"])
        got = store.get_batch(keys)
        return {"ok": [g == pattern(seed + i, size) for i, g in enumerate(got)]}
    if op == "registered":
        import ctypes

        keys, size, seed = list(cmd["keys"]), int(cmd["size"]), int(cmd["seed"])
        n = len(keys)
        data = b"".join(pattern(seed + i, size) for i in range(n))
        src, dst = ctypes.create_string_buffer(data, n * size), ctypes.create_string_buffer(n * size)
        a, b = ctypes.addressof(src), ctypes.addressof(dst)
        assert store.register_buffer(a, n * size) == 0 and store.register_buffer(b, n * size) == 0
        try:
            put = store.batch_put_from(keys, [a + i * size for i in range(n)], [size] * n, _config(cmd))
            got = store.batch_get_into(keys, [b + i * size for i in range(n)], [size] * n)
        finally:
            store.unregister_buffer(a)
            store.unregister_buffer(b)
        return {"put": list(put), "get": list(got), "ok": dst.raw == data}
    if op == "allocate_segment":
        return store.allocate_and_mount_segment(int(cmd["size"]))
    if op == "unmount_segment":
        unmount = store.unmount_and_free_segment if cmd.get("free") else store.unmount_segment
        return {"rc": unmount(list(cmd["ids"]))}
    if op == "disk_reads":
        return {"n": store.get_offload_rpc_read_count()}
    if op == "transport_info":
        return {"info": store.transport_info()}
    if op == "upsert":
        return {"rc": store.upsert(cmd["key"], bytes.fromhex(cmd["hex"]), _config(cmd))}
    if op == "upsert_pattern":
        data = pattern(int(cmd["seed"]), int(cmd["size"]))
        return {"rc": store.upsert(cmd["key"], data, _config(cmd))}
    if op == "upsert_loop":
        seeds = [int(x) for x in cmd["seeds"]]
        datas = [pattern(x, int(cmd["size"])) for x in seeds]
        cfg = _config(cmd)
        codes: dict = {}
        last_ok = None
        ok = i = 0
        iters, min_ok = int(cmd["iters"]), int(cmd.get("min_ok", 0))
        deadline = time.monotonic() + float(cmd.get("max_seconds", 30))
        while i < iters or (ok < min_ok and time.monotonic() < deadline):
            i += 1
            rc = store.upsert(cmd["key"], datas[ok % len(datas)], cfg)
            codes[str(rc)] = codes.get(str(rc), 0) + 1
            if rc == 0:
                last_ok = seeds[ok % len(seeds)]
                ok += 1
        return {"codes": codes, "last_ok_seed": last_ok}
    if op == "read_loop":
        return read_loop(store, cmd["key"], int(cmd["size"]), list(cmd["seeds"]),
                         int(cmd.get("threads", 4)), float(cmd["seconds"]),
                         cmd.get("stop_file", ""), cmd.get("read_file", ""))
    if op == "copy_task":
        tid, rc = store.create_copy_task(cmd["key"], list(cmd["targets"]))
        return {"id": tid, "rc": rc}
    if op == "move_task":
        tid, rc = store.create_move_task(cmd["key"], cmd["source"], cmd["target"])
        return {"id": tid, "rc": rc}
    if op == "query_task":
        info, rc = store.query_task(cmd["id"])
        return {"rc": rc, "status": info.status.name if info else "",
                "task_error": info.message if info else ""}
    if op == "hostname":
        return {"hostname": store.get_hostname()}
    if op == "health":
        return {"rc": store.health_check()}
    if op == "mapped_segments":
        return {"names": mapped_segments()}
    if op == "close":
        return {"rc": store.close()}
    if op == "batch_is_exist":
        return {"rc": list(store.batch_is_exist(list(cmd["keys"])))}
    if op == "remove_by_regex":
        return {"rc": store.remove_by_regex(cmd["pattern"], bool(cmd.get("force", False)))}
    if op == "remove_all":
        return {"rc": store.remove_all(bool(cmd.get("force", False)))}
    raise ValueError(f"unknown op {op!r}")


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--master", required=True)
    ap.add_argument("--segment", default="64MB")
    ap.add_argument("--buffer", default="16MB")
    ap.add_argument("--hostname", default="127.0.0.1")
    ap.add_argument("--ssd", default=None)
    ap.add_argument("--protocol", default="tcp")
    ap.add_argument("--tenant", default=None)
    args = ap.parse_args()

    from gostore import MooncakeDistributedStore

    out = sys.stdout

    def answer(obj: dict) -> None:
        out.write(json.dumps(obj) + "\n")
        out.flush()

    def size(s: str):
        return int(s) if s.isdigit() else s

    store = MooncakeDistributedStore()
    ssd = {} if args.ssd is None else {"enable_ssd_offload": True, "ssd_offload_path": args.ssd}
    if args.tenant is not None:
        ssd["tenant_id"] = args.tenant
    rc = store.setup(args.hostname, "P2PHANDSHAKE", size(args.segment), size(args.buffer),
                     args.protocol, "", args.master, **ssd)
    import os

    if rc != 0:
        answer({"ready": False, "rc": rc, "pid": os.getpid()})
        return 1
    answer({"ready": True, "rc": rc, "hostname": store.get_hostname(), "pid": os.getpid()})

    for line in sys.stdin:
        line = line.strip()
        if not line:
            continue
        try:
            cmd = json.loads(line)
            if cmd.get("op") == "exit":
                answer({"rc": 0})
                break
            answer(handle(store, cmd))
        except Exception:  # report, keep serving
            answer({"error": traceback.format_exc()})
    store.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
