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


# ---- a store that is not set up, or is closed ----------------------------------

_ARR = None


def _arr():
    global _ARR
    if _ARR is None:
        import numpy as np
        _ARR = np.zeros(16, dtype=np.float32)
    return _ARR


# Every public method of the class but those below, with arguments that are
# valid: the store's state is the only thing wrong.
_UNSET_CALLS = {
    "allocate_and_mount_segment": lambda: (16 << 20,),
    "batch_get_buffer": lambda: (["k"],),
    "batch_get_into": lambda: (["k"], [PTR], [64]),
    "batch_get_into_multi_buffer_ranges": lambda: (["k"], [[PTR]], [[64]], [[0]]),
    "batch_get_into_multi_buffers": lambda: (["k"], [[PTR]], [[64]]),
    "batch_get_replica_desc": lambda: (["k"],),
    "batch_get_session_end": lambda: (["k"],),
    "batch_get_session_start": lambda: (["k"],),
    "batch_get_tensor": lambda: (["k"],),
    "batch_get_tensor_into": lambda: (["k"], [PTR], [64]),
    "batch_get_tensor_with_parallelism": lambda: (["k"],),
    "batch_get_tensor_with_parallelism_into": lambda: (["k"], [PTR], [64]),
    "batch_get_tensor_with_tp": lambda: (["k"],),
    "batch_get_tensor_with_tp_into": lambda: (["k"], [PTR], [64]),
    "batch_is_exist": lambda: (["k"],),
    "batch_pub_tensor": lambda: (["k"], [_arr()]),
    "batch_pub_tensor_with_tp": lambda: (["k"], [_arr()]),
    "batch_put_from": lambda: (["k"], [PTR], [64]),
    "batch_put_from_multi_buffer_ranges": lambda: (["k"], [[PTR]], [[64]], [[0]]),
    "batch_put_from_multi_buffers": lambda: (["k"], [[PTR]], [[64]]),
    "batch_put_session_end": lambda: (["k"],),
    "batch_put_session_revoke": lambda: (["k"],),
    "batch_put_session_start": lambda: (["k"], [64]),
    "batch_put_tensor": lambda: (["k"], [_arr()]),
    "batch_put_tensor_from": lambda: (["k"], [PTR], [64]),
    "batch_put_tensor_with_parallelism": lambda: (["k"], [_arr()]),
    "batch_put_tensor_with_parallelism_from": lambda: (["k"], [PTR], [64]),
    "batch_put_tensor_with_tp": lambda: (["k"], [_arr()]),
    "batch_put_tensor_with_tp_from": lambda: (["k"], [PTR], [64]),
    "batch_remove": lambda: (["k"],),
    "batch_replica_clear": lambda: (["k"],),
    "batch_upsert_from": lambda: (["k"], [PTR], [64]),
    "batch_upsert_pub_tensor": lambda: (["k"], [_arr()]),
    "batch_upsert_tensor": lambda: (["k"], [_arr()]),
    "batch_upsert_tensor_from": lambda: (["k"], [PTR], [64]),
    "batch_upsert_tensor_with_parallelism": lambda: (["k"], [_arr()]),
    "batch_upsert_tensor_with_parallelism_from": lambda: (["k"], [PTR], [64]),
    "create_copy_task": lambda: ("k", ["seg"]),
    "create_move_task": lambda: ("k", "a", "b"),
    "get": lambda: ("k",),
    "get_batch": lambda: (["k"],),
    "get_buffer": lambda: ("k",),
    "get_into": lambda: ("k", PTR, 64),
    "get_into_ranges": lambda: ([PTR], [["k"]], [[[0]]], [[[0]]], [[[64]]]),
    "get_offload_rpc_read_count": lambda: (),
    "get_replica_desc": lambda: ("k",),
    "get_size": lambda: ("k",),
    "get_tensor": lambda: ("k",),
    "get_tensor_into": lambda: ("k", PTR, 64),
    "get_tensor_with_parallelism": lambda: ("k",),
    "get_tensor_with_parallelism_into": lambda: ("k", PTR, 64),
    "get_tensor_with_tp": lambda: ("k",),
    "get_tensor_with_tp_into": lambda: ("k", PTR, 64),
    "is_exist": lambda: ("k",),
    "mount_segment": lambda: ("/dev/null", 4096),
    "pub_tensor": lambda: ("k", _arr()),
    "pub_tensor_with_tp": lambda: ("k", _arr()),
    "put": lambda: ("k", b"x"),
    "put_batch": lambda: (["k"], [b"x"]),
    "put_from": lambda: ("k", PTR, 64),
    "put_from_with_metadata": lambda: ("k", PTR, PTR, 64, 8),
    "put_parts": lambda: ("k", b"x"),
    "put_tensor": lambda: ("k", _arr()),
    "put_tensor_from": lambda: ("k", PTR, 64),
    "put_tensor_with_parallelism": lambda: ("k", _arr()),
    "put_tensor_with_parallelism_from": lambda: ("k", PTR, 64),
    "put_tensor_with_tp": lambda: ("k", _arr()),
    "put_tensor_with_tp_from": lambda: ("k", PTR, 64),
    "query_task": lambda: ((0, 1),),
    "register_buffer": lambda: (PTR, 4096),
    "remove": lambda: ("k",),
    "remove_all": lambda: (),
    "remove_by_regex": lambda: ("k.*",),
    "save_tensor_to_safetensor": lambda: ("k", "/nonexistent-dir/x.safetensors"),
    "unmount_and_free_segment": lambda: (["seg"],),
    "unmount_local_disk_segment": lambda: (),
    "unmount_segment": lambda: (["seg"],),
    "unregister_buffer": lambda: (PTR,),
    "upsert": lambda: ("k", b"x"),
    "upsert_batch": lambda: (["k"], [b"x"]),
    "upsert_from": lambda: ("k", PTR, 64),
    "upsert_parts": lambda: ("k", b"x"),
    "upsert_pub_tensor": lambda: ("k", _arr()),
    "upsert_tensor": lambda: ("k", _arr()),
    "upsert_tensor_from": lambda: ("k", PTR, 64),
    "upsert_tensor_with_parallelism": lambda: ("k", _arr()),
    "upsert_tensor_with_parallelism_from": lambda: ("k", PTR, 64),
}

