"""The plan API (``gostore.NanoKVCache``, the Nano Mooncake seed) across real
processes on loopback: an owner with a heap, a producer that writes straight
into the owner's memory and commits, readers that see nothing before the
commit and exactly the bytes after, a producer killed mid-write whose slot is
reclaimed and never read as valid, epochs that guard reused slots,
watermark eviction, and bad input.
"""

from __future__ import annotations

import json
import os
import queue
import signal
import subprocess
import sys
import threading
import time

import pytest

from conftest import MiB, wait_until
from gostore import NanoKVCache, ObjMeta, PlanError, PlanNotReady

HERE = os.path.dirname(os.path.abspath(__file__))
NANO_PEER = os.path.join(HERE, "nano_peer.py")

sys.path.insert(0, HERE)
from nano_peer import pattern  # noqa: E402


class NanoPeer:
    """A NanoKVCache member in its own process (tests/nano_peer.py)."""

    def __init__(self, master: str, logdir: str, heap: int = 16 * MiB, env=None) -> None:
        penv = dict(os.environ)
        penv.pop("GOSTORE_TRANSPORT", None)
        penv.update(env or {})
        self.log_path = os.path.join(logdir, f"nano-{time.monotonic_ns()}.log")
        self._log = open(self.log_path, "w")
        self.proc = subprocess.Popen([sys.executable, NANO_PEER, "--master", master, "--heap", str(heap)],
                                     stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=self._log,
                                     text=True, env=penv)
        self._lines: "queue.Queue" = queue.Queue()
        threading.Thread(target=self._read, daemon=True).start()
        hello = self._next(30)
        assert hello.get("ready"), (hello, self.log())
        self.rank, self.segment = hello["rank"], hello["segment"]

    def _read(self) -> None:
        for line in self.proc.stdout:
            self._lines.put(line)
        self._lines.put(None)

    def _next(self, timeout: float) -> dict:
        line = self._lines.get(timeout=timeout)
        assert line is not None, f"nano peer exited; log:\n{self.log()}"
        return json.loads(line)

    def log(self) -> str:
        with open(self.log_path) as f:
            return f.read()[-4000:]

    def call(self, op: str, **kw) -> dict:
        self.proc.stdin.write(json.dumps(dict(op=op, **kw)) + "\n")
        self.proc.stdin.flush()
        ans = self._next(60)
        if "error" in ans and not kw.get("_expect_error"):
            raise AssertionError(f"nano peer failed on {op}: {ans['error']}\n{ans.get('trace')}")
        return ans

    def kill(self) -> None:
        if self.proc.poll() is None:
            os.kill(self.proc.pid, signal.SIGKILL)
        self.proc.wait()

    def stop(self) -> None:
        if self.proc.poll() is None:
            try:
                self.proc.stdin.write('{"op": "exit"}\n')
                self.proc.stdin.flush()
                self.proc.wait(timeout=10)
            except Exception:
                self.kill()
        self._log.close()


@pytest.fixture
def nano(master_factory, logdir):
    """A factory of nano peers, and of in-process caches, against one master
    (``flags`` go to the master)."""
    made, caches = [], []
    state = {}

    def master(**flags):
        state["m"] = master_factory(**flags)
        return state["m"]

    def peer(**kw) -> NanoPeer:
        m = state.get("m") or master()
        p = NanoPeer(m.addr, logdir, **kw)
        made.append(p)
        return p

    def cache(heap: int = 16 * MiB, **kw) -> NanoKVCache:
        m = state.get("m") or master()
        c = NanoKVCache(heap, master_server_addr=m.addr, **kw)
        caches.append(c)
        return c

    yield type("Nano", (), {"master": staticmethod(master), "peer": staticmethod(peer),
                            "cache": staticmethod(cache), "state": state})
    for c in caches:
        c.close()
    for p in made:
        p.stop()


