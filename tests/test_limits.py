"""The master's limits on what one request or one peer may ask, against the
real ``gostore-master`` (docs/operations.md, "Limits"): a request at each
limit is served, one over it gets the contract's code and the master logs
one line naming the flag; nothing refused is stored, and the master goes on
serving."""

from __future__ import annotations

import socket
import struct
import time

from gostore import ErrorCode

from conftest import MiB, wait_until

HEADER = struct.Struct("<IQHi")
OP_PING = 1


def _refusal_lines(master, flag: str) -> list:
    return [line for line in master.log().splitlines() if "level=WARN" in line and f"--{flag}=" in line]


def test_key_length(master_factory, store_factory):
    m = master_factory(max_key_bytes=64)
    s = store_factory(m, segment=16 * MiB)
    at, over = "k" * 64, "k" * 65
    assert s.put(at, b"at the limit") == 0
    assert s.get(at) == b"at the limit"
    assert s.put(over, b"over") == ErrorCode.INVALID_KEY
    assert s.put_batch(["short", over], [b"a", b"b"]) == ErrorCode.INVALID_KEY  # refused whole
    assert s.is_exist("short") == 0
    assert s.is_exist(over) == ErrorCode.INVALID_KEY
    assert s.get_size(over) == ErrorCode.INVALID_KEY
    assert s.get(over) == b""
    lines = _refusal_lines(m, "max_key_bytes")
    assert len(lines) == 1 and "of 65 bytes exceeds --max_key_bytes=64" in lines[0], m.log()
    assert s.put("after", b"served") == 0 and s.get("after") == b"served"


def test_keys_per_request(master_factory, store_factory):
    m = master_factory(max_batch_keys=4096)
    s = store_factory(m, segment=16 * MiB)
    keys = [f"b/{i}" for i in range(4097)]
    assert s.put_batch(keys[:4096], [b"v"] * 4096) == 0
    assert s.batch_is_exist(keys[:4096]) == [1] * 4096
    assert s.put_batch(keys[1:], [b"v"] * 4096) == 0  # 4096 again: the last one new
    assert s.batch_is_exist(keys) == [ErrorCode.INVALID_PARAMS] * 4097
    assert s.batch_remove(keys, force=True) == [ErrorCode.INVALID_PARAMS] * 4097
    assert s.is_exist(keys[0]) == 1  # the refused remove removed nothing
    lines = _refusal_lines(m, "max_batch_keys")
    assert len(lines) == 1 and "4097 keys in one request exceed --max_batch_keys=4096" in lines[0], m.log()
    assert s.put("after", b"served") == 0 and s.get("after") == b"served"


def test_object_size(master_factory, store_factory):
    m = master_factory(max_object_bytes=MiB)
    s = store_factory(m, segment=16 * MiB)
    assert s.put("at", b"a" * MiB) == 0
    assert s.get_size("at") == MiB
    assert s.put("over", b"o" * (MiB + 1)) == ErrorCode.INVALID_PARAMS
    assert s.is_exist("over") == 0
    lines = _refusal_lines(m, "max_object_bytes")
    assert len(lines) == 1 and f"of {MiB + 1} bytes exceeds --max_object_bytes={MiB}" in lines[0], m.log()
    assert s.put("after", b"served") == 0 and s.get("after") == b"served"


def test_request_bytes(master_factory, store_factory):
    m = master_factory(rpc_max_request_bytes=65536)
    s = store_factory(m, segment=16 * MiB)
    small = [f"r/{i:060d}" for i in range(500)]  # ~33 KB of keys
    large = [f"r/{i:060d}" for i in range(1100)]  # ~72 KB
    assert s.batch_is_exist(small) == [0] * 500
    assert s.batch_is_exist(large) == [ErrorCode.INVALID_PARAMS] * 1100
    lines = _refusal_lines(m, "rpc_max_request_bytes")
    assert len(lines) == 1 and "body over the limit" in lines[0], m.log()
    assert s.put("after", b"served") == 0 and s.get("after") == b"served"


def _ping(sock: socket.socket):
    """(status, body) of a raw Ping (msgpack ["probe"]); None when closed."""
    sock.sendall(HEADER.pack(7, 1, OP_PING, 0) + b"\x91\xa5probe")
    data = b""
    while len(data) < HEADER.size:
        chunk = sock.recv(HEADER.size - len(data))
        if not chunk:
            return None
        data += chunk
    n, _, _, status = HEADER.unpack(data)
    body = b""
    while len(body) < n:
        chunk = sock.recv(n - len(body))
        if not chunk:
            return None
        body += chunk
    return status, body


def test_connections_per_address(master_factory, store_factory):
    m = master_factory(rpc_max_connections_per_ip=8)
    socks = [socket.create_connection((m.rpc_host, m.rpc_port), timeout=5) for _ in range(9)]
    try:
        for sock in socks[:8]:
            assert _ping(sock)[0] == 0
        status, body = _ping(socks[8])
        assert status == ErrorCode.RPC_FAIL, (status, body)
        assert b"at most 8 connections from one address (--rpc_max_connections_per_ip=8)" in body
        assert socks[8].recv(1) == b""  # then closed
    finally:
        for sock in socks:
            sock.close()
    assert len(_refusal_lines(m, "rpc_max_connections_per_ip")) == 1, m.log()
    # The closed connections make room: a store connects and is served.
    deadline = time.monotonic() + 10
    s = None
    while s is None:
        try:
            s = store_factory(m, segment=16 * MiB)
        except AssertionError:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.1)
    assert s.put("after", b"served") == 0 and s.get("after") == b"served"
    assert wait_until(m.alive, what="the master alive")
