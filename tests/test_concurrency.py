"""One store used from many Python threads at once."""

from __future__ import annotations

import threading

import numpy as np

from conftest import MiB, pattern

THREADS = 8
ITERS = 100
SIZE = MiB


def _run_threads(fn, n):
    errors = []

    def wrap(t):
        try:
            fn(t)
        except BaseException as e:  # collect, re-raise in the main thread
            errors.append((t, e))

    threads = [threading.Thread(target=wrap, args=(t,)) for t in range(n)]
    for th in threads:
        th.start()
    for th in threads:
        th.join(timeout=150)
    assert not any(th.is_alive() for th in threads), "a worker thread hung"
    if errors:
        t, e = errors[0]
        raise AssertionError(f"thread {t} failed ({len(errors)} threads failed): {e!r}") from e


def test_8_threads_put_get_1mib_every_byte_verified(cluster, uniq):
    s = cluster.store
    counts = [0] * THREADS

    def worker(t):
        # One random base per thread; iteration i uses the window starting at
        # 8*i: every value differs from every other, at no generation cost.
        base = pattern(1000 + t, SIZE + 8 * ITERS)
        for i in range(ITERS):
            key = f"{uniq}{t}/{i}"
            value = base[8 * i:8 * i + SIZE]
            rc = s.put(key, value)
            assert rc == 0, f"put {key} -> {rc}"
            got = s.get(key)
            assert len(got) == SIZE, f"get {key} -> {len(got)} bytes"
            assert got == value, f"get {key}: wrong bytes"
            # keep the pool from filling up (the get leased it: force)
            assert s.remove(key, force=True) == 0
            counts[t] += 1

    _run_threads(worker, THREADS)
    assert counts == [ITERS] * THREADS


def test_threads_mixing_copying_and_zero_copy_calls(cluster, uniq):
    s = cluster.store
    n_threads, iters, size = 4, 25, 256 * 1024
    src = np.frombuffer(pattern(5, size * n_threads + 64 * iters), dtype=np.uint8).copy()
    dst = np.zeros(size * n_threads, dtype=np.uint8)
    assert s.register_buffer(src.ctypes.data, src.nbytes) == 0
    assert s.register_buffer(dst.ctypes.data, dst.nbytes) == 0
    try:
        def worker(t):
            for i in range(iters):
                off = t * size + 64 * i
                want = src[off:off + size].tobytes()
                k1, k2 = f"{uniq}{t}/{i}/zc", f"{uniq}{t}/{i}/copy"
                assert s.put_from(k1, src.ctypes.data + off, size) == 0
                assert s.put(k2, want) == 0
                assert s.get(k1) == want
                slot = dst[t * size:(t + 1) * size]
                assert s.get_into(k2, slot.ctypes.data, size) == size
                assert slot.tobytes() == want
                assert s.batch_is_exist([k1, k2]) == [1, 1]
                assert s.batch_remove([k1, k2], force=True) == [0, 0]

        _run_threads(worker, n_threads)
    finally:
        s.unregister_buffer(src.ctypes.data)
        s.unregister_buffer(dst.ctypes.data)