@pytest.mark.parametrize("transport", ["shm", "tcp"])
def test_producer_writes_into_the_owner_and_commits(nano, transport):
    owner = nano.peer(heap=64 * MiB)
    producer = nano.peer(env={"GOSTORE_TRANSPORT": "tcp"} if transport == "tcp" else None)
    reader = nano.cache()
    assert (owner.rank, producer.rank, reader.rank) == (0, 1, 2)
    assert reader.world_size == 3
    size = 3 * MiB + 12345
    plan = producer.call("open", key="sess:42:kv:L0", bytes=size, preferred=owner.rank)
    assert plan["dst_rank"] == owner.rank and plan["bytes_total"] == size
    assert plan["n_pages"] == (size + 256 * 1024 - 1) // (256 * 1024)
    assert plan["writable"] == (transport == "shm")  # a view of the owner's memory on this host
    producer.call("fill", key="sess:42:kv:L0", seed=7)
    # Written, not committed: nothing to see.
    assert reader.get("sess:42:kv:L0") is None
    with pytest.raises(PlanNotReady):
        reader.get_location("sess:42:kv:L0")
    assert reader.store.is_exist("sess:42:kv:L0") == 0
    producer.call("commit", key="sess:42:kv:L0")
    assert reader.get("sess:42:kv:L0") == pattern(7, size)
    dst = bytearray(size + 100)
    assert reader.get("sess:42:kv:L0", dst=dst) is dst and dst[:size] == pattern(7, size)
    meta = reader.get_location("sess:42:kv:L0")
    assert (meta.owner_rank, meta.bytes_total, meta.epoch) == (owner.rank, size, plan["epoch"])
    assert meta.payload_off == plan["payload_base"] and meta.header_off == plan["header_off"]
    assert reader.read_location(meta) == pattern(7, size)
    assert owner.call("check", key="sess:42:kv:L0", size=size, seed=7)["ok"]
    # A plan object is an object of the store (once the master has heard
    # of the commit, which a commit does not wait for).
    producer.call("flush")
    assert reader.store.is_exist("sess:42:kv:L0") == 1
    assert reader.store.get_size("sess:42:kv:L0") == size + 64
    st = producer.call("stats")
    assert st["committed"] == 1 and st["bytes_tx"] == size
    assert reader.stats()["reads"] >= 3


def test_routing_by_hash_and_by_segment_name(nano):
    owners = [nano.peer(heap=8 * MiB) for _ in range(3)]
    c = nano.cache()
    placed = set()
    for i in range(24):
        key = f"route/{i}"
        c.put(key, pattern(i, 1000))
        placed.add(c.get_location(key).owner_rank)
        assert c.get(key) == pattern(i, 1000)
    assert len(placed) >= 3, placed  # hash(key) % world spreads the keys
    c.put("named", b"x" * 10, preferred_segment=owners[1].segment)
    assert c.get_location("named").owner_rank == owners[1].rank


def test_a_producer_killed_before_commit_leaves_nothing_readable(nano):
    nano.master(client_ttl=1, tick_interval_ms=20)
    owner = nano.peer(heap=8 * MiB)
    producer = nano.peer()
    reader = nano.cache()
    plan = producer.call("open", key="dead", bytes=MiB, preferred=owner.rank)
    producer.call("fill_half", key="dead", seed=1)
    producer.kill()
    assert reader.get("dead") is None
    wait_until(lambda: reader.store.get_size("dead") == -704, timeout=15,
               what="the dead producer's plan reclaimed")
    # The slot is reused by the next object of its size; no reader ever
    # takes the half-written bytes for an object.
    reader.put("next", pattern(2, MiB), preferred_segment=owner.rank)
    meta = reader.get_location("next")
    assert meta.header_off == plan["header_off"], "slot not reused: the test shows nothing"
    assert reader.get("dead") is None and reader.get("next") == pattern(2, MiB)


