"""KV events (--enable_kv_events, docs/master-flags.md "KV events"): the
real master binary publishes, over ZeroMQ PUB, numbered batches of
stored / removed / all-cleared events for the objects real clients put and
remove; a real pyzmq subscriber decodes them (msgpack), and one restarted
mid-stream recovers what it missed from the replay endpoint (vLLM's
protocol: a DEALER sends a start sequence, gets the batches from there and
an end marker).
"""

from __future__ import annotations

import json
import os
import socket
import time
from typing import List

import msgpack
import pytest
import zmq

from conftest import pattern, wait_until
from kv_events_sub import Batch, Subscriber, events_master, replay
from test_ssd_tier import OBJ, SEGMENT, disk_only, put_retrying, tier_env

def events_of(batches: List[Batch]) -> List[dict]:
    return [e for _, b in batches for e in b[1]]


def short(e: dict) -> tuple:
    """(type, medium, object_key) of an event."""
    return (e["type"], e.get("medium"), e.get("object_key"))


def status(m) -> dict:
    code, body = m.http("/kv_events/status")
    assert code == 200, body
    return json.loads(body)


def test_put_remove_clear_in_order(launcher):
    """Puts, removes and a remove-all give their events in order, in
    batches numbered one after another, each event with its medium, tenant,
    backend and key (a hash key also as its block hash); the object an
    event announces is readable with its bytes."""
    m = events_master(launcher, kv_events_block_size=16, kv_events_model_name="m1")
    store = launcher.store(m)
    sub = Subscriber(m, msgpack.unpackb)
    try:
        last = sub.sync(store)
        value = bytes(range(256)) * 16
        for k in ("k1", "12345", "0xff"):
            assert store.put(k, value) == 0
        assert store.remove("k1", force=True) == 0
        assert store.remove_all(force=True) > 0
        got = sub.until(lambda b: any(e["type"] == "AllBlocksCleared" for e in b[1][1]))
        assert [s for s, _ in got] == list(range(last + 1, last + 1 + len(got))), "sequence numbers skip"
        evs = events_of(got)
        head = [short(e) for e in evs[:4]]
        assert head == [("BlockStored", "cpu", "k1"), ("BlockStored", "cpu", "12345"),
                        ("BlockStored", "cpu", "0xff"), ("BlockRemoved", "cpu", "k1")], head
        removed = {e["object_key"] for e in evs[4:-1] if e["type"] == "BlockRemoved"}
        assert {"12345", "0xff"} <= removed and all(e["type"] == "BlockRemoved" for e in evs[4:-1])
        assert evs[-1]["type"] == "AllBlocksCleared" and evs[-1]["event_type"] == "cleared"

        stored = evs[1]
        assert stored["block_hashes"] == [12345] and stored["seq_hashes"] == [12345]
        assert evs[2]["block_hashes"] == [255]
        assert evs[0]["block_hashes"] == [] and evs[0]["seq_hashes"] == []  # not a hash: named by its key
        for e in evs[:-1]:
            assert e["backend_id"] == "test-backend" and e["tenant_id"] == "default", e
            assert e["block_size"] == 16 and e["model_name"] == "m1" and e["lora_name"] is None, e
        assert stored["event_type"] == "stored" and stored["token_ids"] == [] and stored["parent_block_hash"] is None
        ids = [e["event_id"] for e in evs]
        assert ids == sorted(ids) and len(set(ids)) == len(ids)
        ts, _, rank = got[0][1]
        assert isinstance(ts, float) and abs(ts - time.time()) < 60 and rank == 0
        st = status(m)
        assert st["enabled"] and st["published_batches"] >= len(got) and st["dropped_events"] == 0, st
        assert m.metric("gostore_master_kv_events_published_total") == st["published_events"]

        # The replay endpoint has them too, byte for byte the same batches.
        assert replay(m, last + 1, msgpack.unpackb)[: len(got)] == got
    finally:
        sub.close()


def test_values_readable_when_announced(launcher):
    """A stored event is sent once the object is readable: the reader that
    waits for it gets the bytes."""
    m = events_master(launcher)
    writer, reader = launcher.store(m), launcher.store(m)
    sub = Subscriber(m, msgpack.unpackb)
    try:
        sub.sync(writer)
        for i in range(5):
            value = bytes([i]) * 4096
            assert writer.put(f"v{i}", value) == 0
            sub.until(lambda b: any(e.get("object_key") == f"v{i}" for e in b[1][1]))
            assert reader.get(f"v{i}") == value
    finally:
        sub.close()