_UNSET_EXEMPT = {
    "setup": "it sets the store up",
    "setup_dummy": "it sets the store up (standalone)",
    "init_all": "it sets the store up",
    "close": "0 whatever the state (closing twice is fine)",
    "health_check": "1 is its answer for 'not set up or closed'",
    "alloc_from_mem_pool": "0 outside standalone mode, as documented; no store call",
    "get_tensor_into_cuda": "needs a torch CUDA tensor, checked (TypeError) before the state",
    "batch_get_tensor_into_cuda": "needs torch CUDA tensors, checked (TypeError) before the state",
    "load_tensor_from_safetensor": "reads its file first; the put it then makes is put_tensor's case",
    "get_hostname": "a status query: \"\" before setup without loading the library (after close too, logged)",
    "transport_info": "a status query: {} before setup without loading the library (after close too, logged)",
}


def _public_methods():
    import inspect
    return {n for n, _ in inspect.getmembers(MooncakeDistributedStore, callable) if not n.startswith("_")}


def _refused(s, name: str, capfd):
    capfd.readouterr()
    result = getattr(s, name)(*_UNSET_CALLS[name]())
    lines = [ln for ln in capfd.readouterr().err.splitlines() if ln.strip()]
    return result, lines


def test_calls_on_a_store_not_set_up_or_closed(master, capfd):
    """Every public method on a store never set up, and on one set up and
    closed: the same failure value both ways, and exactly one log line
    saying which state the store is in."""
    missing = _public_methods() - set(_UNSET_CALLS) - set(_UNSET_EXEMPT)
    assert not missing, f"add these methods to _UNSET_CALLS (or _UNSET_EXEMPT, with why): {sorted(missing)}"
    assert not set(_UNSET_CALLS) & set(_UNSET_EXEMPT)
    wrong = []
    for name in sorted(_UNSET_CALLS):
        before, before_lines = _refused(MooncakeDistributedStore(), name, capfd)
        s = MooncakeDistributedStore()
        assert s.setup("127.0.0.1", "P2PHANDSHAKE", 0, 16 << 20, "tcp", "", master.addr) == 0
        assert s.close() == 0
        after, after_lines = _refused(s, name, capfd)
        problems = []
        if repr(before) != repr(after):
            problems.append(f"before setup {before!r}, after close {after!r}")
        if len(before_lines) != 1 or "store is not set up" not in before_lines[0]:
            problems.append(f"before setup logged {before_lines}")
        if len(after_lines) != 1 or "store is closed" not in after_lines[0]:
            problems.append(f"after close logged {after_lines}")
        if problems:
            wrong.append(f"{name}: " + "; ".join(problems))
    assert not wrong, "\n".join(wrong)


def test_a_closed_store_logs_a_line_not_a_flood(master, capfd):
    s = MooncakeDistributedStore()
    assert s.setup("127.0.0.1", "P2PHANDSHAKE", 0, 16 << 20, "tcp", "", master.addr) == 0
    assert s.close() == 0
    capfd.readouterr()
    for _ in range(1000):
        assert s.put("k", b"x") == ErrorCode.INTERNAL_ERROR
        assert s.get("k") == b""
    lines = [ln for ln in capfd.readouterr().err.splitlines() if ln.strip()]
    assert len(lines) == 1 and "store is closed: put_batch refused" in lines[0]  # put is put_batch of one, lines
    # Set up again, it serves.
    assert s.setup("127.0.0.1", "P2PHANDSHAKE", 16 << 20, 16 << 20, "tcp", "", master.addr) == 0
    assert s.put("again", b"y" * 10) == 0 and s.get("again") == b"y" * 10


@pytest.mark.parametrize("case", ["hostname not on this host", "segment size below 0"])
def test_setup_refusals_log_one_line(master, capfd, caplog, case):
    """setup's negative returns each log one line with the cause (the Go
    side's on stderr, the Python side's through ``logging``)."""
    s = MooncakeDistributedStore()
    capfd.readouterr()
    caplog.clear()
    if case == "hostname not on this host":  # TEST-NET-2: no host has it
        rc = s.setup("198.51.100.7", "P2PHANDSHAKE", 16 << 20, 16 << 20, "tcp", "", master.addr, allow_insecure=True)
        says = "local_hostname 198.51.100.7: the transfer server cannot listen there"
    else:
        rc = s.setup("127.0.0.1", "P2PHANDSHAKE", -1, 16 << 20, "tcp", "", master.addr)
        says = "global_segment_size=-1 is outside 0..2**64-1"
    lines = [ln for ln in capfd.readouterr().err.splitlines() if ln.strip()]
    lines += [r.getMessage() for r in caplog.records]
    assert rc == ErrorCode.INVALID_PARAMS
    assert len(lines) == 1 and says in lines[0], lines
