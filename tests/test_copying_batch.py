"""Copying batch reads whatever the local buffer's size, and what they cost
in fresh pages.

Mooncake's copying reads stage through ``local_buffer_size`` bytes and stop
returning objects once a batch outgrows it; gostore's read into the objects
they return (``get_batch``, the tensor reads) or lend memory beyond the
buffer (``batch_get_buffer``), so a batch of any total size comes back
whole. The objects a copying read returns are allocated by Python's
malloc: the store keeps freed ones mapped for the next read
(``gostore._heap``), as the client keeps the mappings it lent beyond the
local buffer, so a repeated batch does not fault in fresh pages.
"""

from __future__ import annotations

import resource

import numpy as np
import pytest

from conftest import MiB, pattern

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