def test_restarted_subscriber_recovers_through_replay(launcher):
    """A subscriber that stops mid-stream and comes back sees a gap in the
    sequence numbers and fills it from the replay endpoint: every event it
    missed, in order."""
    m = events_master(launcher)
    store = launcher.store(m)
    sub = Subscriber(m, msgpack.unpackb)
    sub.sync(store)
    assert store.put("a", b"a" * 100) == 0
    sub.until(lambda b: any(e.get("object_key") == "a" for e in b[1][1]))
    seen = sub.batches[-1][0]
    sub.close()  # the subscriber is gone while these happen
    for k in ("b", "c", "d"):
        assert store.put(k, k.encode() * 100) == 0
    assert store.remove("a", force=True) == 0

    sub2 = Subscriber(m, msgpack.unpackb)
    try:
        first = sub2.sync(store)
        first_live = sub2.batches[0][0]
        assert first_live > seen + 1, (seen, first_live)  # a gap: it missed some
        missed = replay(m, seen + 1, msgpack.unpackb)
        seqs = [s for s, _ in missed]
        assert seqs == list(range(seen + 1, seqs[-1] + 1)) and seqs[-1] >= first, seqs
        evs = [short(e) for e in events_of([b for b in missed if b[0] < first_live])]
        mine = [x for x in evs if not (x[2] or "").startswith("probe-")]
        assert mine == [("BlockStored", "cpu", "b"), ("BlockStored", "cpu", "c"), ("BlockStored", "cpu", "d"),
                        ("BlockRemoved", "cpu", "a")], evs
        # From the start: the master's first batch clears what an earlier
        # master announced.
        start = replay(m, 0, msgpack.unpackb)
        assert start[0][0] > 1.6e15 and events_of(start[:1])[0]["type"] == "AllBlocksCleared"  # µs at start
    finally:
        sub2.close()


def test_disk_tier_events_carry_medium_disk(launcher, tmp_path):
    """A real SSD tier: an object's disk copy is announced stored with
    medium disk, and when eviction takes its memory copy, removed from cpu
    only; what the events leave it on (disk) serves its bytes."""
    m = events_master(launcher, enable_offload=True, tick_interval_ms=20, eviction_high_watermark_ratio=0.8,
                      eviction_ratio=0.2, client_ttl=2)
    ssd = str(tmp_path / "ssd")
    os.mkdir(ssd)
    launcher.peer(m, segment=str(SEGMENT), ssd=ssd, env=tier_env("bucket_storage_backend", False))
    writer = launcher.store(m, segment=0)  # every object lands on the holder
    sub = Subscriber(m, msgpack.unpackb)
    try:
        sub.sync(writer)
        key = "disk/0"
        put_retrying(writer, key, pattern(0, OBJ))
        filler = 0
        while not disk_only(m, key):
            assert filler < 8 * SEGMENT // OBJ, "the object never became disk-only"
            put_retrying(writer, f"fill/{filler}", pattern(100 + filler, OBJ))
            filler += 1
        got = sub.until(lambda b: any(e.get("object_key") == key and e["type"] == "BlockRemoved" for e in b[1][1]),
                        timeout=20)
        mine = [short(e) for e in events_of(sub.batches) if e.get("object_key") == key]
        assert mine == [("BlockStored", "cpu", key), ("BlockStored", "disk", key), ("BlockRemoved", "cpu", key)], mine
        assert got and writer.get(key) == pattern(0, OBJ)
    finally:
        sub.close()


def test_queue_overflow_drops_the_oldest(launcher):
    """With room for one event, a batch put of many keys overflows the
    queue: the oldest events go, counted (status and metric), the
    sequence numbers skip as many, and the newest event still arrives."""
    m = events_master(launcher, kv_events_queue_capacity=1)
    store = launcher.store(m)
    sub = Subscriber(m, msgpack.unpackb)
    try:
        last = sub.sync(store)
        keys = [f"o{i:04d}" for i in range(2000)]
        assert store.put_batch(keys, [b"x" * 64] * len(keys)) == 0
        got = sub.until(lambda b: any(e.get("object_key") == keys[-1] for e in b[1][1]))
        st = status(m)
        assert st["dropped_events"] > 0, st
        assert m.metric("gostore_master_kv_events_dropped_total") == st["dropped_events"]
        received = [e["object_key"] for e in events_of(got)]
        assert received == sorted(received) and received[-1] == keys[-1]
        gaps = sum(b[0] - a[0] - 1 for a, b in zip([(last, None)] + got, got))
        assert gaps == len(keys) - len(received) == st["dropped_events"], (gaps, len(received), st)
    finally:
        sub.close()


