"""A ``NanoKVCache`` member in its own process, driven over JSON lines (the
plan API's counterpart of ``peer.py``)::

    python tests/nano_peer.py --master IP:PORT [--heap BYTES]

It prints ``{"ready": true, "rank": r, "segment": name, "pid": n}`` and then
answers one JSON line per command:

==============  ===========================================================
``open``        ``key``, ``bytes`` [, ``preferred``] -> the plan's fields,
                ``writable`` (bool)
``fill``        ``key``, ``seed``: the open plan's payload gets
                ``pattern(seed)``: through the writable view when there is
                one, else with ``write`` -> ``{}``
``fill_half``   as ``fill`` but only the first half (a producer interrupted)
``commit``      ``key`` -> ``{}``
``flush``       -> ``{}`` once the master has heard of every commit
``put``         ``key``, ``size``, ``seed`` [, ``preferred``] -> ``{}``
``get``         ``key`` -> ``{"hex": str | null}``
``check``       ``key``, ``size``, ``seed`` -> ``{"ok": bool, "none": bool}``
``locate``      ``key`` -> the ObjMeta's fields
``stats``       -> the stats dict
``remove``      ``key`` -> ``{}``
``exit``        -> ``{}``, then the process exits
==============  ===========================================================

An exception is answered ``{"error": "<type>: <message>", "type": name}``.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import random
import sys
import traceback


def pattern(seed: int, size: int) -> bytes:
    return random.Random(seed).randbytes(size)


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--master", required=True)
    ap.add_argument("--heap", type=int, default=64 << 20)
    args = ap.parse_args()
    from gostore import NanoKVCache

    def answer(obj) -> None:
        sys.stdout.write(json.dumps(obj) + "\n")
        sys.stdout.flush()

    cache = NanoKVCache(args.heap, master_server_addr=args.master)
    answer({"ready": True, "rank": cache.rank, "segment": cache.segment, "pid": os.getpid()})
    plans = {}
    for line in sys.stdin:
        if not line.strip():
            continue
        cmd = json.loads(line)
        op = cmd.pop("op")
        try:
            if op == "exit":
                answer({})
                break
            if op == "open":
                p = cache.open_for_write(cmd["key"], cmd["bytes"], preferred_segment=cmd.get("preferred"))
                plans[p.key] = p
                answer(dict(dataclasses.asdict(p), writable=cache.writable(p) is not None))
            elif op in ("fill", "fill_half"):
                p = plans[cmd["key"]]
                data = pattern(cmd["seed"], p.bytes_total)
                if op == "fill_half":
                    data = data[: len(data) // 2]
                view = cache.writable(p)
                if view is not None:
                    view[: len(data)] = data
                else:
                    cache.write(p, data)
                answer({})
            elif op == "commit":
                cache.commit(cmd["key"])
                answer({})
            elif op == "flush":
                cache.flush()
                answer({})
            elif op == "put":
                cache.put(cmd["key"], pattern(cmd["seed"], cmd["size"]), preferred_segment=cmd.get("preferred"))
                answer({})
            elif op == "get":
                v = cache.get(cmd["key"])
                answer({"hex": None if v is None else v.hex()})
            elif op == "check":
                v = cache.get(cmd["key"])
                answer({"none": v is None, "ok": v == pattern(cmd["seed"], cmd["size"])})
            elif op == "locate":
                answer(dataclasses.asdict(cache.get_location(cmd["key"])))
            elif op == "stats":
                answer(cache.stats())
            elif op == "remove":
                cache.remove(cmd["key"])
                answer({})
            else:
                raise ValueError(f"unknown op {op!r}")
        except Exception as e:  # report, keep serving
            answer({"error": f"{type(e).__name__}: {e}", "type": type(e).__name__,
                    "trace": traceback.format_exc()})
    cache.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
