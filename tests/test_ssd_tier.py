"""The SSD tier end to end (PYTHON_API.md "SSD tier"), with the real master
binary and real client processes on loopback, real files and real io_uring.

A storage peer runs ``setup(..., enable_ssd_offload=True,
ssd_offload_path=...)`` with a small segment; the test process writes four
times the pool through it. The master asks the peer to persist what it
holds, evicts memory copies only once they are on disk, and readers fall
back to the disk copy transparently. A SIGKILLed peer restarted on the same
directory brings its objects back; a corrupted file is reported and never
served; a disk at its size limit evicts instead of failing.
"""

from __future__ import annotations

import glob
import os
import time

import pytest

from conftest import MiB, pattern, wait_until
from gostore import ErrorCode

NO_SPACE = int(ErrorCode.NO_AVAILABLE_HANDLE)
SEGMENT = 16 * MiB
OBJ = MiB


def tier_env(backend: str, uring: bool, **extra) -> dict:
    env = {
        "MOONCAKE_OFFLOAD_STORAGE_BACKEND_DESCRIPTOR": backend,
        "MOONCAKE_OFFLOAD_USE_URING": "true" if uring else "false",
        "MOONCAKE_OFFLOAD_HEARTBEAT_INTERVAL_SECONDS": "0.2",
        "MOONCAKE_OFFLOAD_LOCAL_BUFFER_SIZE_BYTES": str(16 * MiB),
        "MOONCAKE_OFFLOAD_TOTAL_SIZE_LIMIT_BYTES": str(512 * MiB),
        "MOONCAKE_OFFLOAD_BUCKET_SIZE_LIMIT_BYTES": str(4 * MiB),
        "GOSTORE_LOG_LEVEL": "info",
    }
    env.update({k: str(v) for k, v in extra.items()})
    return env


def offload_master(master_factory, **flags):
    """A master with the tier on; leases keep their default (10 s): the
    tier's own reads must not hold off the eviction they prepare."""
    base = dict(enable_offload=True, tick_interval_ms=20, eviction_high_watermark_ratio=0.8,
                eviction_ratio=0.2, client_ttl=2)
    base.update(flags)
    return master_factory(**base)


def put_retrying(store, key: str, value: bytes, seconds: float = 30.0) -> None:
    """put, retried while the pool is full (the master frees memory as the
    SSD tier takes the older objects)."""
    deadline = time.monotonic() + seconds
    while True:
        rc = store.put(key, value)
        if rc == 0:
            return
        assert rc == NO_SPACE and time.monotonic() < deadline, f"put {key}: {rc}"
        time.sleep(0.01)


def value(i: int) -> bytes:
    """Object i's bytes: distinct per object, cheap to make."""
    base = pattern(4242, OBJ)
    r = (i * 4099) % OBJ
    return base[r:] + base[:r]


def on_disk(master, key: str) -> bool:
    info = master.query_key(key)
    return bool(info and info.get("disk"))


def disk_only(master, key: str) -> bool:
    info = master.query_key(key)
    return bool(info and info.get("disk") and not info.get("replicas"))


