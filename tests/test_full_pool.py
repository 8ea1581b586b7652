"""Puts into a full pool: they wait for room that is on its way, and say why
when none is.

With the SSD tier on, memory fills faster than the tier persists it; the
master evicts a memory copy only once its disk copy exists, so room comes
a little later. A plain loop of puts (no retry of its own) must store every
object: each put waits, up to ``put_space_wait_ms``, for the room the master
says is coming. Without anything to free (every object hard-pinned), a put
returns -200 at once, and the first refusal of a burst logs the master's
reason: a full pool, an object larger than any segment, or no segment.
"""

from __future__ import annotations

import ctypes
import time

import pytest

from conftest import MiB, pattern
from gostore import ErrorCode, MooncakeDistributedStore

NO_SPACE = int(ErrorCode.NO_AVAILABLE_HANDLE)
REFUSAL = "no space for a put"


def value(i: int) -> bytes:
    base = pattern(777, MiB)
    r = (i * 4099) % MiB
    return base[r:] + base[:r]


@pytest.mark.parametrize("wait_ms", [None, 0], ids=["default-wait", "no-wait"])
def test_plain_put_loop_fills_the_ssd_tier(master_factory, tmp_path, monkeypatch, wait_ms):
    """128 x 1 MiB through a 32 MiB pool onto disk, without a retry loop.
    With waiting turned off (put_space_wait_ms=0) the same loop loses puts
    to -200: the control that shows the first case depends on the wait."""
    m = master_factory(enable_offload=True)
    monkeypatch.setenv("MOONCAKE_OFFLOAD_LOCAL_BUFFER_SIZE_BYTES", str(16 * MiB))
    monkeypatch.setenv("MOONCAKE_OFFLOAD_TOTAL_SIZE_LIMIT_BYTES", str(512 * MiB))
    s = MooncakeDistributedStore()
    extra = {} if wait_ms is None else {"put_space_wait_ms": wait_ms}
    try:
        assert s.setup("127.0.0.1", "P2PHANDSHAKE", 32 * MiB, 16 * MiB, "tcp", "", m.addr,
                       ssd_offload_path=str(tmp_path), **extra) == 0
        codes = [s.put(f"obj{i}", value(i)) for i in range(128)]
        if wait_ms == 0:
            assert codes.count(NO_SPACE) > 0 and set(codes) <= {0, NO_SPACE}, codes
            return
        assert codes == [0] * 128, [(i, c) for i, c in enumerate(codes) if c]
        # Every object reads back with its own bytes, most from the disk.
        for i in range(128):
            assert s.get(f"obj{i}") == value(i), f"obj{i}"
        assert m.metric("gostore_master_offloaded_total") >= 96
    finally:
        s.close()


def test_nothing_to_free_fails_at_once_and_says_why(master_factory, peer_factory):
    m = master_factory()
    # A long wait: a put that waited for room that never comes would show.
    p = peer_factory(m, segment="4MB", env={"GOSTORE_PUT_SPACE_WAIT_MS": "60000",
                                           "GOSTORE_LOG_LEVEL": "warn"})
    # Larger than any segment: refused at once, with that reason.
    t0 = time.monotonic()
    assert p.put_pattern("huge", 5 * MiB, 1) == NO_SPACE
    assert time.monotonic() - t0 < 10
    refusals = [x for x in p.log().splitlines() if REFUSAL in x]
    assert len(refusals) == 1 and "larger than any segment" in refusals[0], p.log()
    assert "size=5242880" in refusals[0] and "key=huge" in refusals[0]

    # A put that finds room ends the burst.
    assert p.put_pattern("small", 4096, 2) == 0
    assert p.remove("small") == 0
    # Fill the pool with hard-pinned objects: eviction can free nothing.
    for i in range(4):
        assert p.upsert_pattern(f"pinned{i}", MiB - 4096, i, hard_pin=True) == 0
    t0 = time.monotonic()
    codes = [p.put_pattern(f"more{i}", MiB, 10 + i) for i in range(5)]
    assert codes == [NO_SPACE] * 5
    assert time.monotonic() - t0 < 10, "puts waited for room nothing was going to free"
    refusals = [x for x in p.log().splitlines() if REFUSAL in x]
    assert len(refusals) == 2, p.log()  # one per burst, not one per put
    assert "the pool is full" in refusals[1] and "key=more0" in refusals[1], refusals[1]
    # The pinned objects are intact.
    for i in range(4):
        assert p.check_pattern(f"pinned{i}", MiB - 4096, i)


