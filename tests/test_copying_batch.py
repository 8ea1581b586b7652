"""Copying batch reads whatever the local buffer's size, and what they cost
in fresh pages.

Mooncake's copying reads stage through ``local_buffer_size`` bytes and stop
returning objects once a batch outgrows it; gostore's read into the objects
they return (``get_batch``, the tensor reads) or lend memory beyond the
buffer (``batch_get_buffer``), so a batch of any total size comes back
whole. The objects a copying read returns are allocated by Python's
malloc: the store keeps freed ones mapped for the next read
(``gostore.buffers.heap``), as the client keeps the mappings it lent beyond the
local buffer, so a repeated batch does not fault in fresh pages.
"""

from __future__ import annotations

import os
import resource
from typing import Dict, List

import numpy as np
import pytest

from conftest import MiB, pattern, wait_until
from gostore.buffers.pins import SCRATCH_BYTES

OBJ = 2 * MiB
N = 12  # 24 MiB per batch against a 4 MiB local buffer


@pytest.fixture
def small_buffer_reader(master_factory, peer_factory, store_factory):
    """(writer peer, reader store): the peer holds every object; the reader
    contributes no memory and has a 4 MiB local buffer."""
    m = master_factory()
    peer = peer_factory(m, segment=str(64 * MiB))
    reader = store_factory(m, segment=0, buffer=4 * MiB)
    return m, peer, reader


def test_get_batch_and_batch_get_buffer_return_every_object_past_the_local_buffer(small_buffer_reader):
    _, peer, reader = small_buffer_reader
    keys = [f"big/{i}" for i in range(N)]
    for i, k in enumerate(keys):
        assert peer.put_pattern(k, OBJ, 500 + i) == 0
    want = [pattern(500 + i, OBJ) for i in range(N)]
    for _ in range(2):  # the second batch reuses what the first freed
        got = reader.get_batch(keys)
        assert [len(v) for v in got] == [OBJ] * N
        for i, v in enumerate(got):
            assert v == want[i], f"{keys[i]}: wrong bytes"
        del got
    bufs = reader.batch_get_buffer(keys)
    assert all(b is not None for b in bufs), [b is None for b in bufs]
    for i, b in enumerate(bufs):
        assert bytes(b) == want[i], f"{keys[i]}: wrong bytes in the lent buffer"
    del bufs
    # Lent memory came back: the whole batch can be lent again.
    again = reader.batch_get_buffer(keys)
    assert all(b is not None and bytes(b) == want[i] for i, b in enumerate(again))


