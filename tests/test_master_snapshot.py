"""Snapshots stop no call: the real ``gostore-master`` holding a few hundred
thousand objects takes a snapshot every second (``--snapshot_backup_dir``,
``--snapshot_interval_seconds=1``) while a client reads existing keys in a
loop under a short lease (``--default_kv_lease_ttl=100`` ms). Every read
answers its object's bytes: not one false miss. (A master that copied its
state under every lock paused each call for longer than the lease.)"""

from __future__ import annotations

import os
import random
import time

from conftest import MiB, wait_until

OBJECTS = 300_000
BATCH = 4096


def value(i: int) -> bytes:
    return (b"%08d" % i) * 8  # 64 bytes, its own per key


def test_reads_through_snapshots_answer_every_existing_object(launcher, tmp_path):
    state = str(tmp_path / "state")
    m = launcher.master(snapshot_backup_dir=state, snapshot_interval_seconds="1s", default_kv_lease_ttl=100)
    writer = launcher.store(m, segment=128 * MiB, buffer=16 * MiB)
    for start in range(0, OBJECTS, BATCH):
        idx = range(start, min(start + BATCH, OBJECTS))
        assert writer.put_batch([f"snap/{i}" for i in idx], [value(i) for i in idx]) == 0
    reader = launcher.store(m, segment=0, buffer=4 * MiB)
    # The first snapshot holding them all: a later one comes while reading.
    wait_until(lambda: any(n.endswith(".gsnap") for n in os.listdir(state)), timeout=30, what="a snapshot")
    snaps_before = m.log().count("snapshot taken")
    rng = random.Random(7)
    reads, misses, wrong, slowest = 0, [], [], 0.0
    deadline = time.monotonic() + 6.0  # several snapshot intervals
    while time.monotonic() < deadline:
        i = rng.randrange(OBJECTS)
        t0 = time.monotonic()
        got = reader.get(f"snap/{i}")
        slowest = max(slowest, time.monotonic() - t0)
        reads += 1
        if not got:
            misses.append(i)
        elif got != value(i):
            wrong.append(i)
    print(f"{reads} reads of {OBJECTS} objects, slowest {slowest * 1e3:.1f} ms, {len(misses)} misses, "
          f"{len(wrong)} wrong")
    assert not misses and not wrong, (f"{len(misses)} false misses (e.g. {misses[:5]}), {len(wrong)} wrong "
                                      f"values in {reads} reads; slowest read {slowest * 1e3:.0f} ms")
    # The reads did overlap snapshots of the whole store.
    taken = m.log().count("snapshot taken") - snaps_before
    assert taken >= 3, f"{taken} snapshots while reading"
    assert f"objects={OBJECTS}" in m.log()
