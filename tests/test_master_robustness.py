"""The master executable against hostile RPC input, and its HTTP endpoints.

Frame format (gostore/wire/frame.go): an 18-byte little-endian header
``u32 body length | u64 request id | u16 opcode | i32 status`` followed by a
msgpack body. After every attack the master process must still be alive and
a normal client must still put and get.
"""

from __future__ import annotations

import random
import re
import socket
import struct
import time
import zlib

import pytest

from conftest import MiB, pattern, wait_until

OP_PING = 1
# The highest opcode the master knows (gostore/wire/messages.go: OpPing ..
# OpEvictUntil); everything above it is unknown to the master (48 and 49
# are client-to-client ops a master never serves).
def _last_master_op() -> int:
    """The last master wire.Op, counted from gostore/wire/messages.go (the
    names from OpPing, numbered from 1, up to opEnd): never stale."""
    import os

    src = open(os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "gostore", "wire",
                            "messages.go")).read()
    block = src[src.index("OpPing Op = iota + 1"):src.index("opEnd")]
    return len(re.findall(r"^\s*(Op\w+)", block, re.M))


LAST_OP = _last_master_op()
HEADER = struct.Struct("<IQHi")
assert HEADER.size == 18


def frame(op: int, body: bytes, req_id: int = 7, status: int = 0, length=None) -> bytes:
    n = len(body) if length is None else length
    return HEADER.pack(n, req_id, op, status) + body


def _connect(master) -> socket.socket:
    return socket.create_connection((master.rpc_host, master.rpc_port), timeout=5)


def _recv_exact(sock: socket.socket, n: int) -> bytes:
    out = b""
    while len(out) < n:
        chunk = sock.recv(n - len(out))
        if not chunk:
            break
        out += chunk
    return out


def _closed_by_peer(sock: socket.socket, timeout: float = 5.0) -> bool:
    """True if the master closes the connection (EOF/reset) within timeout."""
    sock.settimeout(timeout)
    try:
        while True:
            data = sock.recv(4096)
            if not data:
                return True
    except (ConnectionResetError, BrokenPipeError):
        return True
    except socket.timeout:
        return False


def _ping(master, req_id: int = 4242):
    """A valid Ping on a raw socket: the framing used by the attacks is right."""
    with _connect(master) as s:
        s.sendall(frame(OP_PING, b"\x91\xa6nobody", req_id=req_id))  # msgpack ["nobody"]
        hdr = _recv_exact(s, HEADER.size)
        assert len(hdr) == HEADER.size, "no answer to a valid Ping"
        length, rid, op, status = HEADER.unpack(hdr)
        body = _recv_exact(s, length)
        assert len(body) == length
        return rid, op, status, body


def _still_serving(master, store, tag: str) -> None:
    assert master.alive(), f"master died after {tag}:\n{master.log()}"
    value = pattern(zlib.crc32(tag.encode()), 100_000)
    key = f"robust/{tag}/{time.monotonic_ns()}"
    assert store.put(key, value) == 0, tag
    assert store.get(key) == value, tag
    assert store.health_check() == 0, tag
    rid, op, status, _ = _ping(master, req_id=99)
    assert (rid, op, status) == (99, OP_PING, 0)


@pytest.fixture
def target(master_factory, store_factory):
    m = master_factory()
    s = store_factory(m, segment=16 * MiB)
    return m, s


def test_valid_raw_ping_is_answered_with_same_id_and_opcode(target):
    m, _ = target
    rid, op, status, body = _ping(m, req_id=0x1122334455)
    assert rid == 0x1122334455
    assert op == OP_PING
    assert status == 0
    assert len(body) > 0


def _attack_random_garbage(sock):
    rnd = random.Random(1234)
    for _ in range(16):
        sock.sendall(rnd.randbytes(rnd.randint(1, 4096)))


def _attack_truncated_header(sock):
    sock.sendall(frame(OP_PING, b"\x91\xa1x")[:11])


def _attack_1gib_body(sock):
    sock.sendall(frame(OP_PING, b"", length=1 << 30) + b"\x00" * 1024)


def _attack_unknown_opcode(sock):
    sock.sendall(frame(0x7FFF, b"\x91\xa1x"))


def _attack_garbage_msgpack(sock):
    sock.sendall(frame(OP_PING, b"\xc1\xff\xfe\x00garbage\xdd\xff\xff\xff\xff"))


ATTACKS = {
    "random-garbage": (_attack_random_garbage, False),
    "truncated-header": (_attack_truncated_header, False),
    "header-announcing-1GiB-body": (_attack_1gib_body, True),
    "unknown-opcode": (_attack_unknown_opcode, True),
    "garbage-msgpack-body": (_attack_garbage_msgpack, True),
}


@pytest.mark.parametrize("name", list(ATTACKS))
def test_master_survives_malformed_rpc_input(target, name):
    m, s = target
    attack, must_close = ATTACKS[name]
    assert s.put("robust/before", b"before") == 0
    sock = _connect(m)
    try:
        try:
            attack(sock)
        except (ConnectionResetError, BrokenPipeError):
            pass  # the master may hang up while we are still writing
        if must_close:
            # a bad frame closes that connection (no huge allocation, no reply)
            assert _closed_by_peer(sock), f"master kept the connection open after {name}"
        else:
            time.sleep(0.05)
    finally:
        sock.close()
    _still_serving(m, s, name)
    assert s.get("robust/before") == b"before"


