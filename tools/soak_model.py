"""soak_model.py: the pure part of the chaos soak (tools/soak.py): the fault
schedule, the judge of every read against the writers' history, and the
RSS growth test. No processes, sockets or clock: soak.py feeds it what the
processes logged, and tests/unit/test_soak_model.py feeds it tables.

Times are ``time.monotonic()`` seconds; CLOCK_MONOTONIC is one clock for
every process of the machine, so the records of writers, readers and the
orchestrator compare directly.

What a read may return
----------------------
Each key has one writer, which runs one operation at a time, so a key's
operations form a sequence. For a read over ``[r0, r1]`` the set S of
states it may see is built from that sequence:

* start with ``{ABSENT}``; for every operation that ended before ``r0``,
  in order: a successful write of version v makes S ``{v}``; a successful
  remove (0, or -704: already gone) makes it ``{ABSENT}``; a failed write
  of v adds v and ABSENT (it may have landed, or have destroyed the old
  value); a failed remove adds ABSENT;
* every operation that overlaps ``[r0, r1]`` adds its version (or ABSENT
  for a remove) and ABSENT.

A read that returns bytes must return a version in S, every byte equal to
what its writer wrote (the reader checks the bytes; this module checks the
version). A version not in S is *stale* (older than what S allows: an
overwritten value came back) or *phantom* (never written).

A miss (-704) is *expected* when ABSENT is in S, and *lost* when some
version v in S can have been lost by ``r1``: every segment that held v
(the master's ``/query_key`` right after the write was acknowledged)
had a loss event (its client killed, stopped beyond ``client_ttl``, or
dropped by the master) between the start of v's write and ``r1``, or the
master evicted objects in that span. A miss that is neither is
*unexplained*: an acknowledged object vanished. Other negative codes are
*errors* (the master restarting, a holder stopped); they are counted, and
judged by the stuck-key rules below.

Stuck keys
----------
A key is stuck when, during the load, its writes failed, or its reads
erred, without a success in between, more than ``min_attempts`` times over
more than ``stuck_after`` seconds; or when, in the final phase (faults
over, every process back), its writer could not upsert a fresh version,
read it back exactly and remove it within the final bound.
"""

from __future__ import annotations

import random
from dataclasses import dataclass, field
from typing import Dict, Iterable, List, Optional, Sequence, Set, Tuple

ABSENT = -1  # the "no object" state in a set of versions
NOT_FOUND = -704

# ---------------------------------------------------------------------------
# the fault schedule


@dataclass(frozen=True)
class Action:
    """One step of the schedule, at ``t`` seconds after the load starts.

    ``kind``: ``kill`` (SIGKILL storage client ``target``), ``restart``
    (start it again; ``same_name``: on the same host:port), ``stop``
    (SIGSTOP; ``long``: past client_ttl), ``cont`` (SIGCONT),
    ``kill_master``, ``restart_master`` (same port, same state directory).
    """

    t: float
    kind: str
    target: int = -1
    same_name: bool = False
    long: bool = False


def fault_schedule(seed: int, start: float, end: float, storage: int, client_ttl: float,
                   client_gap: Tuple[float, float] = (2.0, 6.0),
                   master_gap: Tuple[float, float] = (20.0, 40.0),
                   min_healthy: int = 2, same_port: float = 0.5) -> List[Action]:
    """The schedule a seed gives, sorted by time: storage-client faults at
    random gaps of ``client_gap`` seconds, master kills at gaps of
    ``master_gap`` in the first two thirds (so that one master's memory
    can be followed through the last), each fault's recovery before
    ``end``, and never fewer
    than ``min_healthy`` storage clients outside a fault (a client counts
    as in a fault until 2 s after its recovery). A killed client starts
    again on its old host:port with probability ``same_port`` (the draw is
    made whatever it is, so the rest of the schedule does not change)."""
    rng = random.Random(seed)
    actions: List[Action] = []
    busy_until = [0.0] * storage
    t = start + rng.uniform(*client_gap)
    while t < end:
        free = [i for i in range(storage) if busy_until[i] <= t]
        if len(free) > min_healthy:
            i = rng.choice(free)
            x = rng.random()
            if x < 0.4:
                d = rng.uniform(0.2, 3.0)
                if t + d < end - 1:
                    actions += [Action(t, "kill", i), Action(t + d, "restart", i, same_name=rng.random() < same_port)]
                    busy_until[i] = t + d + 2
            else:
                long = x >= 0.8
                d = client_ttl + rng.uniform(1.0, 2.0) if long else rng.uniform(0.2, min(1.5, client_ttl / 2))
                if t + d < end - 1:
                    actions += [Action(t, "stop", i, long=long), Action(t + d, "cont", i, long=long)]
                    busy_until[i] = t + d + 2
        t += rng.uniform(*client_gap)
    mrng = random.Random(seed ^ 0x6D617374)  # master faults have their own stream
    t = start + mrng.uniform(*master_gap)
    while t < start + (end - start) * 2 / 3:  # the last master lives through the last third
        d = mrng.uniform(0.1, 1.5)
        if t + d < end - 2:
            actions += [Action(t, "kill_master"), Action(t + d, "restart_master")]
        t += mrng.uniform(*master_gap)
    return sorted(actions, key=lambda a: a.t)


# ---------------------------------------------------------------------------
# the history