def test_bad_replay_requests_do_not_crash(launcher):
    """Garbage on the replay port, a request of the wrong shape: each is
    logged once and its connection closed; the master keeps serving and
    answers a good request."""
    m = events_master(launcher)
    store = launcher.store(m)
    assert store.put("x", b"x") == 0
    host, port = m.replay[len("tcp://"):].rsplit(":", 1)
    with socket.create_connection((host, int(port)), timeout=5) as s:
        s.sendall(b"\x00" * 7 + b"GET / HTTP/1.1\r\n\r\n" + b"\xff" * 100)
        s.settimeout(5)
        try:
            while s.recv(4096):
                pass
        except (ConnectionResetError, socket.timeout):
            pass
    ctx = zmq.Context()
    try:
        for frames in ([b"", b"\x00\x01"], [b"", b"\x00" * 8, b"more"], [b"\x00" * 8]):
            d = ctx.socket(zmq.DEALER)
            d.setsockopt(zmq.LINGER, 0)
            d.connect(m.replay)
            d.send_multipart(frames)
            assert not d.poll(300), "a bad request was answered"
            d.close()
    finally:
        ctx.term()
    wait_until(lambda: m.log().count("bad replay request") == 3, what="one log line per bad request")
    assert m.alive()
    got = replay(m, 0, msgpack.unpackb)
    assert any(e.get("object_key") == "x" for e in events_of(got))
    assert store.put("y", b"y") == 0 and m.alive()


# A ZMTP 3.0 greeting (NULL mechanism, not as server) and a frame header
# claiming 2^62 bytes: a peer that asks the master to allocate that much.
GREETING = b"\xff" + b"\x00" * 8 + b"\x7f" + b"\x03\x00" + b"NULL".ljust(20, b"\x00") + b"\x00" + b"\x00" * 31
HUGE_FRAME = b"\x02" + (1 << 62).to_bytes(8, "big")


@pytest.mark.parametrize("port", ["pub", "replay"])
def test_a_huge_frame_is_refused_not_allocated(launcher, port):
    """A peer on the PUB or the replay port whose frame header claims 2^62
    bytes is dropped with one log line before anything is allocated; the
    master keeps publishing to the subscriber it has."""
    m = events_master(launcher)
    store = launcher.store(m)
    sub = Subscriber(m, msgpack.unpackb)
    try:
        sub.sync(store)
        host, p = getattr(m, port)[len("tcp://"):].rsplit(":", 1)
        with socket.create_connection((host, int(p)), timeout=5) as s:
            assert len(GREETING) == 64
            s.sendall(GREETING + HUGE_FRAME)
            s.settimeout(5)
            try:
                while s.recv(4096):  # the master's greeting, then the close
                    pass
            except (ConnectionResetError, socket.timeout):
                pass
        wait_until(lambda: m.log().count("a frame of 4611686018427387904 bytes") == 1, what="one log line")
        assert m.alive()
        assert store.put("after", b"a") == 0
        sub.until(lambda b: any(e.get("object_key") == "after" for e in b[1][1]))
    finally:
        sub.close()


def test_flags_shape_the_events(launcher):
    """The stamping flags reach every event and batch; without the legacy
    fields an event has no engine tag; without object keys an event whose
    key is no block hash is not published, and counted as skipped."""
    m = events_master(launcher, kv_events_emit_legacy_compat=False, kv_events_emit_object_key=False,
                      kv_events_dp_rank=3, kv_events_lora_name="lora-a", kv_events_additional_salt="salt",
                      kv_events_tenant_id="t0", kv_events_model_name="m")
    store = launcher.store(m)
    sub = Subscriber(m, msgpack.unpackb)
    try:
        sub.sync(store, probe=lambda i: str(10**9 + i))  # keys that are hashes: published
        assert store.put("named", b"n") == 0
        assert store.put("0x2a", b"h") == 0
        got = sub.until(lambda b: any(e.get("seq_hashes") == [42] for e in b[1][1]))
        evs = events_of(got)
        assert len(evs) == 1, evs  # "named" was skipped
        e = evs[0]
        assert "type" not in e and "block_hashes" not in e and "object_key" not in e, e
        assert e["event_type"] == "stored" and e["medium"] == "cpu" and e["tenant_id"] == "t0"
        assert (e["dp_rank"], e["lora_name"], e["additional_salt"], e["model_name"]) == (3, "lora-a", "salt", "m")
        assert got[-1][1][2] == 3
        assert status(m)["skipped_unparsed_keys"] == 1  # "named"
    finally:
        sub.close()