def test_no_segment_at_all_says_so(master_factory, peer_factory):
    m = master_factory()
    consumer = peer_factory(m, segment="0")
    assert consumer.put_pattern("k", 4096, 3) == NO_SPACE
    refusals = [x for x in consumer.log().splitlines() if REFUSAL in x]
    assert len(refusals) == 1 and "no segment is mounted" in refusals[0], consumer.log()


# ---------------------------------------------------------------------------
# a small disk under the tier

FS_BYTES = 48 * MiB


@pytest.fixture
def small_fs(tmp_path):
    """A 48 MiB tmpfs (root only: CI and the developers' machines run as root)."""
    import subprocess

    mnt = tmp_path / "fs"
    mnt.mkdir()
    r = subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={FS_BYTES}", "tmpfs", str(mnt)],
                       capture_output=True, text=True)
    if r.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here: {r.stderr.strip()}")
    yield mnt
    subprocess.run(["umount", "-l", str(mnt)])


def fs_used(path) -> int:
    import os

    st = os.statvfs(path)
    return (st.f_blocks - st.f_bfree) * st.f_frsize


@pytest.mark.parametrize("backend", ["bucket_storage_backend", "file_per_key_storage_backend",
                                     "offset_allocator_storage_backend"])
def test_tier_never_fills_a_small_disk(master_factory, small_fs, monkeypatch, backend):
    """Four times the disk through the tier, with default limits (2 TiB):
    the disk never passes 90% (+ one block for the storage id), and every
    object still readable has its own bytes."""
    m = master_factory(enable_offload=True)
    monkeypatch.setenv("MOONCAKE_OFFLOAD_STORAGE_BACKEND_DESCRIPTOR", backend)
    monkeypatch.setenv("MOONCAKE_OFFLOAD_LOCAL_BUFFER_SIZE_BYTES", str(16 * MiB))
    monkeypatch.setenv("MOONCAKE_OFFLOAD_BUCKET_SIZE_LIMIT_BYTES", str(4 * MiB))
    cap = int(FS_BYTES * 0.9) + 4096
    s = MooncakeDistributedStore()
    try:
        # Backends without eviction stop taking copies at their cap, and
        # then memory cannot make room: a short wait keeps the loop short.
        assert s.setup("127.0.0.1", "P2PHANDSHAKE", 16 * MiB, 16 * MiB, "tcp", "", m.addr,
                       ssd_offload_path=str(small_fs), put_space_wait_ms=300) == 0
        assert fs_used(small_fs) < 64 * 1024, "opening the tier took disk space"
        n = 4 * FS_BYTES // MiB
        codes, peak = [], 0
        for i in range(n):
            codes.append(s.put(f"obj{i}", value(i)))
            peak = max(peak, fs_used(small_fs))
            assert peak <= cap, f"after put {i} the disk holds {peak} bytes, over {cap}"
        assert set(codes) <= {0, NO_SPACE}, codes
        assert codes.count(0) >= 16 + 8, codes  # the pool, and what the disk took
        readable = 0
        for i in range(n):
            got = s.get(f"obj{i}")
            if got:
                assert got == value(i), f"obj{i} came back with other bytes"
                readable += 1
        assert readable >= 16
    finally:
        s.close()


