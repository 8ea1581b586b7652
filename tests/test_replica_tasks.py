"""Replica tasks (PYTHON_API.md "Replica tasks"): ``create_copy_task`` adds
replicas on named segments, ``create_move_task`` moves one, ``query_task``
follows them; while a task runs on a key, ``remove`` and ``upsert`` of it
return -708. The client that creates a task carries it out in the background.
"""

from __future__ import annotations

import time

import pytest

from conftest import MiB, pattern, wait_until
from gostore import ErrorCode, QueryTaskResponse, ReplicateConfig, TaskStatus, TaskType

HAS_TASK = int(ErrorCode.OBJECT_HAS_REPLICATION_TASK)  # -708
NO_ID = (0, 0)  # the task id of a failed create call
ENDED = (TaskStatus.SUCCESS, TaskStatus.FAILED)


def wait_task(store, task_id, timeout: float = 15.0) -> QueryTaskResponse:
    """Poll query_task until the task has ended; fail after ``timeout``.
    ``task_id`` may be a list (as a peer's JSON answer carries it)."""
    deadline = time.monotonic() + timeout
    while True:
        info, rc = store.query_task(task_id)
        assert rc == 0 and info is not None, (task_id, rc)
        assert isinstance(info.status, TaskStatus), info
        assert info.id == tuple(task_id), info
        if info.status in ENDED:
            return info
        if time.monotonic() > deadline:
            pytest.fail(f"task {task_id} still {info.status} after {timeout}s")
        time.sleep(0.01)


def segments_of(master, key):
    info = master.query_key(key)
    assert info is not None, f"{key} missing"
    assert all(r["status"] == "COMPLETE" for r in info["replicas"]), info
    return sorted(r["segment"] for r in info["replicas"])


@pytest.fixture
def trio(master_factory, peer_factory, store_factory):
    """A master, peers a, b, c (32 MiB each) and this process' store (no
    segment: it only executes tasks and reads)."""
    m = master_factory()
    a, b, c = (peer_factory(m, segment="32MB") for _ in range(3))
    s = store_factory(m, segment=0)
    return m, a, b, c, s


def test_copy_task_adds_a_replica_that_outlives_the_original_holder(trio):
    m, a, b, c, s = trio
    key, size = "copy/k", 3 * MiB + 7
    assert a.put_pattern(key, size, 1, preferred_segment=a.hostname) == 0
    assert segments_of(m, key) == [a.hostname]
    task_id, rc = s.create_copy_task(key, [b.hostname])
    assert rc == 0 and isinstance(task_id, tuple) and task_id != NO_ID, (task_id, rc)
    hi, lo = task_id
    assert hi == 0 and lo > 0  # gostore's ids: (0, n)
    info = wait_task(s, task_id)
    assert (info.id, info.key, info.type, info.status, info.message) == (
        task_id, key, TaskType.REPLICA_COPY, TaskStatus.SUCCESS, "")
    # not reported by gostore's master yet
    assert (info.created_at_ms_epoch, info.last_updated_at_ms_epoch, info.assigned_client) == (
        0, 0, (0, 0))
    assert segments_of(m, key) == sorted([a.hostname, b.hostname])
    # the original holder leaves: the copy on b still serves the bytes
    assert a.close() == 0
    wait_until(lambda: a.hostname not in m.segment_names(), timeout=10,
               what="a's segment to be unmounted")
    assert segments_of(m, key) == [b.hostname]
    assert s.get(key) == pattern(1, size)
    assert c.check_pattern(key, size, 1)
    # a finished task stays queryable
    again, rc = s.query_task(task_id)
    assert rc == 0 and again.status == TaskStatus.SUCCESS


def test_copy_task_to_two_segments_and_queried_from_another_client(trio):
    m, a, b, c, s = trio
    # a long key: query_task's answer outgrows its first buffer
    key, size = "copy2/" + "k" * 3000, MiB
    assert s.put(key, pattern(2, size), ReplicateConfig(preferred_segment=a.hostname)) == 0
    task_id, rc = s.create_copy_task(key, [b.hostname, c.hostname])
    assert rc == 0
    info = wait_task(s, task_id)
    assert (info.status, info.type, info.key) == (TaskStatus.SUCCESS, TaskType.REPLICA_COPY, key), info
    assert segments_of(m, key) == sorted([a.hostname, b.hostname, c.hostname])
    # every peer reads its own replica first: each holds the bytes
    for p in (a, b, c):
        assert p.check_pattern(key, size, 2), p
    # any client can follow a task
    ans = b.call("query_task", id=task_id)
    assert (ans["rc"], ans["status"]) == (0, "SUCCESS")


