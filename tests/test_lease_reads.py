"""A read that outlives the object's lease is looked up and read again, and
returns every value's bytes (never ``b""`` for a key that exists, never
the bytes of an object replaced meanwhile): the real master with a short
lease (``--default_kv_lease_ttl``), a real peer process holding the
objects, stopped (SIGSTOP) while a read from it over TCP is on its way, or,
in standalone mode, the application's own copy held past the lease."""

from __future__ import annotations

import ctypes
import os
import signal
import threading
import time
from typing import Any, Callable, Iterator, List

import pytest

from conftest import socket_inodes, wait_until
from peer import pattern
from gostore import MooncakeDistributedStore
from gostore.standalone import places as _places

MiB = 1 << 20
LEASE_MS = 150
N = 4
SIZE = MiB + 17


def _tcp_rows(pid: int) -> Iterator[List[str]]:
    """The columns of each row of ``pid``'s /proc/net/tcp and tcp6."""
    for table in ("tcp", "tcp6"):
        try:
            with open(f"/proc/{pid}/net/{table}") as f:
                rows = f.read().splitlines()[1:]
        except OSError:
            continue
        for row in rows:
            yield row.split()


def _request_waiting(pid: int) -> bool:
    """Whether a connection to one of ``pid``'s listeners holds bytes it
    has not read (the process is stopped: a transfer request sent
    to it waits there)."""
    mine = socket_inodes(pid)
    listening, waiting = set(), []
    for cols in _tcp_rows(pid):
        port = cols[1].rsplit(":", 1)[1]
        if cols[3] == "0A" and cols[9] in mine:
            listening.add(port)
        elif cols[3] == "01" and int(cols[4].split(":")[1], 16) > 0:
            # Not yet accepted (the process is stopped) or accepted:
            # either way its listener's port.
            waiting.append(port)
    return any(port in listening for port in waiting)


def _bytes_waiting(pid: int, port: int) -> int:
    """The most bytes a connection to ``port`` (a listener of stopped
    process ``pid``) holds unread."""
    most = 0
    for cols in _tcp_rows(pid):
        if cols[3] == "01" and int(cols[1].rsplit(":", 1)[1], 16) == port:
            most = max(most, int(cols[4].split(":")[1], 16))
    return most


def _read_while_stopped(peer: Any, read: Callable[[], Any]) -> Any:
    """``read()`` in a thread while ``peer`` is stopped: once its transfer
    request reached the peer (so after its lookup) and the lease has ended
    since, the peer goes on; the read's result."""
    out: List[Any] = []
    t = threading.Thread(target=lambda: out.append(read()))
    with peer.suspended():
        t.start()
        wait_until(lambda: _request_waiting(peer.proc.pid) or not t.is_alive(), what="the read to reach the peer")
        assert t.is_alive(), "the read ended while the peer holding the objects was stopped"
        reached = time.monotonic()
        # The lease is a time: it ended LEASE_MS after the lookup, which
        # was before the request reached the peer.
        wait_until(lambda: time.monotonic() > reached + (LEASE_MS + 50) / 1000, what="the lease to end")
    t.join(30)
    assert not t.is_alive()
    return out[0]


@pytest.fixture
def held_by_peer(master_factory, peer_factory, store_factory, monkeypatch):
    """(reader, peer, keys, values): N objects in a peer's segment, a
    reader that reaches the peer over TCP, the master's lease LEASE_MS."""
    m = master_factory(default_kv_lease_ttl=LEASE_MS)
    peer = peer_factory(m, segment="64MB")
    monkeypatch.setenv("GOSTORE_TRANSPORT", "tcp")
    reader = store_factory(m, segment=0)
    keys = [f"lease/{i}" for i in range(N)]
    values = [pattern(i + 1, SIZE) for i in range(N)]
    for k, i in zip(keys, range(N)):
        assert peer.call("put_pattern", key=k, size=SIZE, seed=i + 1, preferred_segment=peer.get_hostname())["rc"] == 0
    return reader, peer, keys, values


