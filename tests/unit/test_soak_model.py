"""The chaos soak's judge (tools/soak_model.py) on tables: which reads a
key's history allows, which misses a loss explains, the fault schedule's
invariants, failure streaks and RSS growth. No processes."""

import os
import sys

import pytest

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "..", "tools"))
import soak_model as m  # noqa: E402

A = m.ABSENT


def w(t0, t1, v, ok=True, segs=("s1",)):
    return m.Op(t0, t1, ok, v, segs=list(segs) if segs is not None else None)


def rm(t0, t1, ok=True):
    return m.Op(t0, t1, ok, remove=True)


HISTORY = [w(1, 2, 1), w(3, 4, 2), w(5, 6, 3, ok=False), rm(7, 8), w(9, 10, 4)]


@pytest.mark.parametrize("r0,r1,want", [
    (0.0, 0.5, {A}),              # before anything
    (1.5, 1.6, {A, 1}),           # during the first write
    (2.5, 2.6, {1}),              # after it
    (4.5, 4.6, {2}),
    (6.5, 6.6, {2, 3, A}),        # a failed write: it may have landed, or destroyed the old value
    (7.5, 7.6, {2, 3, A}),        # during the remove
    (8.5, 8.6, {A}),              # removed
    (8.5, 9.5, {A, 4}),           # overlapping the next write
    (11, 12, {4}),
])
def test_possible_states(r0, r1, want):
    assert m.possible_states(HISTORY, r0, r1) == want


def read(t0, t1, rc, v=None):
    return m.Read("k", t0, t1, rc, v)


@pytest.mark.parametrize("r,want", [
    (read(4.5, 4.6, 100, 2), "ok"),
    (read(4.5, 4.6, 100, 1), "stale"),        # overwritten before the read began
    (read(4.5, 4.6, 100, 9), "phantom"),      # never written
    (read(3.5, 4.6, 100, 1), "ok"),           # the overwrite overlapped the read
    (read(0.1, 0.2, -704), "expected_miss"),
    (read(8.5, 8.6, -704), "expected_miss"),
    (read(6.5, 6.6, -704), "expected_miss"),  # after a failed write
    (read(4.5, 4.6, -704), "unexplained_miss"),
    (read(4.5, 4.6, -900), "error"),
])
def test_judge_without_losses(r, want):
    assert m.judge(r, HISTORY, m.Losses()).kind == want


def test_a_miss_needs_every_replica_lost():
    ops = [w(1, 2, 1, segs=("a", "b"))]
    losses = m.Losses()
    losses.add("a", 3.0)
    assert m.judge(read(5, 6, -704), ops, losses).kind == "unexplained_miss"
    losses.add("b", 4.0, 4.2)  # a drop seen between two polls
    assert m.judge(read(5, 6, -704), ops, losses).kind == "lost_miss"
    # a loss after the read, or before the write began, explains nothing
    assert m.judge(read(3.5, 3.6, -704), ops, losses).kind == "unexplained_miss"
    early = m.Losses()
    early.add("a", 0.5)
    early.add("b", 0.5)
    assert m.judge(read(5, 6, -704), ops, early).kind == "unexplained_miss"


def test_unknown_segments_and_eviction():
    ops = [w(1, 2, 1, segs=None)]
    losses = m.Losses()
    losses.add("elsewhere", 3.0)
    assert m.judge(read(5, 6, -704), ops, losses).kind == "lost_miss"
    ev = m.Losses()
    ev.add_eviction(0.0, 1.5)  # the span of the pass overlaps the write
    assert m.judge(read(5, 6, -704), [w(1, 2, 1)], ev).kind == "evicted_miss"
    late = m.Losses()
    late.add_eviction(7.0, 8.0)
    assert m.judge(read(5, 6, -704), [w(1, 2, 1)], late).kind == "unexplained_miss"


def test_schedule_is_seeded_and_keeps_its_invariants():
    a = m.fault_schedule(7, 5.0, 600.0, storage=4, client_ttl=3)
    assert a == m.fault_schedule(7, 5.0, 600.0, storage=4, client_ttl=3)
    assert a != m.fault_schedule(8, 5.0, 600.0, storage=4, client_ttl=3)
    kinds = {x.kind for x in a}
    assert kinds == {"kill", "restart", "stop", "cont", "kill_master", "restart_master"}
    assert all(x.t < 600 - 1 for x in a)
    assert all(x.t < 5 + 595 * 2 / 3 + 1.5 for x in a if x.kind.endswith("master"))
    down = set()
    for x in a:  # never more than storage - min_healthy clients in a fault at once
        if x.kind in ("kill", "stop"):
            assert x.target not in down
            down.add(x.target)
            assert len(down) <= 2
        elif x.kind in ("restart", "cont"):
            down.discard(x.target)
    for x in a:  # a long stop outlasts client_ttl, a short one stays under half of it
        if x.kind == "stop":
            cont = next(y for y in a if y.kind == "cont" and y.target == x.target and y.t > x.t)
            assert (cont.t - x.t > 3) if x.long else (cont.t - x.t <= 1.5)


def test_same_port_share_changes_only_that_flag():
    a = m.fault_schedule(3, 5.0, 300.0, storage=4, client_ttl=3, same_port=0.0)
    b = m.fault_schedule(3, 5.0, 300.0, storage=4, client_ttl=3, same_port=1.0)
    assert [(x.t, x.kind, x.target) for x in a] == [(x.t, x.kind, x.target) for x in b]
    assert not any(x.same_name for x in a) and all(x.same_name for x in b if x.kind == "restart")


def test_failure_streaks():
    ev = [(0, True), (1, False), (20, False), (40, False), (41, True), (50, False), (90, False)]
    assert m.failure_streaks(ev, 30) == [(1, 40, 3)]
    assert m.failure_streaks(ev, 30, min_attempts=2) == [(1, 40, 3), (50, 90, 2)]


def test_rss_growth():
    flat = [(float(t), 100) for t in range(0, 101)]
    assert m.rss_growth(flat, 0, 100, 30) == (100, 100)
    rising = [(float(t), 100 + t) for t in range(0, 101)]
    base, last = m.rss_growth(rising, 0, 100, 30)
    assert (base, last) == (110, 190)
    assert m.rss_growth(flat, 0, 20, 30) is None