def test_batch_get_tensor_returns_every_tensor_past_the_local_buffer(small_buffer_reader):
    _, peer, reader = small_buffer_reader
    writer = reader  # puts land on the peer: the reader has no segment
    arrays = [np.arange(OBJ // 4, dtype=np.float32) + i for i in range(N)]
    keys = [f"t/{i}" for i in range(N)]
    assert writer.batch_put_tensor(keys, arrays) == [0] * N
    got = reader.batch_get_tensor(keys)
    assert all(t is not None for t in got), [t is None for t in got]
    for i, t in enumerate(got):
        assert np.array_equal(np.asarray(t), arrays[i]), f"{keys[i]}: wrong values"


@pytest.mark.parametrize("call", ["get_batch", "batch_get_buffer"])
def test_a_repeated_batch_reuses_freed_memory(small_buffer_reader, call):
    """A batch of 12 x 2 MiB is 6,144 pages, five times the local buffer.
    Read again once the first result is freed, it must land in memory kept
    from the last call (malloc's for get_batch, the client's spare mappings
    for batch_get_buffer), not in pages the kernel faults in and zeroes on
    every call."""
    _, peer, reader = small_buffer_reader
    keys = [f"warm/{i}" for i in range(N)]
    for i, k in enumerate(keys):
        assert peer.put_pattern(k, OBJ, 900 + i) == 0
    pages = N * OBJ // 4096
    # The first read maps the peer's segment, and the client faults that
    # mapping in behind it (transfer's prefault, MADV_POPULATE_WRITE): those
    # faults count in this process too (getrusage counts the ones a system
    # call takes for it), for as long as it runs: on a slow machine, 40 MiB
    # of it spread over calls 2-4 and failed this test every time. Counted
    # from when it is done, the faults are the results' own.
    mapped_before = _peer_mappings()
    getattr(reader, call)(keys[:1])

    def segment_faulted_in() -> bool:
        new = [v for r, v in _peer_mappings().items() if r not in mapped_before]
        return bool(new) and all(size == rss for size, rss in new)

    if _kernel_at_least(5, 14):  # MADV_POPULATE_WRITE; before it nothing is faulted in behind the reads
        wait_until(segment_faulted_in, timeout=30, what="the peer's segment mapped and faulted in")
    faults = []
    for _ in range(8):
        before = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
        got = getattr(reader, call)(keys)
        faults.append(resource.getrusage(resource.RUSAGE_SELF).ru_minflt - before)
        assert all(v is not None and len(v) == OBJ for v in got)
        del got
    # The first calls may grow the heap, and more than one when the test
    # process's heap is fragmented by the tests before (the freed results
    # are split for other allocations until the heap settles); the typical
    # later call is warm. (The process's other threads fault a little too.)
    later = sorted(faults[3:])
    assert later[len(later) // 2] < pages // 10, f"minor faults per call {faults}, batch of {pages} pages"


def _kernel_at_least(major: int, minor: int) -> bool:
    """Whether this Linux kernel's version is major.minor or later."""
    try:
        have = tuple(int(x) for x in os.uname().release.split("-")[0].split(".")[:2])
    except ValueError:
        return True
    return have >= (major, minor)


def _peer_mappings() -> Dict[str, List[int]]:
    """This process's mappings of peers' segments: {address range: (Size,
    Rss) in KiB}, from /proc/self/smaps."""
    out, rng, name = {}, "", ""
    with open("/proc/self/smaps") as f:
        for line in f:
            fields = line.split()
            if not fields[0].endswith(":"):  # a mapping's first line: range perms offset dev inode [path]
                rng, name = fields[0], " ".join(fields[5:])
                if name.startswith("/memfd:gostore"):
                    out[rng] = [0, 0]
            elif name.startswith("/memfd:gostore") and fields[0] in ("Size:", "Rss:"):
                out[rng][fields[0] == "Rss:"] = int(fields[1])
    return out


def _count_native_calls(store, monkeypatch, names):
    """How often ``store`` calls each of the native functions ``names``
    from now on (a dict the calls fill)."""
    lib = store._lib()
    calls = {}

    class Counting:
        def __getattr__(self, name):
            fn = getattr(lib, name)
            if name not in names:
                return fn

            def call(*args):
                calls[name] = calls.get(name, 0) + 1
                return fn(*args)

            return call

    counting = Counting()
    monkeypatch.setattr(store, "_lib", lambda: counting)
    return calls


def test_a_batch_of_small_values_is_read_in_the_call_that_finds_them(small_buffer_reader, monkeypatch):
    """get_batch of values that fit the per-thread scratch buffer together
    reads them in the call that looks them up (gs_get_packed), back to back
    in key order; one byte more and the hits are finished into objects of
    their own. Misses keep their places either way."""
    _, peer, reader = small_buffer_reader
    sizes = [1, 4095, 4096, 70_000, 12_345]
    sizes.append(SCRATCH_BYTES - sum(sizes))  # the batch fills the scratch exactly
    keys = [f"packed/{i}" for i in range(len(sizes))]
    for i, (k, n) in enumerate(zip(keys, sizes)):
        assert peer.put_pattern(k, n, 300 + i) == 0
    want = [pattern(300 + i, n) for i, n in enumerate(sizes)]
    calls = _count_native_calls(reader, monkeypatch, {"gs_get_packed", "gs_get_start", "gs_get_finish"})
    got = reader.get_batch(keys[:3] + ["packed/missing"] + keys[3:])
    assert got == want[:3] + [b""] + want[3:]
    assert calls == {"gs_get_packed": 1}
    # One byte past the scratch: looked up once, finished into new objects.
    assert peer.put_pattern("packed/one-more", sizes[-1] + 1, 399) == 0
    got = reader.get_batch(["packed/missing"] + keys[:-1] + ["packed/one-more"])
    assert got == [b""] + want[:-1] + [pattern(399, sizes[-1] + 1)]
    assert calls == {"gs_get_packed": 2, "gs_get_finish": 1}
    # Only misses: nothing to read, nothing left pending.
    assert reader.get_batch(["packed/missing", "packed/gone"]) == [b"", b""]
    assert calls == {"gs_get_packed": 3, "gs_get_finish": 1}


def test_a_batch_of_small_tensors_is_read_in_one_call_into_one_block(small_buffer_reader, monkeypatch):
    """batch_get_tensor of tensors that fit the scratch buffer together is
    one native call; the tensors are views of one array holding them all
    (one allocation, one copy). Past the scratch, each gets its own."""
    _, peer, reader = small_buffer_reader
    arrays = [np.arange(n, dtype=dt) * 3 for n, dt in ((5, np.int64), (1000, np.float32), (7, np.uint8))]
    keys = [f"ptensor/{i}" for i in range(len(arrays))]
    assert reader.batch_put_tensor(keys, arrays) == [0] * len(arrays)
    calls = _count_native_calls(reader, monkeypatch, {"gs_get_packed", "gs_get_start", "gs_get_finish"})
    got = reader.batch_get_tensor([keys[0], "ptensor/missing", keys[1], keys[2]])
    assert got[1] is None
    for t, a in zip([got[0], got[2], got[3]], arrays):
        assert t.dtype == a.dtype and np.array_equal(t, a)
    assert calls == {"gs_get_packed": 1}
    assert got[0].base is not None and got[0].base is got[3].base
    big = np.arange(SCRATCH_BYTES // 8, dtype=np.int64)
    assert reader.put_tensor("ptensor/big", big) == 0
    got = reader.batch_get_tensor([keys[1], "ptensor/big"])
    assert np.array_equal(got[0], arrays[1]) and np.array_equal(got[1], big)
    assert calls == {"gs_get_packed": 2, "gs_get_finish": 1}
    assert not np.shares_memory(got[0], got[1])


# Run in a process of its own (malloc's settings are set once per process,
# and this test's heap must not be the test runner's): the two calls'
# results of a "cell" are freed together, as much as the process keeps, and
# the next calls count their page faults.
_CLIFF = r"""
import resource, sys
from gostore import MooncakeDistributedStore
master, keys = sys.argv[1], sys.argv[2].split(",")
s = MooncakeDistributedStore()
assert s.setup("127.0.0.1", "P2PHANDSHAKE", 0, 4 << 20, "tcp", "", master) == 0
s.get_batch(keys[:1])  # maps the peer's segment
faults = []
for cell in range(3):
    held = []
    for _ in range(3):
        before = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
        got = s.get_batch(keys)
        faults.append(resource.getrusage(resource.RUSAGE_SELF).ru_minflt - before)
        assert all(len(v) == len(got[0]) > 0 for v in got)
        held = held[-1:] + [got]
        del got
    del held  # the cell ends: two calls' results go at once
print(" ".join(map(str, faults)))
s.close()
"""


def test_freeing_as_much_as_is_kept_keeps_it(small_buffer_reader, tmp_path):
    """GOSTORE_HEAP_RETAIN_BYTES is what the process keeps, also when it
    frees that much at once. glibc trims its heap once the free top reaches
    the trim threshold, down to the top pad: with the threshold alone, two
    calls' results freed together (or results and the values written
    meanwhile: a workload that removes and writes new keys) gave back
    everything, and every later batch faulted its pages in again."""
    import subprocess
    import sys

    m, peer, _ = small_buffer_reader
    keys = [f"cliff/{i}" for i in range(N)]
    for i, k in enumerate(keys):
        assert peer.put_pattern(k, OBJ, 300 + i) == 0
    pages = N * OBJ // 4096
    env = dict(os.environ, GOSTORE_HEAP_RETAIN_BYTES=str(2 * N * OBJ))  # two calls' results
    script = tmp_path / "cliff.py"
    script.write_text(_CLIFF)
    out = subprocess.run([sys.executable, str(script), m.addr, ",".join(keys)], env=env, timeout=120,
                         stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    assert out.returncode == 0, out.stderr[-3000:]
    faults = [int(x) for x in out.stdout.split()]
    # The first cell grows the heap (three calls' results live at once);
    # after a cell freed two calls' results the next keeps them.
    later = faults[3:]
    assert max(later[0], later[1], later[3], later[4]) < pages // 10, \
        f"minor faults per call {faults}, batch of {pages} pages"