def _into(reader: MooncakeDistributedStore, keys: List[str], batch: bool) -> List[bytes]:
    bufs = [ctypes.create_string_buffer(SIZE) for _ in keys]
    if batch:
        got = reader.batch_get_into(keys, [ctypes.addressof(b) for b in bufs], [SIZE] * len(keys))
    else:
        got = [reader.get_into(keys[0], ctypes.addressof(bufs[0]), SIZE)]
    return [b.raw if n == SIZE else b"" for b, n in zip(bufs, got)]


def _buffers(got: List[Any]) -> List[bytes]:
    return [b"" if b is None else bytes(memoryview(b)) for b in got]


READS = {
    "get": lambda r, ks: [r.get(ks[0])],
    "get_batch": lambda r, ks: r.get_batch(ks),
    "get_into": lambda r, ks: _into(r, ks, False),
    "batch_get_into": lambda r, ks: _into(r, ks, True),
    "get_buffer": lambda r, ks: _buffers([r.get_buffer(ks[0])]),
    "batch_get_buffer": lambda r, ks: _buffers(r.batch_get_buffer(ks)),
}


@pytest.mark.parametrize("api", list(READS))
def test_a_read_outliving_its_lease_returns_the_values(held_by_peer, api):
    reader, peer, keys, values = held_by_peer
    got = _read_while_stopped(peer, lambda: READS[api](reader, keys))
    want = values[:len(got)]
    assert len(got) in (1, N)
    for k, g, v in zip(keys, got, want):
        assert g == v, f"{api}: {k}: {len(g)} bytes, want the value's {len(v)}"


def test_a_read_across_a_master_pause_returns_the_values(master_factory, peer_factory, store_factory):
    """The master stopped (SIGSTOP) while it holds a get's lookup, for
    longer than the lease: the answer comes with a lease that, counted from
    when the lookup left, is over before the bytes move. The get looks the
    objects up again and returns them, not ``b""``."""
    m = master_factory(default_kv_lease_ttl=LEASE_MS)
    peer = peer_factory(m, segment="64MB")
    reader = store_factory(m, segment=0)
    # Keys long enough that their lookup passes anything else a client
    # sends the master (a ping): its bytes waiting there are the event.
    keys = [f"pause/{i}/" + "k" * 400 for i in range(N)]
    for i, k in enumerate(keys):
        assert peer.call("put_pattern", key=k, size=SIZE, seed=i + 1)["rc"] == 0
    assert reader.get_batch(keys[:1]) == [pattern(1, SIZE)]  # connections made, segment mapped
    port = int(m.addr.rsplit(":", 1)[1])
    out: List[Any] = []
    t = threading.Thread(target=lambda: out.append(reader.get_batch(keys)))
    os.kill(m.proc.pid, signal.SIGSTOP)
    try:
        t.start()
        wait_until(lambda: _bytes_waiting(m.proc.pid, port) >= 4 * 400, what="the lookup to reach the master")
        reached = time.monotonic()
        wait_until(lambda: time.monotonic() > reached + (LEASE_MS + 50) / 1000, what="the lease to pass")
    finally:
        os.kill(m.proc.pid, signal.SIGCONT)
    t.join(30)
    assert not t.is_alive()
    for k, g, i in zip(keys, out[0], range(N)):
        assert g == pattern(i + 1, SIZE), f"{k[:12]}: {len(g)} bytes"