@pytest.mark.parametrize("backend,uring,on_evict", [
    ("bucket_storage_backend", True, False),
    ("bucket_storage_backend", False, True),
    ("file_per_key_storage_backend", True, False),
    ("offset_allocator_storage_backend", False, False),
], ids=["bucket-uring", "bucket-pread-offload_on_evict", "perkey-uring", "offset-pread"])
def test_four_times_the_pool_stays_readable_and_survives_sigkill(master_factory, peer_factory,
                                                                 store_factory, tmp_path,
                                                                 backend, uring, on_evict):
    """With ``--offload_on_evict`` the master asks only for the objects its
    eviction picks, so after the kill only those (at least half: the pool
    holds a quarter) are expected back."""
    m = offload_master(master_factory, offload_on_evict=on_evict)
    ssd = str(tmp_path / "ssd")
    os.mkdir(ssd)
    env = tier_env(backend, uring)
    holder = peer_factory(m, segment=str(SEGMENT), ssd=ssd, env=env)
    writer = store_factory(m, segment=0)  # every object lands on the holder
    n = 4 * SEGMENT // OBJ
    keys = [f"ssd/{i}" for i in range(n)]
    for i, k in enumerate(keys):
        put_retrying(writer, k, value(i))

    for i, k in enumerate(keys):
        assert writer.get(k) == value(i), f"{k} lost or changed"
    # Most objects can only have come from disk: the pool holds a quarter.
    wait_until(lambda: sum(disk_only(m, k) for k in keys) >= n // 2, timeout=10,
               what="most objects disk-only")
    io = "io_uring" if uring else "pread"
    assert f"io={io}" in holder.log(), holder.log()

    # The holder dies without a word. What it had on disk survives (with
    # offload_on_evict that is what eviction needed, not everything).
    if not on_evict:
        wait_until(lambda: all(on_disk(m, k) for k in keys), timeout=20, what="every object on disk")
    persisted = [i for i, k in enumerate(keys) if on_disk(m, k)]
    assert len(persisted) >= n // 2, len(persisted)
    holder.kill()
    # Restarted under its name (host:port), as a pod comes back: it takes
    # the dead process's segment over at once (a free port taken at random
    # would be the same name now and then: this way, every time).
    restarted = peer_factory(m, segment=str(SEGMENT), ssd=ssd, env=env, hostname=holder.hostname)
    assert restarted.hostname == holder.hostname
    assert m.metric("gostore_master_clients_taken_over_total") == 1
    assert "SSD tier recovered" in restarted.log()
    for i in persisted:
        assert writer.get(keys[i]) == value(i), f"{keys[i]} not readable after the restart"
    # Still so once the master has forgotten the dead process (client_ttl
    # after the takeover retired it): read on until well past that.
    until = time.monotonic() + 3.5
    while time.monotonic() < until:
        for i in persisted:
            assert writer.get(keys[i]) == value(i), f"{keys[i]} lost when the dead process was forgotten"


