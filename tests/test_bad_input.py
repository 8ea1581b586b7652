"""Wrong argument types raise TypeError, for every method family, on a
connected store; nothing is stored by a call that raised, and the store keeps
working afterwards."""

from __future__ import annotations

import ctypes

import pytest

from gostore import ErrorCode, MooncakeDistributedStore, ReplicateConfig

BUF = (ctypes.c_ubyte * 4096)()
PTR = ctypes.addressof(BUF)


def _cases(k):
    """(label, callable) pairs that must raise TypeError; ``k`` is a fresh key."""
    return [
        # copying API
        ("put key int", lambda s: s.put(123, b"x")),
        ("put key bytes", lambda s: s.put(k.encode(), b"x")),
        ("put value str", lambda s: s.put(k, "a string")),
        ("put value int", lambda s: s.put(k, 5)),
        ("put value None", lambda s: s.put(k, None)),
        ("put config dict", lambda s: s.put(k, b"x", {"replica_num": 1})),
        ("put config int", lambda s: s.put(k, b"x", config=2)),
        ("put config field str", lambda s: s.put(k, b"x", ReplicateConfig(replica_num="2"))),
        ("put config segment int", lambda s: s.put(k, b"x", ReplicateConfig(preferred_segment=5))),
        ("put config segments str", lambda s: s.put(k, b"x", ReplicateConfig(preferred_segments="a"))),
        ("put_parts key int", lambda s: s.put_parts(1, b"a")),
        ("put_parts part str", lambda s: s.put_parts(k, b"a", "b")),
        ("put_parts config", lambda s: s.put_parts(k, b"a", config="cfg")),
        ("put_batch keys str", lambda s: s.put_batch(k, [b"x"])),
        ("put_batch values bytes", lambda s: s.put_batch([k], b"x")),
        ("put_batch key int", lambda s: s.put_batch([1], [b"x"])),
        ("put_batch value str", lambda s: s.put_batch([k], ["x"])),
        ("put_batch config", lambda s: s.put_batch([k], [b"x"], config=object())),
        # upsert: the put family's rules
        ("upsert key int", lambda s: s.upsert(123, b"x")),
        ("upsert key bytes", lambda s: s.upsert(k.encode(), b"x")),
        ("upsert value str", lambda s: s.upsert(k, "a string")),
        ("upsert value None", lambda s: s.upsert(k, None)),
        ("upsert config dict", lambda s: s.upsert(k, b"x", {"with_hard_pin": True})),
        ("upsert config field str", lambda s: s.upsert(k, b"x", ReplicateConfig(replica_num="1"))),
        ("upsert_parts key int", lambda s: s.upsert_parts(1, b"a")),
        ("upsert_parts part str", lambda s: s.upsert_parts(k, b"a", "b")),
        ("upsert_parts config", lambda s: s.upsert_parts(k, b"a", config=1)),
        ("upsert_batch keys str", lambda s: s.upsert_batch(k, [b"x"])),
        ("upsert_batch values bytes", lambda s: s.upsert_batch([k], b"x")),
        ("upsert_batch value int", lambda s: s.upsert_batch([k], [1])),
        ("upsert_batch config", lambda s: s.upsert_batch([k], [b"x"], config="c")),
        ("upsert_from key int", lambda s: s.upsert_from(1, PTR, 10)),
        ("upsert_from ptr str", lambda s: s.upsert_from(k, "ptr", 10)),
        ("upsert_from size float", lambda s: s.upsert_from(k, PTR, 10.0)),
        ("upsert_from config", lambda s: s.upsert_from(k, PTR, 10, config=[])),
        ("batch_upsert_from keys str", lambda s: s.batch_upsert_from(k, [PTR], [10])),
        ("batch_upsert_from ptrs int", lambda s: s.batch_upsert_from([k], PTR, [10])),
        ("batch_upsert_from size str", lambda s: s.batch_upsert_from([k], [PTR], ["10"])),
        ("batch_upsert_from config", lambda s: s.batch_upsert_from([k], [PTR], [10], config=2)),
        ("get key int", lambda s: s.get(1)),
        ("get key None", lambda s: s.get(None)),
        ("get_batch str", lambda s: s.get_batch(k)),
        ("get_batch key int", lambda s: s.get_batch([k, 2])),
        ("get_buffer key int", lambda s: s.get_buffer(1)),
        ("batch_get_buffer str", lambda s: s.batch_get_buffer(k)),
        ("batch_get_buffer key bytes", lambda s: s.batch_get_buffer([b"k"])),
        # existence / removal
        ("is_exist key int", lambda s: s.is_exist(1)),
        ("batch_is_exist str", lambda s: s.batch_is_exist(k)),
        ("batch_is_exist key int", lambda s: s.batch_is_exist([1])),
        ("get_size key None", lambda s: s.get_size(None)),
        ("remove key int", lambda s: s.remove(1)),
        ("remove force str", lambda s: s.remove(k, force="yes")),
        ("remove_by_regex int", lambda s: s.remove_by_regex(5)),
        ("remove_by_regex force", lambda s: s.remove_by_regex(k, force=[])),
        ("remove_all force str", lambda s: s.remove_all(force="true")),
        ("batch_remove str", lambda s: s.batch_remove(k)),
        ("batch_remove key int", lambda s: s.batch_remove([1])),
        # zero-copy
        ("register ptr str", lambda s: s.register_buffer(str(PTR), 10)),
        ("register size float", lambda s: s.register_buffer(PTR, 10.0)),
        ("unregister ptr str", lambda s: s.unregister_buffer("0x1")),
        ("put_from key int", lambda s: s.put_from(1, PTR, 10)),
        ("put_from ptr str", lambda s: s.put_from(k, "ptr", 10)),
        ("put_from ptr float", lambda s: s.put_from(k, float(PTR), 10)),
        ("put_from size str", lambda s: s.put_from(k, PTR, "10")),
        ("put_from config", lambda s: s.put_from(k, PTR, 10, config={"replica_num": 1})),
        ("get_into ptr str", lambda s: s.get_into(k, "ptr", 10)),
        ("get_into size None", lambda s: s.get_into(k, PTR, None)),
        ("batch_put_from keys str", lambda s: s.batch_put_from(k, [PTR], [10])),
        ("batch_put_from ptrs int", lambda s: s.batch_put_from([k], PTR, [10])),
        ("batch_put_from sizes int", lambda s: s.batch_put_from([k], [PTR], 10)),
        ("batch_put_from ptr str", lambda s: s.batch_put_from([k], [str(PTR)], [10])),
        ("batch_put_from config", lambda s: s.batch_put_from([k], [PTR], [10], config=1)),
        ("batch_get_into keys str", lambda s: s.batch_get_into(k, [PTR], [10])),
        ("batch_get_into ptr str", lambda s: s.batch_get_into([k], ["p"], [10])),
        ("batch_get_into sizes None", lambda s: s.batch_get_into([k], [PTR], None)),
        ("multi put ptr_lists flat", lambda s: s.batch_put_from_multi_buffers([k], [PTR], [[10]])),
        ("multi put size_lists flat", lambda s: s.batch_put_from_multi_buffers([k], [[PTR]], [10])),
        ("multi put ptr_lists str", lambda s: s.batch_put_from_multi_buffers([k], "p", [[10]])),
        ("multi put inner ptr str", lambda s: s.batch_put_from_multi_buffers([k], [["p"]], [[10]])),
        ("multi put config", lambda s: s.batch_put_from_multi_buffers([k], [[PTR]], [[10]], config="c")),
        ("multi get keys str", lambda s: s.batch_get_into_multi_buffers(k, [[PTR]], [[10]])),
        ("multi get ptr_lists flat", lambda s: s.batch_get_into_multi_buffers([k], [PTR], [[10]])),
        ("multi get inner size str", lambda s: s.batch_get_into_multi_buffers([k], [[PTR]], [["10"]])),
    ]


