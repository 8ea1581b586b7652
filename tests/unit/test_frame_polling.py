"""How a standalone connection waits for its next frame (``gostore.standalone.protocol.Conn``):
real Unix socket pairs, real threads; no library, no master.

The counters of the connection's ``SpinGate`` say whether a read polled and
whether its frame came within the poll, so each test can see which way a
read went, not only that it returned the right frame."""

from __future__ import annotations

import os
import socket
import threading
from typing import List

import pytest
from conftest import wait_until

from gostore.standalone import protocol as P

LONG_US = 30_000_000  # a spin no test outlasts (Conn takes any; its callers bound it)


@pytest.fixture
def pairs():
    """Makes connected (polling end, plain end) pairs and closes them."""
    made: List[socket.socket] = []

    def pair(spin_us: int, hot: int, gate: P.SpinGate):
        a, b = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
        made.extend((a, b))
        return P.Conn(a, spin_us, gate, hot), P.Conn(b)

    yield pair
    for s in made:
        s.close()


def _echo(peer: P.Conn, n: int) -> threading.Thread:
    """Answers n frames, each with the frame it got."""

    def run() -> None:
        for _ in range(n):
            kind, body = peer.read()
            peer.send(P.frame(kind, P.get_values(body)))

    t = threading.Thread(target=run, daemon=True)
    t.start()
    return t


def test_an_answer_within_the_spin_is_caught_by_the_poll(pairs):
    gate = P.SpinGate(1)
    me, peer = pairs(LONG_US, 0, gate)
    t = _echo(peer, 3)
    for i in range(3):
        me.send(P.frame(P.CALL, [b"x", i]))
        kind, body = me.read()
        assert (kind, P.get_values(body)) == (P.CALL, [b"x", i])
    t.join()
    assert (gate.polls, gate.hits, gate.busy) == (3, 3, 0)


def test_an_answer_after_the_spin_is_read_by_a_sleeping_read(pairs):
    gate = P.SpinGate(1)
    me, peer = pairs(1000, 0, gate)  # 1 ms
    me.send(P.frame(P.CALL, [b"late"]))
    got: List[object] = []
    reader = threading.Thread(target=lambda: got.append(me.read()), daemon=True)
    reader.start()
    wait_until(lambda: gate.polls == 1 and gate.busy == 0, interval=0.001, what="the poll to give up")
    assert peer.read()[0] == P.CALL
    peer.send(P.frame(P.REPLY, [7]))
    reader.join(10)
    assert not reader.is_alive()
    kind, body = got[0]  # type: ignore[misc]
    assert (kind, P.get_values(body)) == (P.REPLY, [7])
    assert (gate.polls, gate.hits) == (1, 0)


def test_the_server_polls_only_a_connection_that_calls_in_a_loop(pairs):
    gate = P.SpinGate(1)
    server, app = pairs(LONG_US, P.HOT, gate)
    for i in range(P.HOT + 4):
        app.send(P.frame(P.CALL, [i]))
        assert P.get_values(server.read()[1]) == [i]
        server.send(P.frame(P.REPLY, [i]))
        assert P.get_values(app.read()[1]) == [i]
    # The first frame follows no answer; the next HOT heat the connection.
    assert (gate.polls, gate.hits) == (3, 3)


def test_a_connection_whose_calls_come_after_the_spin_is_never_polled(pairs):
    gate = P.SpinGate(1)
    server, app = pairs(1, P.HOT, gate)  # 1 µs: no call comes within it
    for i in range(6):
        app.send(P.frame(P.CALL, [i]))
        assert P.get_values(server.read()[1]) == [i]
        server.send(P.frame(P.REPLY, [i]))
        app.read()
    assert gate.polls == 0


def test_no_spin_or_a_full_gate_means_a_sleeping_read(pairs):
    gate = P.SpinGate(1)
    for spin in (0, LONG_US):
        me, peer = pairs(spin, 0, gate)
        t = _echo(peer, 1)
        if spin:
            assert gate.enter()  # another read of the process is polling
        me.send(P.frame(P.CALL, [spin]))
        assert P.get_values(me.read()[1]) == [spin]
        t.join()
    assert gate.polls == 1  # the one taken above
    gate.leave(False)
    assert gate.busy == 0


def test_descriptors_sent_with_a_frame_survive_the_poll(pairs, tmp_path):
    gate = P.SpinGate(1)
    server, app = pairs(LONG_US, 0, gate)
    path = tmp_path / "shared"
    path.write_bytes(b"region bytes")
    server.send(P.frame(P.REPLY, [0]))  # as after an answer, so the next read polls
    fds: List[int] = []
    got: List[object] = []
    reader = threading.Thread(target=lambda: got.append(server.read(fds)), daemon=True)
    reader.start()
    app.read()
    with open(path, "rb") as f:
        app.send(P.frame(P.REGION, [0x10000, 12]), [f.fileno()])
    reader.join(10)
    assert (gate.polls, gate.hits) == (1, 1)
    assert len(fds) == 1
    try:
        assert os.pread(fds[0], 12, 0) == b"region bytes"
    finally:
        os.close(fds[0])


def test_the_end_of_the_stream_ends_the_poll(pairs):
    gate = P.SpinGate(1)
    me, peer = pairs(LONG_US, 0, gate)
    me.send(P.frame(P.CALL, [1]))
    peer.read()
    peer.sock.close()
    with pytest.raises(ConnectionError):
        me.read()
    assert (gate.polls, gate.hits, gate.busy) == (1, 1, 0)


def test_the_gate_admits_its_limit_at_once():
    gate = P.SpinGate(2)
    assert gate.enter() and gate.enter()
    assert not gate.enter()
    gate.leave(True)
    assert gate.enter()
    assert (gate.polls, gate.hits, gate.busy) == (3, 1, 2)
    assert 1 <= P.SpinGate().limit <= 2


def test_a_socket_with_a_timeout_is_never_polled(pairs):
    # Python waits for such a socket to be readable before each read, so a
    # "non-blocking" peek would sleep there for the whole timeout.
    gate = P.SpinGate(1)
    me, peer = pairs(LONG_US, 0, gate)
    me.sock.settimeout(5)
    assert P.Conn(me.sock, LONG_US, gate).spin_ns == 0
    me.sock.settimeout(None)
    assert P.Conn(me.sock, LONG_US, gate).spin_ns == LONG_US * 1000