def test_a_tier_that_refuses_offloads_does_not_stall_puts(master_factory, peer_factory, tmp_path):
    """The tier's disk at its limit refuses every offload, so the objects
    said to wait for their disk copy never get one. Puts stop waiting once
    the master shows no progress (about 2 s, once), not put_space_wait_ms
    each; the tier logs its failures once, not at every eviction pass."""
    m = master_factory(enable_offload=True)
    p = peer_factory(m, segment="16MB", ssd=str(tmp_path), env={
        "MOONCAKE_OFFLOAD_STORAGE_BACKEND_DESCRIPTOR": "offset_allocator_storage_backend",
        "MOONCAKE_OFFLOAD_TOTAL_SIZE_LIMIT_BYTES": str(8 * MiB),
        "MOONCAKE_OFFLOAD_LOCAL_BUFFER_SIZE_BYTES": str(16 * MiB),
        "GOSTORE_PUT_SPACE_WAIT_MS": "60000", "GOSTORE_LOG_LEVEL": "warn"})
    t0 = time.monotonic()
    codes = [p.put_pattern(f"k{i}", MiB, i) for i in range(40)]
    elapsed = time.monotonic() - t0
    assert codes.count(0) >= 16 and set(codes) <= {0, NO_SPACE}, codes
    assert codes[-5:] == [NO_SPACE] * 5, codes
    # 24 refusals waiting 60 s each would take 24 minutes; a stall is
    # noticed once (2 s without progress) and remembered.
    assert elapsed < 30, f"{len(codes)} puts took {elapsed:.1f} s"
    log = p.log()
    # Failures interleave with the first successes (one line per run of
    # them), then every pass asks again in vain: counted, not logged.
    assert 1 <= log.count("offload failed") <= 5, log
    assert log.count(REFUSAL) == 1, log
    for i, c in enumerate(codes):
        if c == 0:
            assert p.check_pattern(f"k{i}", MiB, i)


OBJ_768K = 768 * 1024


def _batch_write(s, api: str, keys, values):
    """One batch write call of the API named; returns its codes."""
    if api in ("put_batch", "upsert_batch"):
        return getattr(s, api)(keys, values)
    buf = ctypes.create_string_buffer(b"".join(values))
    base = ctypes.addressof(buf)
    assert s.register_buffer(base, len(buf)) == 0
    try:
        ptrs = [base + i * OBJ_768K for i in range(len(keys))]
        return getattr(s, api)(keys, ptrs, [OBJ_768K] * len(keys))
    finally:
        s.unregister_buffer(base)


@pytest.mark.parametrize("api", ["batch_put_from", "put_batch", "upsert_batch", "batch_upsert_from"])
def test_a_batch_never_evicts_what_it_just_wrote(master_factory, peer_factory, store_factory, api):
    """Issue 32, bug 4: 5 x 768 KiB into a 2 MiB pool that holds one older
    object. The write waits for room; eviction takes the older object, never
    the call's own (they have no disk copy). What fits is stored and
    answered 0, the rest -200. Before the fix every item answered 0 while
    the call had evicted its own first three objects to make room."""
    m = master_factory(tick_interval_ms=20)
    peer_factory(m, segment="2MB")  # the pool: one 2 MiB segment
    s = store_factory(m, segment=0)
    assert s.put("older", pattern(49, OBJ_768K)) == 0
    keys = [f"{api}/{i}" for i in range(5)]
    values = [pattern(50 + i, OBJ_768K) for i in range(5)]
    codes = _batch_write(s, api, keys, values)
    if isinstance(codes, int):  # put_batch, upsert_batch: 0 or the first error
        assert codes == NO_SPACE, codes
        codes = [0 if m.query_key(k) else NO_SPACE for k in keys]
    # older + item 0 fill the pool; item 1 waits and gets older's room; the
    # rest find none.
    assert codes == [0, 0, NO_SPACE, NO_SPACE, NO_SPACE], codes
    assert m.query_key("older") is None
    stored = [(k, v) for k, v, c in zip(keys, values, codes) if c == 0]
    # The call's last refusals asked for an eviction pass, which runs a
    # tick (20 ms) after the call: it must not take what the call stored
    # either. Watch 15 ticks through the master's query_key, which leases
    # nothing (get and is_exist lease, and so protect, what they look at).
    deadline = time.monotonic() + 0.3
    while time.monotonic() < deadline:
        gone = [k for k, _ in stored if not m.query_key(k)]
        assert not gone, f"{gone} evicted right after the call answered 0 for them: {codes}"
        time.sleep(0.02)
    for k, v, c in zip(keys, values, codes):
        if c == 0:
            assert s.get(k) == v, f"{k} answered 0 but is gone or changed"
        else:
            assert s.is_exist(k) == 0, f"{k} answered {c} but exists"