CASE_LABELS = [label for label, _ in _cases("x")]


@pytest.mark.parametrize("index", range(len(CASE_LABELS)), ids=CASE_LABELS)
def test_wrong_argument_type_raises_type_error(cluster, uniq, index):
    s = cluster.store
    key = uniq + "k"
    label, call = _cases(key)[index]
    assert s.register_buffer(PTR, 4096) == 0
    try:
        with pytest.raises(TypeError):
            call(s)
    finally:
        s.unregister_buffer(PTR)
    # nothing was stored under the key, and the store still works
    assert cluster.master.query_key(key) is None, label
    assert s.put(uniq + "after", b"ok") == 0
    assert s.get(uniq + "after") == b"ok"


def test_setup_wrong_types_raise_type_error(cluster):
    s = MooncakeDistributedStore()
    addr = cluster.master.addr
    with pytest.raises(TypeError):
        s.setup(123, "P2PHANDSHAKE", 1 << 20, 1 << 20, "tcp", "", addr)
    with pytest.raises(TypeError):
        s.setup("127.0.0.1", "P2PHANDSHAKE", 1.5, 1 << 20, "tcp", "", addr)
    with pytest.raises(TypeError):
        s.setup("127.0.0.1", "P2PHANDSHAKE", 1 << 20, 1 << 20, "tcp", "", 50051)
    with pytest.raises(TypeError):
        s.setup("127.0.0.1", "P2PHANDSHAKE", [1], 1 << 20, "tcp", "", addr)
    assert s.health_check() == 1