def test_epochs_guard_reused_slots(nano):
    owner = nano.peer(heap=8 * MiB)
    c = nano.cache(heap=MiB)
    c.put("a", pattern(1, 4096), preferred_segment=owner.rank)
    old = c.get_location("a")
    c.remove("a")
    with pytest.raises(PlanError):
        c.read_location(old)
    c.put("b", pattern(2, 4096), preferred_segment=owner.rank)
    assert c.get_location("b").header_off == old.header_off
    with pytest.raises(PlanError):
        c.read_location(old)  # same slot, new epoch: refused
    forged = ObjMeta(old.key_hash, old.owner_rank, old.header_off, old.payload_off, old.bytes_total,
                     old.page_bytes, old.n_pages, c.get_location("b").epoch, old.segment_id)
    with pytest.raises(PlanError):
        c.read_location(forged)  # right epoch, wrong key: refused
    assert c.stats()["stale_reads"] >= 3


def test_watermark_eviction_frees_space_and_stats_report_it(nano):
    owner = nano.peer(heap=8 * MiB)
    c = nano.cache(heap=MiB, low_watermark=0.5)
    for i in range(20):  # 20 MiB through an 8 MiB heap
        c.put(f"w/{i}", pattern(i, MiB), preferred_segment=owner.rank)
    assert c.get("w/19") == pattern(19, MiB)
    assert c.get("w/0") is None  # the oldest went first
    st = c.stats()
    heap = st["heaps"][owner.rank]
    assert heap["total"] == 8 * MiB and 0 < heap["used"] <= 8 * MiB
    evicted = c.evict_until_below(0.2)
    # The watermark ones too: every refused open evicted down to 50% (the
    # master's own pass, which the refusal also starts, may free part).
    assert evicted > 0 and c.stats()["evictions"] >= evicted + 3
    after = c.stats()["heaps"][owner.rank]
    assert after["used"] < heap["used"] and after["used"] / after["total"] < 0.2 + 1 / 8


def test_bad_input(nano):
    owner = nano.peer(heap=4 * MiB)
    c = nano.cache(heap=MiB)
    with pytest.raises(ValueError):
        c.open_for_write("zero", 0)
    with pytest.raises(ValueError):
        c.open_for_write("huge", 5 * MiB, preferred_segment=owner.rank)
    with pytest.raises(ValueError):
        c.open_for_write("nobody", 10, preferred_segment=99)
    with pytest.raises(TypeError):
        c.open_for_write("typed", "10")
    with pytest.raises(KeyError):
        c.commit("never-opened")
    with pytest.raises(KeyError):
        c.get_location("missing")
    with pytest.raises(KeyError):
        c.remove("missing")
    assert c.get("missing") is None
    # A plan used after remove.
    plan = c.open_for_write("gone", 4096, preferred_segment=owner.rank)
    c.remove("gone")
    with pytest.raises(KeyError):
        c.commit("gone")
    with pytest.raises(KeyError):
        c.write(plan, b"late")
    with pytest.raises(ValueError):
        c.evict_until_below(1.5)
    # Nothing else disturbed.
    c.put("fine", b"ok" * 100, preferred_segment=owner.rank)
    assert c.get("fine") == b"ok" * 100
    with pytest.raises(ValueError):
        c.get("fine", dst=bytearray(10))


def test_a_plan_never_committed_is_reclaimed(nano):
    """A producer alive but stuck between open and commit: after
    put_start_discard_timeout the master reclaims its plan; the key is free
    again and a commit that comes too late never makes the object visible."""
    nano.master(put_start_discard_timeout_sec=1, tick_interval_ms=10)
    owner = nano.peer(heap=8 * MiB)
    producer = nano.peer()
    reader = nano.cache()
    producer.call("open", key="stuck", bytes=MiB, preferred=owner.rank)
    producer.call("fill", key="stuck", seed=5)
    wait_until(lambda: reader.store.get_size("stuck") == -704, timeout=15,
               what="the stuck plan reclaimed")
    producer.call("commit", key="stuck")
    producer.call("flush")
    assert reader.get("stuck") is None
    assert producer.call("stats")["commit_failures"] == 1
    reader.put("stuck", pattern(6, 1000), preferred_segment=owner.rank)  # the key is free
    assert reader.get("stuck") == pattern(6, 1000)