def test_restarted_master_clears_then_announces_what_it_restored(launcher, tmp_path):
    """A master restarted on its state directory starts its events with
    all cleared, then announces every object it restored (a subscriber
    that follows it keeps a true picture), and it goes on from there."""
    state = str(tmp_path / "state")
    m = events_master(launcher, snapshot_backup_dir=state)
    store = launcher.store(m)
    sub = Subscriber(m, msgpack.unpackb)
    try:
        sub.sync(store)
        for k in ("r1", "r2", "r3"):
            assert store.put(k, k.encode() * 10) == 0
        assert store.remove("r2", force=True) == 0
        seen = sub.until(lambda b: any(e.get("object_key") == "r2" and e["type"] == "BlockRemoved"
                                       for e in b[1][1]))[-1][0]
    finally:
        sub.close()
    pub, replay_ep = m.pub, m.replay
    m.kill()
    m2 = launcher.master(enable_kv_events=True, kv_events_bind_endpoint=pub, kv_events_replay_endpoint=replay_ep,
                         kv_events_backend_id="test-backend", snapshot_backup_dir=state, rpc_port=m.rpc_port)
    m2.pub, m2.replay = pub, replay_ep
    # The publisher starts once the state is restored: poll its replay.
    # Its sequence numbers go on above the first master's: a subscriber
    # that saw `seen` asks for what follows and gets the new master's
    # batches from its all-cleared on.
    def replayed():
        evs = [short(e) for e in events_of(replay(m2, seen + 1, msgpack.unpackb))]
        return evs if len(evs) >= 3 else None

    evs = wait_until(replayed, what="the restarted master's first three events, numbered after the first's")
    assert evs[0] == ("AllBlocksCleared", None, None), evs
    mine = [e for e in evs[1:] if not e[2].startswith("probe-")]  # sync's probes are restored too
    assert sorted(mine) == [("BlockStored", "cpu", "r1"), ("BlockStored", "cpu", "r3")], evs


@pytest.mark.parametrize("flags,want", [
    ({"enable_kv_events": True}, "--kv_events_bind_endpoint"),
    ({"enable_kv_events": True, "kv_events_bind_endpoint": "tcp://127.0.0.1:1"}, "--kv_events_backend_id"),
    ({"enable_kv_events": True, "kv_events_bind_endpoint": "ipc:///tmp/x", "kv_events_backend_id": "b"},
     "want tcp://host:port"),
    ({"enable_kv_events": True, "kv_events_bind_endpoint": "tcp://0.0.0.0:5557", "kv_events_backend_id": "b"},
     "--allow_insecure"),
    ({"enable_kv_events": True, "kv_events_bind_endpoint": "tcp://127.0.0.1:1", "kv_events_backend_id": "b",
      "kv_events_format": "json"}, "--kv_events_format=json: want array or map"),
])
def test_settings_refused(launcher, flags, want):
    """Settings the publisher cannot run with stop the master at start,
    saying which flag to fix."""
    with pytest.raises(RuntimeError) as e:
        launcher.master(**flags)
    assert want in str(e.value), str(e.value)


def test_restore_beyond_the_queue_capacity_loses_nothing(launcher, tmp_path):
    """A master that restores more objects than its event queue holds
    (--kv_events_queue_capacity) still starts with all cleared and
    announces every one: nothing drains the queue before the publisher
    starts, so it keeps what the restore pushes."""
    state = str(tmp_path / "state")
    m = events_master(launcher, snapshot_backup_dir=state)
    store = launcher.store(m)
    keys = [f"r{i}" for i in range(40)]
    for k in keys:
        assert store.put(k, k.encode() * 10) == 0
    pub, replay_ep = m.pub, m.replay
    m.kill()
    m2 = launcher.master(enable_kv_events=True, kv_events_bind_endpoint=pub, kv_events_replay_endpoint=replay_ep,
                         kv_events_backend_id="test-backend", snapshot_backup_dir=state, rpc_port=m.rpc_port,
                         kv_events_queue_capacity=4)
    m2.pub, m2.replay = pub, replay_ep

    def replayed():
        evs = [short(e) for e in events_of(replay(m2, 0, msgpack.unpackb))]
        return evs if len(evs) >= 4 else None

    evs = wait_until(replayed, what="the restarted master's first events")
    assert evs[0] == ("AllBlocksCleared", None, None), evs[:5]
    assert sorted(evs[1:]) == sorted(("BlockStored", "cpu", k) for k in keys), evs
    assert status(m2)["dropped_events"] == 0
