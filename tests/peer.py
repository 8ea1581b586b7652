"""A gostore client in its own process, driven over JSON lines.

Started by the tests (``conftest.Peer``) as::

    python tests/peer.py --master IP:PORT [--segment 64MB] [--buffer 16MB]
                         [--hostname 127.0.0.1]

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
``hostname``        -> ``{"hostname": str}``
``health``          -> ``{"rc": int}``
``mapped_segments`` -> ``{"names": [...]}``: the gostore memfds this process
                    has mapped (its own segment, plus every peer segment it
                    reached through shared memory)
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
    )


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
    if op == "hostname":
        return {"hostname": store.get_hostname()}
    if op == "health":
        return {"rc": store.health_check()}
    if op == "mapped_segments":
        return {"names": mapped_segments()}
    if op == "close":
        return {"rc": store.close()}
    raise ValueError(f"unknown op {op!r}")


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--master", required=True)
    ap.add_argument("--segment", default="64MB")
    ap.add_argument("--buffer", default="16MB")
    ap.add_argument("--hostname", default="127.0.0.1")
    args = ap.parse_args()

    from gostore import MooncakeDistributedStore

    out = sys.stdout

    def answer(obj: dict) -> None:
        out.write(json.dumps(obj) + "\n")
        out.flush()

    def size(s: str):
        return int(s) if s.isdigit() else s

    store = MooncakeDistributedStore()
    rc = store.setup(args.hostname, "P2PHANDSHAKE", size(args.segment), size(args.buffer),
                     "tcp", "", args.master)
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