def test_values_well_typed_but_invalid_are_600_not_exceptions(cluster, uniq):
    s = cluster.store
    assert s.put("", b"x") == ErrorCode.INVALID_PARAMS
    assert s.put(uniq + "k", b"x", ReplicateConfig(replica_num=0)) == -600
    assert s.register_buffer(PTR, -1) == -600
    assert s.put_from(uniq + "k", PTR, -1) == -600
    assert s.get_into(uniq + "k", -PTR, 10) == -600
    assert s.put_from(uniq + "k", 2**64, 10) == -600
    assert s.batch_put_from([uniq + "a"], [2**70], [1]) == [-600]
    assert s.is_exist("") == -600
    assert s.get_size("") == -600
    assert s.remove("") == -600
    assert s.batch_is_exist(["", uniq + "missing"]) == [-600, 0]
    assert s.batch_remove([""]) == [-600]
    assert s.get("") == b""
    assert s.get_batch(["", uniq + "missing"]) == [b"", b""]
    assert cluster.master.query_key(uniq + "k") is None


def test_a_wrong_master_port_is_named_for_what_it_is(launcher, tmp_path, capfd):
    """A client pointed at the master's HTTP port, or at a master that
    requires a secret it lacks, fails setup with RPC_FAIL and a log line
    that says so (not the body length the foreign bytes would announce)."""
    def setup(addr: str) -> int:
        s = MooncakeDistributedStore()
        launcher.stores.append(s)
        return s.setup("127.0.0.1", "P2PHANDSHAKE", 16 << 20, 16 << 20, "tcp", "", addr)

    m = launcher.master()
    capfd.readouterr()
    assert setup(m.http_addr) == ErrorCode.RPC_FAIL
    err = capfd.readouterr().err
    assert f"{m.http_addr} is not a gostore RPC port: it answered like HTTP" in err, err
    assert "--metrics_port" in err and "exceeds the" not in err, err

    secret = tmp_path / "secret"
    secret.write_text("a-secret-of-the-pool-0123456789\n")
    ms = launcher.master(auth_secret_file=str(secret))
    capfd.readouterr()
    assert setup(ms.addr) == ErrorCode.RPC_FAIL
    err = capfd.readouterr().err
    assert f"{ms.addr} requires authentication with a shared secret" in err, err
    assert "GOSTORE_AUTH_SECRET_FILE" in err and "exceeds the" not in err, err