def test_corrupt_bucket_files_are_reported_and_never_served(master_factory, peer_factory,
                                                            store_factory, tmp_path):
    m = offload_master(master_factory)
    ssd = str(tmp_path / "ssd")
    os.mkdir(ssd)
    env = tier_env("bucket_storage_backend", True,
                   MOONCAKE_OFFLOAD_BUCKET_KEYS_LIMIT=4)
    holder = peer_factory(m, segment=str(SEGMENT), ssd=ssd, env=env)
    writer = store_factory(m, segment=0)
    keys = [f"bad/{i}" for i in range(24)]
    for i, k in enumerate(keys):
        put_retrying(writer, k, value(i))
    wait_until(lambda: all(on_disk(m, k) for k in keys), timeout=20, what="every object on disk")
    holder.kill()

    metas = sorted(glob.glob(os.path.join(ssd, "*.meta")))
    datas = sorted(glob.glob(os.path.join(ssd, "*.bucket")))
    assert len(metas) >= 3, metas
    # One bucket's index torn in the middle, another's data flipped.
    with open(metas[0], "r+b") as f:
        f.truncate(os.path.getsize(metas[0]) // 2)
    victim = value(keys.index(_first_key_in(datas[1], keys)))
    with open(datas[1], "r+b") as f:
        data = f.read()
        at = data.find(victim[5000:5064])
        assert at >= 0
        f.seek(at)
        f.write(bytes(b ^ 0xFF for b in data[at:at + 64]))

    restarted = peer_factory(m, segment=str(SEGMENT), ssd=ssd, env=env)
    assert "skipping bucket" in restarted.log(), restarted.log()
    wait_until(lambda: m.metric("gostore_master_clients_expired_total") >= 1, timeout=10,
               what="the killed peer expired")
    served = missing = 0
    for i, k in enumerate(keys):
        got = writer.get(k)
        if got:
            assert got == value(i), f"{k}: wrong bytes served"
            served += 1
        else:
            missing += 1
    # The torn bucket's objects and the flipped object are gone; the rest
    # is intact.
    assert missing >= 2 and served >= len(keys) - 8, (served, missing)
    assert "failed their checksum" in restarted.log(), restarted.log()


def _first_key_in(bucket_file: str, keys) -> str:
    with open(bucket_file, "rb") as f:
        data = f.read()
    for k in keys:
        if k.encode() in data:
            return k
    raise AssertionError(f"no key found in {bucket_file}")


def bucket_bytes(ssd: str) -> int:
    """The bytes of the bucket backend's files in ssd, skipping files deleted
    while they are counted."""
    used = 0
    for p in glob.glob(os.path.join(ssd, "*.bucket")) + glob.glob(os.path.join(ssd, "*.meta")):
        try:
            used += os.path.getsize(p)
        except FileNotFoundError:
            pass
    return used


def test_disk_at_its_limit_evicts_instead_of_failing(master_factory, peer_factory, store_factory,
                                                     tmp_path):
    m = offload_master(master_factory)
    ssd = str(tmp_path / "ssd")
    os.mkdir(ssd)
    limit = 24 * MiB
    env = tier_env("bucket_storage_backend", True, MOONCAKE_OFFLOAD_BUCKET_MAX_TOTAL_SIZE=limit,
                   MOONCAKE_OFFLOAD_BUCKET_EVICTION_POLICY="fifo")
    peer_factory(m, segment=str(SEGMENT), ssd=ssd, env=env)
    writer = store_factory(m, segment=0)
    n = 4 * SEGMENT // OBJ
    keys = [f"full/{i}" for i in range(n)]
    for i, k in enumerate(keys):
        put_retrying(writer, k, value(i))  # never fails: the disk makes room
    # The tier offloads behind the puts: wait until the newest object is on
    # disk, and count only files that still exist (an evicted bucket's files
    # may go between the listing and the stat).
    wait_until(lambda: on_disk(m, keys[-1]), timeout=20, what="the newest object on disk")
    used = bucket_bytes(ssd)
    assert used <= limit, f"disk tier uses {used} bytes, limit {limit}"
    assert writer.get_offload_rpc_read_count() == 0  # nothing read from a disk yet
    kept = 0
    for i, k in enumerate(keys):
        got = writer.get(k)
        if got:
            assert got == value(i), f"{k}: wrong bytes"
            kept += 1
    # The newest objects survive (memory plus what the disk keeps); the
    # oldest went with the buckets the disk evicted.
    assert writer.get(keys[-1]) == value(n - 1)
    assert SEGMENT // OBJ <= kept < n, kept
    # Objects past what memory holds came from the peer's disk, one get each.
    assert 1 <= writer.get_offload_rpc_read_count() <= n + 1


@pytest.mark.parametrize("what", ["missing", "file", "unwritable"])
def test_bad_ssd_path_fails_setup_with_a_clear_error(master_factory, peer_factory, tmp_path, what):
    m = offload_master(master_factory)
    if what == "missing":
        path, code = str(tmp_path / "nope"), ErrorCode.FILE_NOT_FOUND
    elif what == "file":
        path, code = str(tmp_path / "f"), ErrorCode.INVALID_PARAMS
        open(path, "w").close()
    else:
        path, code = _unwritable(tmp_path), ErrorCode.FILE_WRITE_FAIL
    p = peer_factory(m, segment="4MB", ssd=path, env=tier_env("bucket_storage_backend", True),
                     expect_ready=False)
    assert p.setup_rc == int(code), (p.setup_rc, p.log())
    assert path in p.log() and "SSD tier" in p.log(), p.log()
    assert m.segments() == [], "a failed setup left a segment mounted"


def _unwritable(tmp_path) -> str:
    if os.geteuid() != 0:
        d = tmp_path / "ro"
        d.mkdir()
        d.chmod(0o555)
        return str(d)
    try:  # root ignores permissions; sysfs refuses new files even to root
        open("/sys/gostore-probe", "w").close()
    except OSError:
        return "/sys"
    os.remove("/sys/gostore-probe")
    pytest.skip("no directory here that root cannot write")


def test_one_setup_argument_turns_the_tier_on(master_factory, store_factory, tmp_path,
                                              monkeypatch):
    """``ssd_offload_path`` alone is enough; ``enable_ssd_offload=False``
    wins over it; ``enable_ssd_offload=True`` with no directory anywhere is
    a clear error. (Settings made in Python after the library loaded count:
    the staging buffer here is the 16 MiB set below, not 1.25 GiB.)"""
    from gostore import MooncakeDistributedStore

    monkeypatch.setenv("MOONCAKE_OFFLOAD_LOCAL_BUFFER_SIZE_BYTES", str(16 * MiB))
    m = offload_master(master_factory)
    on = MooncakeDistributedStore()
    assert on.setup("127.0.0.1", "P2PHANDSHAKE", 4 * MiB, 4 * MiB, "tcp", "", m.addr,
                    ssd_offload_path=str(tmp_path)) == 0
    try:
        assert os.path.exists(os.path.join(tmp_path, ".gostore-storage-id"))
        assert [s["Offload"] for s in m.segments()] == [True]
        with open("/proc/self/maps") as f:
            staging = [line for line in f if "gostore:ssd-staging:" in line]
        assert staging, "no staging buffer mapped"
        lo, hi = (int(x, 16) for x in staging[0].split()[0].split("-"))
        assert hi - lo == 16 * MiB, f"staging buffer of {hi - lo} bytes"
    finally:
        on.close()
    off = MooncakeDistributedStore()
    other = tmp_path / "unused"
    other.mkdir()
    assert off.setup("127.0.0.1", "P2PHANDSHAKE", 4 * MiB, 4 * MiB, "tcp", "", m.addr,
                     enable_ssd_offload=False, ssd_offload_path=str(other)) == 0
    try:
        assert os.listdir(other) == []
    finally:
        off.close()
    env_missing = MooncakeDistributedStore()
    monkeypatch.delenv("MOONCAKE_OFFLOAD_FILE_STORAGE_PATH", raising=False)
    try:
        assert env_missing.setup("127.0.0.1", "P2PHANDSHAKE", 4 * MiB, 4 * MiB, "tcp", "", m.addr,
                                 enable_ssd_offload=True) == int(ErrorCode.INVALID_PARAMS)
    finally:
        env_missing.close()


def test_disk_lru_counts_a_write_as_a_use(master_factory, peer_factory, store_factory, tmp_path):
    """Issue 32, bug 1 (Mooncake #3097): with ``lru`` a bucket is used when
    it is written, not only when read. A is read from disk at T, then N0..N5
    are written: A's bucket was last used before all of theirs, so it is the
    one the disk drops when N5 needs room, and every N stays readable.
    Before the fix, N0's never-read bucket went first; N0 had already left
    memory, so it was lost."""
    m = offload_master(master_factory, client_ttl=5)
    ssd = str(tmp_path / "ssd")
    os.mkdir(ssd)
    env = tier_env("bucket_storage_backend", True,
                   MOONCAKE_OFFLOAD_BUCKET_EVICTION_POLICY="lru",
                   MOONCAKE_OFFLOAD_BUCKET_KEYS_LIMIT=1,
                   MOONCAKE_OFFLOAD_BUCKET_MAX_TOTAL_SIZE=6815744)  # six 1 MiB buckets
    peer_factory(m, segment=str(4 * MiB), ssd=ssd, env=env)
    writer = store_factory(m, segment=0)

    put_retrying(writer, "A", value(100))
    fillers = [f"filler/{i}" for i in range(4)]
    for i, k in enumerate(fillers):
        put_retrying(writer, k, value(200 + i))
    wait_until(lambda: disk_only(m, "A"), timeout=20, what="A only on disk")
    for k in fillers:
        assert writer.remove(k) == 0
    # The fillers' disk copies go too: only A's bucket is left.
    wait_until(lambda: len(glob.glob(os.path.join(ssd, "*.bucket"))) == 1, timeout=20,
               what="the fillers' buckets deleted")

    assert writer.get("A") == value(100)  # read from disk: A's bucket is used at T
    assert writer.get_offload_rpc_read_count() >= 1

    new = [f"new/{i}" for i in range(6)]
    for i, k in enumerate(new):
        put_retrying(writer, k, value(i))
    # N5's bucket is the seventh: once it is on disk, one bucket has gone.
    wait_until(lambda: on_disk(m, new[-1]), timeout=20, what="N5 on disk")
    for i, k in enumerate(new):
        assert writer.get(k) == value(i), f"{k} lost or changed: {m.query_key(k)}"
    wait_until(lambda: not on_disk(m, "A"), timeout=20, what="A's bucket evicted")
