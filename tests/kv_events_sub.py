"""A subscriber to the master's KV events (tests/test_kv_events.py, and the
engines' tests, which decode with the engines' own classes): pyzmq only,
the payload decoder given."""

from __future__ import annotations

import socket
import time
from typing import Any, Callable, List, Optional, Tuple

import pytest
import zmq

END_SEQ = (-1).to_bytes(8, "big", signed=True)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def events_master(launcher, **flags):
    """A master publishing KV events on loopback; its endpoints as .pub
    and .replay."""
    pub, replay = f"tcp://127.0.0.1:{free_port()}", f"tcp://127.0.0.1:{free_port()}"
    m = launcher.master(enable_kv_events=True, kv_events_bind_endpoint=pub, kv_events_replay_endpoint=replay,
                        kv_events_backend_id="test-backend", **flags)
    m.pub, m.replay = pub, replay
    return m


Batch = Tuple[int, Any]  # (sequence number, the decoded [ts, events, dp_rank])


class Subscriber:
    """A pyzmq SUB socket on the master's events, and DEALER replays."""

    def __init__(self, m, decode: Callable[[bytes], Any]) -> None:
        self.m, self.decode = m, decode
        self.ctx = zmq.Context()
        self.sub = self.ctx.socket(zmq.SUB)
        self.sub.setsockopt(zmq.SUBSCRIBE, b"")
        self.sub.setsockopt(zmq.LINGER, 0)
        self.sub.connect(m.pub)
        self.batches: List[Batch] = []

    def close(self) -> None:
        self.sub.close()
        self.ctx.term()

    def recv(self, timeout: float = 10.0) -> Optional[Batch]:
        if not self.sub.poll(int(timeout * 1000)):
            return None
        frames = self.sub.recv_multipart()
        assert len(frames) == 3 and frames[0] == b"" and len(frames[1]) == 8, frames
        b = (int.from_bytes(frames[1], "big"), self.decode(frames[2]))
        self.batches.append(b)
        return b

    def sync(self, store, probe: Callable[[int], str] = lambda i: f"probe-{i}") -> int:
        """Put probe objects until one's event arrives (a SUB socket hears
        nothing before its subscription reached the publisher); returns the
        sequence number of the last batch received, once nothing more is
        in flight."""
        for i in range(200):
            assert store.put(probe(i), b"p" * 64) == 0
            got = self.recv(timeout=0.05)
            if got is not None:
                while self.recv(timeout=0.3) is not None:
                    pass
                return self.batches[-1][0]
        pytest.fail("no KV event batch arrived for 200 puts")

    def until(self, pred, timeout: float = 10.0) -> List[Batch]:
        """Receive until pred(batch) holds for one; the batches received."""
        start = len(self.batches)
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            b = self.recv(timeout=max(0.0, deadline - time.monotonic()))
            if b is not None and pred(b):
                return self.batches[start:]
        pytest.fail(f"no batch matched within {timeout}s; got {self.batches[start:]}")


def replay(m, start: int, decode: Callable[[bytes], Any], timeout: float = 10.0) -> List[Batch]:
    """Ask the replay endpoint for the batches from start on (or send
    frames as they are) and read until the end marker."""
    ctx = zmq.Context()
    d = ctx.socket(zmq.DEALER)
    d.setsockopt(zmq.LINGER, 0)
    d.connect(m.replay)
    try:
        d.send_multipart([b"", start.to_bytes(8, "big")])
        out: List[Batch] = []
        while True:
            assert d.poll(int(timeout * 1000)), f"no replay answer within {timeout}s; got {out}"
            f = d.recv_multipart()
            assert len(f) == 4 and f[0] == b"", f
            if f[2] == END_SEQ:
                assert f[1] == b"" and f[3] == b""
                return out
            assert f[1] == b""  # the topic
            out.append((int.from_bytes(f[2], "big"), decode(f[3])))
    finally:
        d.close()
        ctx.term()