@dataclass
class Op:
    """One operation of a key's writer: a write of ``version`` (``remove``
    false) or a remove; ``segs``: the segments holding the acknowledged
    version (None: not known)."""

    t0: float
    t1: float
    ok: bool
    version: int = ABSENT
    remove: bool = False
    segs: Optional[List[str]] = None


@dataclass
class Read:
    """One read of a key: ``rc`` is the byte count or a negative code;
    ``version`` the version the bytes named (None on a miss or error)."""

    key: str
    t0: float
    t1: float
    rc: int
    version: Optional[int] = None


@dataclass
class Verdict:
    kind: str  # ok, expected_miss, lost_miss, evicted_miss, unexplained_miss, stale, phantom, error
    # (soak.py adds corrupt: bytes that are not all of one version of the key)
    detail: str = ""


@dataclass
class Losses:
    """Where and when objects may have been lost, as spans ``(lo, hi)``
    within which the loss happened: per segment name its client's kill or
    long stop (``lo == hi``) and the master dropping it (after the last
    poll that listed it, by the first that did not); and eviction passes
    (between two polls of the master's evicted-object counter)."""

    by_segment: Dict[str, List[Tuple[float, float]]] = field(default_factory=dict)
    evictions: List[Tuple[float, float]] = field(default_factory=list)

    def add(self, segment: str, lo: float, hi: Optional[float] = None) -> None:
        self.by_segment.setdefault(segment, []).append((lo, lo if hi is None else hi))

    def add_eviction(self, lo: float, hi: float) -> None:
        self.evictions.append((lo, hi))

    @staticmethod
    def _within(spans: Iterable[Tuple[float, float]], t0: float, t1: float) -> bool:
        return any(lo <= t1 and hi >= t0 for lo, hi in spans)

    def segment_lost(self, seg: str, t0: float, t1: float) -> bool:
        return self._within(self.by_segment.get(seg, ()), t0, t1)

    def any_segment_lost(self, t0: float, t1: float) -> bool:
        return any(self._within(spans, t0, t1) for spans in self.by_segment.values())

    def evicted(self, t0: float, t1: float) -> bool:
        return self._within(self.evictions, t0, t1)


def possible_states(ops: Sequence[Op], r0: float, r1: float) -> Set[int]:
    """The set S of the module's doc: ``ops`` in order, one at a time."""
    s: Set[int] = {ABSENT}
    for op in ops:
        if op.t0 > r1:
            break
        state = ABSENT if op.remove else op.version
        if op.t1 < r0:
            if op.ok:
                s = {state}
            else:
                s |= {state, ABSENT}
        else:
            s |= {state, ABSENT}
    return s


def judge(read: Read, ops: Sequence[Op], losses: Losses) -> Verdict:
    """The verdict on one read (see the module's doc)."""
    s = possible_states(ops, read.t0, read.t1)
    if read.rc > 0:
        if read.version in s:
            return Verdict("ok")
        written = {op.version for op in ops if not op.remove}
        allowed = sorted(v for v in s if v != ABSENT)
        kind = "stale" if read.version in written else "phantom"
        return Verdict(kind, f"read v{read.version}, allowed {allowed or ['absent']}")
    if read.rc != NOT_FOUND:
        return Verdict("error", str(read.rc))
    if ABSENT in s:
        return Verdict("expected_miss")
    by_version = {op.version: op for op in ops if not op.remove}
    evicted = False
    for v in s:
        op = by_version[v]
        if op.segs:
            if all(losses.segment_lost(seg, op.t0, read.t1) for seg in op.segs):
                return Verdict("lost_miss", f"v{v} on {op.segs}")
        elif losses.any_segment_lost(op.t0, read.t1):
            return Verdict("lost_miss", f"v{v} (segments unknown)")
        evicted = evicted or losses.evicted(op.t0, read.t1)
    if evicted:
        return Verdict("evicted_miss")
    return Verdict("unexplained_miss", f"acknowledged {sorted(s)}, no loss of its segments or eviction since")


def failure_streaks(events: Iterable[Tuple[float, bool]], stuck_after: float,
                    min_attempts: int = 3) -> List[Tuple[float, float, int]]:
    """Runs of failures (``(t, ok)`` sorted by t) longer than ``stuck_after``
    seconds and ``min_attempts`` attempts, as ``(first, last, attempts)``;
    a run still open at the end counts too."""
    out: List[Tuple[float, float, int]] = []
    first: Optional[float] = None
    last, n = 0.0, 0
    for t, ok in events:
        if ok:
            if first is not None and n >= min_attempts and last - first > stuck_after:
                out.append((first, last, n))
            first, n = None, 0
            continue
        if first is None:
            first = t
        last, n = t, n + 1
    if first is not None and n >= min_attempts and last - first > stuck_after:
        out.append((first, last, n))
    return out


# ---------------------------------------------------------------------------
# RSS


def rss_growth(samples: Sequence[Tuple[float, int]], lo: float, hi: float,
               min_span: float) -> Optional[Tuple[int, int]]:
    """``(base, last)``: the medians of the samples in the first fifth and
    in the last fifth of ``[lo, hi]`` (bytes); None when the span is
    shorter than ``min_span`` or either fifth has fewer than 2 samples."""
    if hi - lo < min_span:
        return None
    fifth = (hi - lo) / 5
    head = sorted(v for t, v in samples if lo <= t <= lo + fifth)
    tail = sorted(v for t, v in samples if hi - fifth <= t <= hi)
    if len(head) < 2 or len(tail) < 2:
        return None
    return head[len(head) // 2], tail[len(tail) // 2]