def test_move_task_leaves_the_replica_only_on_the_target(trio):
    m, a, b, c, s = trio
    key, size = "move/k", 2 * MiB + 1
    assert s.put(key, pattern(3, size), ReplicateConfig(preferred_segment=a.hostname)) == 0
    task_id, rc = s.create_move_task(key, a.hostname, b.hostname)
    assert rc == 0 and task_id != NO_ID
    info = wait_task(s, task_id)
    assert (info.status, info.type, info.message) == (TaskStatus.SUCCESS, TaskType.REPLICA_MOVE, ""), info
    assert segments_of(m, key) == [b.hostname]
    assert s.get(key) == pattern(3, size)
    assert a.close() == 0  # the old holder leaving changes nothing now
    wait_until(lambda: a.hostname not in m.segment_names(), timeout=10,
               what="a's segment to be unmounted")
    assert c.check_pattern(key, size, 3)
    # a task executed by a peer, moving the replica back to another segment
    ans = c.call("move_task", key=key, source=b.hostname, target=c.hostname)
    assert ans["rc"] == 0 and ans["id"]
    assert wait_task(s, ans["id"]).status == TaskStatus.SUCCESS
    assert segments_of(m, key) == [c.hostname]
    assert b.check_pattern(key, size, 3)


def test_remove_upsert_and_a_second_task_get_708_while_a_task_runs(master_factory, peer_factory,
                                                                   store_factory):
    """The task's executor x reaches the source replica on peer a over TCP;
    a is stopped (SIGSTOP), so the task cannot finish until a resumes: the
    window is deterministic."""
    m = master_factory()
    a = peer_factory(m, segment="32MB")
    b = peer_factory(m, segment="32MB")
    x = peer_factory(m, segment="0", transport="tcp")
    s = store_factory(m, segment=0)
    key, size = "busy/k", 4 * MiB
    assert a.put_pattern(key, size, 4, preferred_segment=a.hostname) == 0
    assert segments_of(m, key) == [a.hostname]
    with a.suspended():
        ans = x.call("copy_task", key=key, targets=[b.hostname])
        assert ans["rc"] == 0, ans
        task_id = ans["id"]
        info, rc = s.query_task(task_id)
        assert rc == 0 and info.status == TaskStatus.PROCESSING, info
        assert s.remove(key) == HAS_TASK
        assert s.remove(key, force=True) == HAS_TASK
        assert s.upsert(key, pattern(5, size)) == HAS_TASK  # same size
        assert s.upsert(key, b"smaller") == HAS_TASK  # other size
        assert s.upsert_batch([key], [b"x"]) == HAS_TASK
        assert s.create_copy_task(key, [b.hostname]) == (NO_ID, HAS_TASK)
        assert s.create_move_task(key, a.hostname, b.hostname) == (NO_ID, HAS_TASK)
        assert s.put(key, b"put keeps it") == 0  # a put never overwrites
        info, rc = s.query_task(task_id)
        assert rc == 0 and info.status == TaskStatus.PROCESSING, info
    info = wait_task(s, task_id)
    assert info.status == TaskStatus.SUCCESS, info
    assert segments_of(m, key) == sorted([a.hostname, b.hostname])
    assert s.get(key) == pattern(4, size)
    # the task is over: upsert and remove work again
    assert s.upsert(key, pattern(6, size)) == 0
    assert a.check_pattern(key, size, 6) and b.check_pattern(key, size, 6)
    assert s.remove(key, force=True) == 0
    assert m.query_key(key) is None


def test_task_of_an_executor_that_dies_fails_and_frees_its_targets(master_factory, peer_factory,
                                                                    store_factory):
    """Executor x (TCP) is blocked writing to peer b (SIGSTOP) and is then
    SIGKILLed: once the master expires x, the task is FAILED, the space
    reserved on b is free again and the key is no longer locked."""
    m = master_factory(client_ttl=1)
    a = peer_factory(m, segment="32MB")
    b = peer_factory(m, segment="32MB")
    x = peer_factory(m, segment="0", transport="tcp")
    s = store_factory(m, segment=0)
    key, size = "orphan/k", 4 * MiB
    assert a.put_pattern(key, size, 7, preferred_segment=a.hostname) == 0
    used = {seg["Name"]: seg["Used"] for seg in m.segments()}
    assert used[b.hostname] == 0
    with b.suspended():
        ans = x.call("copy_task", key=key, targets=[b.hostname])
        assert ans["rc"] == 0, ans
        task_id = ans["id"]
        assert s.remove(key, force=True) == HAS_TASK
        used = {seg["Name"]: seg["Used"] for seg in m.segments()}
        assert used[b.hostname] >= size  # reserved for the task
        x.kill()
    info = wait_task(s, task_id, timeout=15)
    assert info.status == TaskStatus.FAILED and info.message, info
    assert (info.key, info.type) == (key, TaskType.REPLICA_COPY)
    assert segments_of(m, key) == [a.hostname]
    wait_until(lambda: {g["Name"]: g["Used"] for g in m.segments()}.get(b.hostname) == 0,
               timeout=5, what="the failed task's target range on b to be freed")
    assert s.get(key) == pattern(7, size)
    assert b.alive() and b.health_check() == 0
    task2, rc = s.create_copy_task(key, [b.hostname])  # the key is not locked any more
    assert rc == 0
    assert wait_task(s, task2).status == TaskStatus.SUCCESS
    assert b.check_pattern(key, size, 7)