def test_master_closes_connection_for_every_unknown_opcode(target):
    m, s = target
    for op in (0, LAST_OP + 1, 63, 64, 1000, 0xFFFF):
        with _connect(m) as sock:
            sock.sendall(frame(op, b"\x90"))
            assert _closed_by_peer(sock), f"opcode {op}"
    _still_serving(m, s, "unknown-opcodes")


def test_master_survives_malformed_bodies_for_every_opcode(target):
    """Every known opcode fed msgpack of the wrong shape or with lengths that
    would need huge allocations."""
    m, s = target
    bodies = [
        b"",
        b"\xc0",  # nil
        b"\x90",  # []
        b"\x91\xc0",  # [nil]
        b"\xdc\xff\xff",  # array16 of 65535, truncated
        b"\xdd\xff\xff\xff\xff",  # array32 of 4G elements, truncated
        b"\x95" + b"\xdd\xff\xff\xff\xff" * 5,
        b"\x92\xdb\xff\xff\xff\xff",  # str32 of 4 GiB, truncated
        b"\x93\xc6\x7f\xff\xff\xff",  # bin32 of 2 GiB, truncated
        b"\x81\xa3foo\xa3bar",  # a map where an array is expected
        b"\x9f" + b"\xcf" + b"\xff" * 8,  # fixarray of 15 with a huge uint
    ]
    for op in range(1, LAST_OP + 1):
        if op in (11, 12):  # RemoveByRegex / RemoveAll: harmless but destructive
            continue
        for body in bodies:
            with _connect(m) as sock:
                try:
                    sock.sendall(frame(op, body))
                    sock.settimeout(2)
                    sock.recv(4096)
                except (socket.timeout, ConnectionResetError, BrokenPipeError):
                    pass
            assert m.alive(), f"master died on opcode {op} body {body!r}:\n{m.log()}"
    _still_serving(m, s, "malformed-bodies")


def test_master_survives_many_abrupt_connections(target):
    m, s = target
    socks = []
    for i in range(100):
        sock = _connect(m)
        if i % 3 == 0:
            sock.sendall(frame(OP_PING, b"\x91\xa1x")[: i % 18])
        socks.append(sock)
    for sock in socks:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))  # RST
        sock.close()
    _still_serving(m, s, "abrupt-connections")


# ---------------------------------------------------------------------------
# HTTP endpoints


def test_http_health_is_200(master):
    status, body = master.http("/health")
    assert status == 200
    assert body.strip() == "OK"


def test_http_metrics_exposes_master_counters_that_move(master, store_factory):
    s = store_factory(master, segment=8 * MiB)

    def value(body, name):
        m = re.search(rf"^{re.escape(name)} (\S+)$", body, re.M)
        assert m, f"{name} missing from /metrics"
        return float(m.group(1))

    status, before = master.http("/metrics")
    assert status == 200
    assert "gostore_master_" in before
    for name in ("gostore_master_put_start_total", "gostore_master_put_end_total",
                 "gostore_master_get_total", "gostore_master_get_miss_total"):
        assert re.search(rf"^# TYPE {name} counter$", before, re.M), name
    for i in range(3):
        assert s.put(f"metrics/{i}", b"v") == 0
    assert s.get("metrics/0") == b"v"
    assert s.get("metrics/missing") == b""
    _, after = master.http("/metrics")
    assert value(after, "gostore_master_put_end_total") >= value(before, "gostore_master_put_end_total") + 3
    assert value(after, "gostore_master_get_total") >= value(before, "gostore_master_get_total") + 2
    assert value(after, "gostore_master_get_miss_total") >= value(before, "gostore_master_get_miss_total") + 1
    assert value(after, "gostore_master_objects") == 3
    assert value(after, "gostore_master_segments") == 1
    assert "gostore_master_rpc_total{" in after


def test_http_get_all_segments_lists_peers(master, peer_factory, store_factory):
    a = peer_factory(master, segment="16MB")
    b = peer_factory(master, segment="24MB")
    s = store_factory(master, segment=0)  # pure consumer: no segment
    segs = {seg["Name"]: seg for seg in master.segments()}
    assert set(segs) == {a.hostname, b.hostname}
    assert segs[a.hostname]["Size"] == 16 * MiB
    assert segs[b.hostname]["Size"] == 24 * MiB
    assert s.put("segments/k", pattern(1, MiB)) == 0
    used = sum(seg["Used"] for seg in master.segments())
    assert used >= MiB
    b.stop()
    wait_until(lambda: master.segment_names() == [a.hostname], timeout=10,
               what="the stopped peer's segment to be unmounted")


def test_http_query_key_shows_size_and_replicas_and_404_when_missing(master, peer_factory,
                                                                    store_factory):
    a = peer_factory(master, segment="16MB")
    b = peer_factory(master, segment="16MB")
    s = store_factory(master, segment=0)
    from gostore import ReplicateConfig

    assert s.put("qk/k", pattern(2, 12345), ReplicateConfig(replica_num=2)) == 0
    info = master.query_key("qk/k")
    assert info["key"] == "qk/k"
    assert info["size"] == 12345
    assert sorted(r["segment"] for r in info["replicas"]) == sorted([a.hostname, b.hostname])
    assert all(r["status"] == "COMPLETE" for r in info["replicas"]), info
    status, body = master.http("/query_key?key=qk/missing")
    assert status == 404
    status, _ = master.http("/query_key")
    assert status == 400