@pytest.mark.parametrize("upsert", [False, True], ids=["same", "upserted"])
def test_standalone_copy_outliving_its_lease_is_read_again(master_factory, client_process_factory,
                                                           store_factory, monkeypatch, upsert):
    """Standalone: the application copies the objects out of the server's
    segment itself (gostore._places), and that copy outlives the lease:
    the server reads them again into the application's values. When
    another client replaced an object meanwhile (possible once the lease
    ended), the values are the new bytes, never the ones copied."""
    m = master_factory(default_kv_lease_ttl=LEASE_MS)
    srv = client_process_factory(m)
    writer = store_factory(m, segment=0)
    app = MooncakeDistributedStore()
    assert app.setup_dummy(64 * MiB, 1 * MiB, srv.server_address) == 0
    try:
        keys = [f"sa-lease/{i}" for i in range(N)]
        values = [pattern(i + 1, SIZE) for i in range(N)]
        for k, v in zip(keys, values):
            assert writer.put(k, v) == 0
        fresh = pattern(99, SIZE)
        real_copy = _places.copy_parts
        slowed: List[int] = []

        def slow_copy(parts):
            # A FAKE slow copy: the real one, then held until the lease,
            # which began before the copy, has ended (and, with upsert,
            # until another client could replace the first object: an
            # upsert waits while the application's read holds it).
            start = time.monotonic()
            real_copy(parts)
            if slowed:
                return
            slowed.append(len(parts))
            if upsert:
                wait_until(lambda: writer.upsert(keys[0], fresh) == 0, what="the upsert once the lease ended")
            wait_until(lambda: time.monotonic() > start + (LEASE_MS + 50) / 1000, what="the lease to end")

        monkeypatch.setattr(_places, "copy_parts", slow_copy)
        want = ([fresh] + values[1:]) if upsert else values
        got = app.get_batch(keys)
        assert slowed == [N], "the application did not copy the objects itself"
        for k, g, v in zip(keys, got, want):
            assert g == v, f"{k}: {len(g)} bytes, the old value {g == values[0]}"
    finally:
        app.close()


@pytest.mark.parametrize("api", ["get_tensor", "batch_get_tensor"])
def test_a_tensor_read_outliving_its_lease_returns_the_tensors(held_by_peer, api):
    np = pytest.importorskip("numpy")
    reader, peer, _, _ = held_by_peer
    keys = [f"lease-t/{i}" for i in range(N)]
    arrays = [np.frombuffer(pattern(i + 7, SIZE - 17), dtype=np.uint8).copy() for i in range(N)]
    assert reader.batch_put_tensor(keys, arrays) == [0] * N  # into the peer's segment
    if api == "get_tensor":
        got = _read_while_stopped(peer, lambda: [reader.get_tensor(keys[0])])
    else:
        got = _read_while_stopped(peer, lambda: reader.batch_get_tensor(keys))
    for k, g, a in zip(keys, got, arrays):
        assert g is not None and np.array_equal(np.asarray(g), a), f"{api}: {k}: {g!r:.60}"


def test_a_get_session_read_outliving_its_lease_returns_the_ranges(held_by_peer):
    """A get session's ranged read (``batch_get_into_multi_buffer_ranges``)
    that outlives the session's lease, and one that starts after the
    renewed lease ended: each looks the objects up again and reads again,
    and the ranges hold the values' bytes."""
    reader, peer, keys, values = held_by_peer
    ranges = [(7, 1000), (SIZE - 5000, 5000)]  # (offset in the object, size)
    span = sum(n for _, n in ranges)
    buf = ctypes.create_string_buffer(N * span)
    base = ctypes.addressof(buf)
    assert reader.register_buffer(base, N * span) == 0
    try:
        assert reader.batch_get_session_start(keys) == [0] * N

        def read() -> List[int]:
            ctypes.memset(base, 0, N * span)
            ptrs = [[base + i * span, base + i * span + ranges[0][1]] for i in range(N)]
            return reader.batch_get_into_multi_buffer_ranges(
                keys, ptrs, [[n for _, n in ranges]] * N, [[o for o, _ in ranges]] * N)

        def check(what: str, got: List[int]) -> None:
            assert got == [span] * N, f"{what}: {got}"
            for k, i, v in zip(keys, range(N), values):
                at = base + i * span
                for o, n in ranges:
                    assert ctypes.string_at(at, n) == v[o:o + n], f"{what}: {k}: the bytes at {o}"
                    at += n

        check("a read outliving the lease", _read_while_stopped(peer, read))
        # That read renewed the session's lookup; the lease it granted is a
        # time, over once LEASE_MS has passed since the read returned.
        done = time.monotonic()
        wait_until(lambda: time.monotonic() > done + (LEASE_MS + 50) / 1000, what="the renewed lease to end")
        check("a read after the lease", read())
        assert reader.batch_get_session_end(keys) == 0
    finally:
        reader.unregister_buffer(base)