def test_a_copy_onto_a_holder_succeeds_and_changes_nothing(trio):
    """As in Mooncake: a copy to a segment that holds the key already is a
    task that succeeds and leaves the replicas as they were; a move onto
    one only drops the source."""
    m, a, b, c, s = trio
    key = "holder/k"
    assert s.put(key, b"h" * 3000, ReplicateConfig(replica_num=2, preferred_segments=[a.hostname, b.hostname])) == 0
    holders = sorted(r.get_memory_descriptor().buffer_descriptor.transport_endpoint for r in s.get_replica_desc(key))
    assert holders == sorted([a.hostname, b.hostname])
    task, rc = s.create_copy_task(key, [b.hostname])
    assert rc == 0 and wait_task(s, task).status == TaskStatus.SUCCESS
    assert sorted(r.get_memory_descriptor().buffer_descriptor.transport_endpoint
                  for r in s.get_replica_desc(key)) == holders
    task, rc = s.create_move_task(key, a.hostname, b.hostname)
    assert rc == 0 and wait_task(s, task).status == TaskStatus.SUCCESS
    assert [r.get_memory_descriptor().buffer_descriptor.transport_endpoint
            for r in s.get_replica_desc(key)] == [b.hostname]
    assert s.get(key) == b"h" * 3000


def test_task_errors(trio):
    m, a, b, c, s = trio
    key = "bad/k"
    assert s.put(key, b"v" * 1000, ReplicateConfig(preferred_segment=a.hostname)) == 0
    # unknown segments are bad parameters, as Mooncake answers them
    assert s.create_copy_task(key, ["127.0.0.1:1"]) == (NO_ID, int(ErrorCode.INVALID_PARAMS))
    assert s.create_copy_task(key, [b.hostname, "nowhere:9"]) == (NO_ID, -600)
    assert s.create_move_task(key, "nowhere:9", b.hostname) == (NO_ID, -600)
    assert s.create_move_task(key, a.hostname, "nowhere:9") == (NO_ID, -600)
    # missing key (before anything about the segments)
    assert s.create_copy_task("bad/missing", [b.hostname]) == (NO_ID, int(ErrorCode.OBJECT_NOT_FOUND))
    assert s.create_move_task("bad/missing", a.hostname, b.hostname) == (NO_ID, -704)
    assert s.create_copy_task("bad/missing", ["nowhere:9"]) == (NO_ID, -704)
    # no replica on the source (-600, as Mooncake)
    assert s.create_move_task(key, b.hostname, c.hostname) == (NO_ID, int(ErrorCode.INVALID_PARAMS))
    # values that cannot be valid
    assert s.create_copy_task("", [b.hostname]) == (NO_ID, -600)
    assert s.create_copy_task(key, []) == (NO_ID, -600)
    assert s.create_copy_task(key, [""]) == (NO_ID, -600)
    assert s.create_copy_task(key, [b.hostname + "\n" + c.hostname]) == (NO_ID, -600)
    assert s.create_move_task(key, a.hostname, a.hostname) == (NO_ID, -600)
    assert s.create_move_task(key, "", b.hostname) == (NO_ID, -600)
    # unknown task ids
    assert s.query_task((0, 999999)) == (None, int(ErrorCode.OBJECT_NO_REPLICATION_TASK))
    assert s.query_task((0, 0)) == (None, -709)
    assert s.query_task([0, 999999]) == (None, -709)
    assert s.query_task((1, 1)) == (None, -709)  # a high half no gostore id has
    # none of this changed the object
    assert segments_of(m, key) == [a.hostname]
    assert s.get(key) == b"v" * 1000


@pytest.mark.parametrize("call", [
    lambda s: s.create_copy_task(1, ["seg"]),
    lambda s: s.create_copy_task(b"k", ["seg"]),
    lambda s: s.create_copy_task("k", "seg"),
    lambda s: s.create_copy_task("k", None),
    lambda s: s.create_copy_task("k", [1]),
    lambda s: s.create_copy_task("k", [b"seg"]),
    lambda s: s.create_move_task(1, "a", "b"),
    lambda s: s.create_move_task("k", None, "b"),
    lambda s: s.create_move_task("k", "a", b"b"),
    lambda s: s.query_task(1),
    lambda s: s.query_task(None),
    lambda s: s.query_task(b"1"),
    lambda s: s.query_task("1"),
    lambda s: s.query_task((1,)),
    lambda s: s.query_task((0, -1)),
    lambda s: s.query_task((0, 2**64)),
    lambda s: s.query_task((0, 1.0)),
], ids=["copy key int", "copy key bytes", "copy targets str", "copy targets None",
        "copy target int", "copy target bytes", "move key int", "move source None",
        "move target bytes", "query int", "query None", "query bytes", "query str",
        "query one int", "query negative", "query too big", "query float"])
def test_task_wrong_types_raise_type_error(cluster, call):
    with pytest.raises(TypeError):
        call(cluster.store)


def test_query_task_response_is_read_only():
    r = QueryTaskResponse()
    assert (r.id, r.type, r.status, r.message) == ((0, 0), TaskType.REPLICA_COPY, TaskStatus.PENDING, "")
    with pytest.raises(AttributeError):
        r.status = TaskStatus.FAILED  # type: ignore[misc]
