"""Standalone mode: applications that call ``setup_dummy`` and the real
``gostore-client`` process that serves them (real master, real sockets,
real shared memory). Bytes are checked by an ordinary client in another
role, so a store that only agreed with itself would fail."""

from __future__ import annotations

import ctypes
import inspect
import json
import os
import socket
import subprocess
import sys
import textwrap
import threading
from typing import Any, Callable, List, Sequence

import pytest

from gostore import MooncakeDistributedStore, ReplicateConfig
from gostore.standalone import protocol as P
from gostore import standalone

MiB = 1 << 20


def _pattern(seed: int, n: int) -> bytes:
    return bytes((seed * 131 + i * 7) & 0xFF for i in range(256)) * (n // 256) + bytes(n % 256)


def _dummy(server_address: str, pool: int = 64 * MiB, local: int = 4 * MiB) -> MooncakeDistributedStore:
    s = MooncakeDistributedStore()
    assert s.setup_dummy(pool, local, server_address) == 0
    return s


# The application in a process of its own: it must run with no Go runtime
# loaded, and a child it forks uses the store as well.
_APP = textwrap.dedent(
    r"""
    import ctypes, json, os, sys
    from gostore import MooncakeDistributedStore, _native
    addr = sys.argv[1]
    parent_value, child_value = _pattern(1, 3 * (1 << 20) + 5), _pattern(2, 200_000)
    s = MooncakeDistributedStore()
    out = {"setup": s.setup_dummy(32 << 20, 1 << 20, addr)}
    out["put"] = s.put("sa-parent", parent_value)

    def busy(who):
        # Parent and child at once, each through its own connection and
        # staging memory: shared ones would mix their frames and bytes.
        bad = 0
        for i in range(30):
            v = _pattern(i + (50 if who == "child" else 0), 300_000 + i)
            if s.put(f"sa-{who}-{i}", v) != 0 or s.get(f"sa-{who}-{i}") != v:
                bad += 1
        return bad

    r, w = os.pipe()
    pid = os.fork()
    if pid == 0:
        os.close(r)
        child = {"put": s.put("sa-child", child_value), "bad": busy("child"),
                 "reads_parent": s.get("sa-parent") == parent_value,
                 "go_loaded": _native.is_loaded()}
        p = s.alloc_from_mem_pool(len(child_value))
        ctypes.memmove(p, child_value, len(child_value))
        child["put_from_pool"] = s.put_from("sa-child-pool", p, len(child_value))
        os.write(w, json.dumps(child).encode())
        os._exit(0)
    os.close(w)
    out["bad"] = busy("parent")
    _, status = os.waitpid(pid, 0)
    out["child"] = json.loads(os.read(r, 65536) or b"null")
    out["child_status"] = status
    out["reads_child"] = s.get("sa-child") == child_value
    out["go_loaded"] = _native.is_loaded()
    print(json.dumps(out))
    """
)


def test_app_loads_no_go_runtime_and_a_forked_child_uses_the_store(master, client_process_factory, store_factory):
    srv = client_process_factory(master)
    parent_value, child_value = _pattern(1, 3 * MiB + 5), _pattern(2, 200_000)
    done = subprocess.run(
        [sys.executable, "-c", inspect.getsource(_pattern) + _APP, srv.server_address],
        capture_output=True, text=True, timeout=60,
    )
    assert done.returncode == 0, done.stderr
    out = json.loads(done.stdout.strip().splitlines()[-1])
    assert out["setup"] == 0 and out["put"] == 0
    assert out["child_status"] == 0
    assert out["child"] == {"put": 0, "bad": 0, "reads_parent": True, "go_loaded": False, "put_from_pool": 0}
    assert out["bad"] == 0
    assert out["reads_child"] is True
    assert out["go_loaded"] is False
    # An ordinary client reads what both processes wrote.
    reader = store_factory(master)
    assert reader.get("sa-parent") == parent_value
    assert reader.get("sa-child") == child_value
    assert reader.get("sa-child-pool") == child_value


@pytest.mark.parametrize("local", [4 * MiB, 0], ids=["staging", "no-local-buffer"])
def test_bytes_through_pool_and_staged_memory(master, client_process_factory, store_factory, local):
    srv = client_process_factory(master)
    app = _dummy(srv.server_address, local=local)
    reader = store_factory(master)
    small, big = _pattern(3, 1000), _pattern(4, 6 * MiB + 3)  # big exceeds the 4 MiB local buffer
    assert app.put("sb-small", small) == 0
    assert app.put_parts("sb-parts", small[:10], small[10:]) == 0
    assert app.put("sb-big", big) == 0
    assert reader.get("sb-small") == small and reader.get("sb-parts") == small
    assert reader.get("sb-big") == big
    assert reader.put("sb-from-reader", big[:MiB]) == 0
    assert app.get("sb-from-reader") == big[:MiB]
    assert app.get_batch(["sb-small", "sb-big", "sb-missing"]) == [small, big, b""]
    buf = app.get_buffer("sb-big")
    assert buf is not None and bytes(buf) == big
    assert [None if b is None else bytes(b) for b in app.batch_get_buffer(["sb-small", "sb-missing"])] == [small, None]
    assert app.get_size("sb-big") == len(big)
    assert app.batch_is_exist(["sb-small", "sb-missing"]) == [1, 0]

    # Pool memory: zero-copy both ways.
    p = app.alloc_from_mem_pool(2 * MiB)
    assert p != 0 and app.register_buffer(p, 2 * MiB) == 0
    ctypes.memmove(p, big, 2 * MiB)
    assert app.put_from("sb-pool", p, 2 * MiB) == 0
    assert reader.get("sb-pool") == big[: 2 * MiB]
    ctypes.memset(p, 0, 2 * MiB)
    assert app.batch_get_into(["sb-small", "sb-pool"], [p, p + MiB // 2], [MiB // 2, 3 * MiB // 2]) == [
        len(small), -600]  # the second range runs past the pool allocation
    assert ctypes.string_at(p, len(small)) == small
    assert app.get_into("sb-pool", p, 2 * MiB) == 2 * MiB
    assert ctypes.string_at(p, 2 * MiB) == big[: 2 * MiB]

    # Memory of the application's own (not shared): staged, same results.
    own = (ctypes.c_char * len(small))()
    assert app.get_into("sb-small", ctypes.addressof(own), len(small)) == len(small)
    assert own.raw == small
    assert app.put_from("sb-own", ctypes.addressof(own), len(small)) == 0
    assert reader.get("sb-own") == small
    assert app.remove("sb-own", force=True) == 0 and reader.is_exist("sb-own") == 0


def test_pool_and_registration_rules(master, client_process_factory, caplog):
    srv = client_process_factory(master)
    app = _dummy(srv.server_address, pool=3 * MiB)
    a = app.alloc_from_mem_pool(2 * MiB)
    assert a != 0
    assert app.alloc_from_mem_pool(2 * MiB) == 0  # the pool has 1 MiB left
    assert app.alloc_from_mem_pool(0) == 0
    b = app.alloc_from_mem_pool(MiB)
    assert b != 0
    own = (ctypes.c_char * 4096)()
    with caplog.at_level("ERROR", logger="gostore.standalone"):
        assert app.register_buffer(ctypes.addressof(own), 4096) == -1
    assert "alloc_from_mem_pool" in caplog.text
    assert app.register_buffer(a + 4096, 4096) == 0  # inside an allocation
    assert app.setup("127.0.0.1", "P2PHANDSHAKE", MiB, MiB, "tcp", "", master.addr) == -1
    assert MooncakeDistributedStore().alloc_from_mem_pool(4096) == 0  # not in standalone mode
    with pytest.raises(TypeError):
        app.alloc_from_mem_pool("4096")
    with pytest.raises(TypeError):
        MooncakeDistributedStore().setup_dummy("1GB", 0, srv.server_address)
    assert app.setup_dummy(MiB, MiB, srv.server_address) == -1  # already set up


def test_setup_dummy_without_a_server_fails_clearly(tmp_path, caplog):
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        free = s.getsockname()[1]
    store = MooncakeDistributedStore()
    with caplog.at_level("ERROR", logger="gostore"):
        assert store.setup_dummy(MiB, MiB, f"127.0.0.1:{free}") == -1
    assert "cannot reach gostore-client" in caplog.text
    assert store.setup_dummy(MiB, MiB, "", str(tmp_path / "none.sock")) == -1


def test_calls_in_a_loop_are_answered_to_a_polling_read(master, client_process_factory, store_factory,
                                                        monkeypatch):
    """The application polls for each answer (GOSTORE_IPC_SPIN_US, here the
    10 ms most) from the real gostore-client; bytes as ever."""
    srv = client_process_factory(master)
    monkeypatch.setenv("GOSTORE_IPC_SPIN_US", str(P.MAX_SPIN_US))
    app = _dummy(srv.server_address)
    lib = app._hobj.lib
    reader = store_factory(master)
    polls, hits = lib._gate.polls, lib._gate.hits
    for i in range(40):
        v = _pattern(i, 4096 + i)
        assert app.put(f"spin-{i}", v) == 0
        assert reader.get(f"spin-{i}") == v
        assert app.get(f"spin-{i}") == v
    # One thread: every answer was polled for, and those that came within
    # 10 ms were caught by the poll.
    assert lib._gate.polls - polls >= 80
    assert lib._gate.hits - hits >= 1
    assert lib._gate.busy == 0


def test_the_stores_of_a_process_share_one_polling_bound(master, client_process_factory):
    """Every standalone store of a process polls under one SpinGate, so
    that together they poll on no more CPUs than the process may use (a
    gate per store let each of them take that many). A forked child has a
    gate of its own: the parent's pollers do not exist there."""
    from gostore import standalone

    srv = client_process_factory(master)
    first, second = _dummy(srv.server_address), _dummy(srv.server_address)
    gate = first._lib()._gate
    assert second._lib()._gate is gate and standalone.process_gate() is gate
    polls = gate.polls
    assert first.put("one-gate", b"g" * 100) == 0
    assert second.get("one-gate") == b"g" * 100
    assert gate.polls - polls >= 2  # both stores' calls polled through it
    for _ in range(gate.limit):  # as if the parent's threads were polling at the fork
        assert gate.enter()
    try:
        assert not gate.enter()

        def child_polls_on_a_gate_of_its_own() -> bool:
            child_gate = first._lib()._gate
            return (child_gate is not gate and second._lib()._gate is child_gate and child_gate.busy == 0
                    and first.get("one-gate") == b"g" * 100 and child_gate.polls >= 1)

        assert _in_forked_child(child_polls_on_a_gate_of_its_own)
    finally:
        for _ in range(gate.limit):
            gate.leave(False)
    assert gate.busy == 0


@pytest.mark.parametrize("spin_us", [P.MAX_SPIN_US, 0], ids=["polls", "sleeps"])
def test_the_server_polls_for_the_next_call_of_an_application_in_a_loop(master, store_factory, tmp_path, spin_us):
    """gostore-client's side, served from this process (to see its gate):
    with a spin, a connection whose calls come one after the other is polled
    for its next call; with --ipc_spin_us=0 never."""
    from gostore.standalone.server import StandaloneServer

    served = store_factory(master)
    server = StandaloneServer(served, "127.0.0.1", 0, str(tmp_path / "srv.sock"), spin_us=spin_us)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        app = MooncakeDistributedStore()
        assert app.setup_dummy(16 * MiB, 0, "", server.ipc_path) == 0
        pool = app.alloc_from_mem_pool(MiB)
        assert pool != 0 and app.register_buffer(pool, MiB) == 0
        for i in range(20):
            v = _pattern(i, 8192)
            ctypes.memmove(pool, v, len(v))
            assert app.put_from(f"srv-spin-{spin_us}-{i}", pool, len(v)) == 0
            ctypes.memset(pool, 0, len(v))
            assert app.get_into(f"srv-spin-{spin_us}-{i}", pool, len(v)) == len(v)
            assert ctypes.string_at(pool, len(v)) == v
        app.close()
    finally:
        server.shutdown()
    if spin_us:
        assert server._gate.polls >= 1 and server._gate.hits >= 1
    else:
        assert server._gate.polls == 0


def test_spin_settings_out_of_range_are_refused_or_ignored_clearly(master, client_process_factory, monkeypatch,
                                                                   caplog):
    for bad in (-1, P.MAX_SPIN_US + 1):
        with pytest.raises(RuntimeError) as e:
            client_process_factory(master, ipc_spin_us=bad)
        assert f"--ipc_spin_us {bad}: from 0 to {P.MAX_SPIN_US}" in str(e.value)
    srv = client_process_factory(master)
    for bad in ("fast", "-1", str(P.MAX_SPIN_US + 1)):
        monkeypatch.setenv("GOSTORE_IPC_SPIN_US", bad)
        caplog.clear()
        with caplog.at_level("WARNING", logger="gostore.standalone"):
            app = _dummy(srv.server_address)
        assert f"GOSTORE_IPC_SPIN_US={bad!r} is not a whole number of microseconds from 0 to " \
               f"{P.MAX_SPIN_US}: {P.DEFAULT_SPIN_US} used" in caplog.text
        assert app._hobj.lib.spin_us == P.DEFAULT_SPIN_US
        assert app.put("spin-env", b"v") in (0, -705) and app.get("spin-env") == b"v"
        app.close()
    monkeypatch.setenv("GOSTORE_IPC_SPIN_US", "0")
    app = _dummy(srv.server_address)
    assert app._hobj.lib.spin_us == 0 and app._hobj.lib._conn().frames.spin_ns == 0
    app.close()


def test_server_gone_and_back(master, client_process_factory, store_factory, tmp_path):
    ipc = str(tmp_path / "client.sock")
    srv = client_process_factory(master, ipc_path=ipc)
    app = MooncakeDistributedStore()
    assert app.setup_dummy(16 * MiB, MiB, "", ipc) == 0
    p = app.alloc_from_mem_pool(MiB)
    value = _pattern(5, MiB)
    ctypes.memmove(p, value, MiB)
    assert app.put_from("sg-before", p, MiB) == 0
    srv.kill()
    assert app.put("sg-during", b"x") == -900
    assert app.get("sg-before") == b""
    assert app.batch_is_exist(["sg-before", "sg-during"]) == [-900, -900]
    assert app.health_check() == 2
    srv2 = client_process_factory(master, ipc_path=ipc)  # a new server on the same socket
    # The application reconnects and shares its pool memory again. (The
    # master still lists the dead server's segment until its client_ttl
    # passes; a put placed there would fail with -800, so name the new one.)
    cfg = ReplicateConfig()
    cfg.preferred_segment = srv2.segment
    assert app.put_from("sg-after", p, MiB, cfg) == 0
    assert app.health_check() == 0
    assert store_factory(master).get("sg-after") == value


def _raw(ipc: str) -> socket.socket:
    s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    s.settimeout(10)
    s.connect(ipc)
    return s


def _closed_by_server(s: socket.socket) -> bool:
    try:
        return s.recv(1) == b""
    except ConnectionResetError:
        return True


def test_server_refuses_what_a_peer_must_not_send(master, client_process_factory, store_factory):
    srv = client_process_factory(master)
    reader = store_factory(master)
    assert reader.put("sr-key", _pattern(6, 4096)) == 0

    # Garbage, and a frame longer than the limit: the connection is dropped.
    with _raw(srv.ipc_path) as s:
        s.sendall(b"\xff" * 64)
        assert _closed_by_server(s)
    with _raw(srv.ipc_path) as s:
        s.sendall((P.MAX_FRAME + 10).to_bytes(4, "little") + bytes([P.CALL]))
        assert _closed_by_server(s)
    # A call before HELLO.
    with _raw(srv.ipc_path) as s:
        P.send_frame(s, P.frame(P.CALL, [b"gs_get_size", None, 0, 1, b"sr-key", 6]))
        assert _closed_by_server(s)

    with _raw(srv.ipc_path) as s:
        P.send_frame(s, P.frame(P.HELLO, [b""]))
        assert P.read_frame(s)[0] == P.REPLY

        def call(name, *args):
            P.send_frame(s, P.frame(P.CALL, [name.encode(), None, 0, *args]))
            kind, body = P.read_frame(s)
            return kind, P.get_values(body)

        from array import array

        # Well formed: answered.
        assert call("gs_get_size", 1, b"sr-key", 6) == (P.REPLY, [4096])
        # A read into memory this application never shared: refused, and
        # nothing was read (the server's own memory is not the target).
        kind, vals = call(
            "gs_get_into_batch", 1, 1, b"sr-key", array("I", [6]), array("Q", [0x7F0000001000]),
            array("Q", [4096]), array("I", [1]), 1, None,
        )
        assert kind == P.ERROR and vals[0] == -600 and b"not in memory shared" in vals[1]
        kind, vals = call("gs_get_into_one", 1, b"sr-key", 6, 0x7F0000001000, 4096, 1)
        assert kind == P.ERROR and vals[0] == -600 and b"not in memory shared" in vals[1]
        kind, vals = call("gs_put_one", 1, b"sr-one", 6, 0x7F0000001000, 4096, 1, 1, 0, b"", 0, 0)
        assert kind == P.ERROR and vals[0] == -600 and b"not in memory shared" in vals[1]
        # Key lengths naming more bytes than were sent.
        kind, vals = call("gs_exist_batch", 1, 2, b"sr-key", array("I", [6, 100]), None)
        assert kind == P.ERROR and vals[0] == -600
        # Arrays shorter than their count.
        kind, vals = call("gs_exist_batch", 1, 3, b"sr-key", array("I", [6]), None)
        assert kind == P.ERROR and vals[0] == -600
        # Finishing a get handle this connection was never given.
        kind, vals = call("gs_get_abort", 1, 12345)
        assert kind == P.ERROR and vals[0] == -600
        # ...or asking where its objects lie (another connection's get).
        kind, vals = call("gs_get_places", 1, 12345, None, None, None, None, None, 4096)
        assert kind == P.ERROR and vals[0] == -600 and b"unknown get handle" in vals[1]
        # A function that is not served (the store's setup).
        kind, vals = call("gs_setup", 1, b"{}", 2)
        assert kind == P.ERROR and vals[0] == -1
        # A region whose fd holds fewer bytes than it names.
        fd = os.memfd_create("short")
        os.ftruncate(fd, 4096)
        P.send_frame(s, P.frame(P.REGION, [0x10000, 1 << 20]), [fd])
        os.close(fd)
        kind, body = P.read_frame(s)
        assert kind == P.ERROR

        # A region shared, then taken back: reads into it are refused again,
        # and taking back what is not shared is an error.
        fd = os.memfd_create("taken-back")
        os.ftruncate(fd, 1 << 20)
        P.send_frame(s, P.frame(P.REGION, [0x7E0000000000, 1 << 20]), [fd])
        os.close(fd)
        assert P.read_frame(s)[0] == P.REPLY
        into = ("gs_get_into_batch", 1, 1, b"sr-key", array("I", [6]), array("Q", [0x7E0000000000]),
                array("Q", [4096]), array("I", [1]), 1, None)
        assert call(*into) == (P.REPLY, [None, array("q", [4096])])  # a void call; 4096 bytes read
        assert call("gs_get_into_one", 1, b"sr-key", 6, 0x7E0000000000, 4096, 1) == (P.REPLY, [4096])
        P.send_frame(s, P.frame(P.UNREGION, [0x7E0000000000]))
        assert P.read_frame(s)[0] == P.REPLY
        kind, vals = call(*into)
        assert kind == P.ERROR and vals[0] == -600 and b"not in memory shared" in vals[1]
        P.send_frame(s, P.frame(P.UNREGION, [0x7E0000000000]))
        kind, body = P.read_frame(s)
        assert kind == P.ERROR and b"no region shared" in P.get_values(body, 2)[1]

        # This process's own memory (PROCESS_TAG): refused before the CROSS
        # check, and after a check whose nonce was not found here.
        own = ctypes.create_string_buffer(4096)
        tagged = ("gs_get_into_batch", 1, 1, b"sr-key", array("I", [6]),
                  array("Q", [ctypes.addressof(own) | P.PROCESS_TAG]), array("Q", [4096]), array("I", [1]), 1, None)
        kind, vals = call(*tagged)
        assert kind == P.ERROR and vals[0] == -600 and b"own memory, not allowed" in vals[1]
        own_one = ctypes.create_string_buffer(4096)
        tagged_one = ("gs_get_into_one", 1, b"sr-key", 6, ctypes.addressof(own_one) | P.PROCESS_TAG, 4096, 1)
        kind, vals = call(*tagged_one)
        assert kind == P.ERROR and vals[0] == -600 and b"own memory, not allowed" in vals[1]
        nonce = ctypes.create_string_buffer(b"0123456789abcdef", 16)
        P.send_frame(s, P.frame(P.CROSS, [ctypes.addressof(nonce), b"not-what-it-says"]))
        assert P.get_values(P.read_frame(s)[1]) == [0]
        assert call(*tagged)[0] == P.ERROR and own.raw == bytes(4096)
        # After a check that passed: read in place, bytes right...
        P.send_frame(s, P.frame(P.CROSS, [ctypes.addressof(nonce), b"0123456789abcdef"]))
        assert P.get_values(P.read_frame(s)[1]) == [1]
        assert call(*tagged) == (P.REPLY, [None, array("q", [4096])])
        assert own.raw == _pattern(6, 4096)
        assert own_one.raw == bytes(4096)
        assert call(*tagged_one) == (P.REPLY, [4096])
        assert own_one.raw == _pattern(6, 4096)
        # A one-key put reads this process's memory in place too.
        assert call("gs_put_one", 1, b"sr-one", 6, ctypes.addressof(own_one) | P.PROCESS_TAG, 4096, 1,
                    1, 0, b"", 0, 0) == (P.REPLY, [0])
        assert call("gs_get_size", 1, b"sr-one", 6) == (P.REPLY, [4096])
        # ...but only for the calls that take it, and only user-space addresses.
        kind, vals = call("gs_get_ranges", 1, 1, b"sr-key", array("I", [6]),
                          array("Q", [ctypes.addressof(own) | P.PROCESS_TAG]), array("Q", [4096]),
                          array("Q", [0]), array("I", [1]), 1, None)
        assert kind == P.ERROR and b"own memory, not allowed" in vals[1]
        kind, vals = call("gs_get_into_batch", 1, 1, b"sr-key", array("I", [6]),
                          array("Q", [(1 << 60) | P.PROCESS_TAG]), array("Q", [4096]), array("I", [1]), 1, None)
        assert kind == P.ERROR and b"not the application's memory" in vals[1]
        # A nonce of a size the check does not take drops the connection.
        P.send_frame(s, P.frame(P.CROSS, [ctypes.addressof(nonce), b"x"]))
        assert _closed_by_server(s)

    assert srv.alive()
    assert "not in memory shared" in srv.log()
    # The server still serves an application, and the object is intact.
    app = _dummy(srv.server_address)
    assert app.get("sr-key") == _pattern(6, 4096)
    assert app.get("sr-one") == _pattern(6, 4096)


def test_many_threads_share_one_session(master, client_process_factory, store_factory):
    import threading

    srv = client_process_factory(master)
    app = _dummy(srv.server_address, local=2 * MiB)
    errors = []

    def work(t: int) -> None:
        try:
            for i in range(20):
                v = _pattern(t * 100 + i, 100_000 + i)
                if app.put(f"mt-{t}-{i}", v) != 0 or app.get(f"mt-{t}-{i}") != v:
                    errors.append((t, i))
        except Exception as e:  # pragma: no cover - reported below
            errors.append(repr(e))

    threads = [threading.Thread(target=work, args=(t,)) for t in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert errors == []
    reader = store_factory(master)
    assert reader.get("mt-3-19") == _pattern(319, 100_019)


def test_host_allocator_memory_registers_and_moves_bytes(master, client_process_factory):
    """Memory from MooncakeHostMemAllocator (a memfd, as Mooncake's) can be
    registered in standalone mode: it is shared with gostore-client, outside
    the pool's budget, and zero-copy puts and gets go through it (SGLang's
    standalone_storage allocates its host KV pool so)."""
    from gostore import MooncakeHostMemAllocator

    srv = client_process_factory(master)
    writer, reader = _dummy(srv.server_address, pool=MiB), _dummy(srv.server_address, pool=MiB)
    alloc = MooncakeHostMemAllocator()
    size = 3 * MiB  # more than either pool: not counted against it
    src, dst = alloc.alloc(size), alloc.alloc(size)
    value = _pattern(5, size)
    ctypes.memmove(src, value, size)
    assert writer.register_buffer(src + MiB, 2 * MiB) == 0  # a part of an allocation
    assert reader.register_buffer(dst, size) == 0
    assert writer.put_from("hostmem/k", src + MiB, 2 * MiB) == 0
    assert reader.get_into("hostmem/k", dst, size) == 2 * MiB
    assert ctypes.string_at(dst, 2 * MiB) == value[MiB:3 * MiB]
    assert alloc.free(src) == 0 and alloc.free(dst) == 0


def _in_forked_child(check: Callable[[], bool]) -> bool:
    """Whether ``check()`` holds in a child forked from here (its store
    state as this process's at the fork)."""
    r, w = os.pipe()
    pid = os.fork()
    if pid == 0:
        try:
            ok = check()
        except BaseException:
            ok = False
        os.write(w, b"1" if ok else b"0")
        os._exit(0)
    os.close(w)
    try:
        return os.read(r, 1) == b"1"
    finally:
        os.waitpid(pid, 0)
        os.close(r)


def _count_fds(lib: Any, monkeypatch: Any) -> List[int]:
    """How many file descriptors each frame ``lib`` sends from now on carries."""
    sent: List[int] = []
    roundtrip = lib._roundtrip

    def counting(c: Any, data: bytes, fds: Sequence[int] = ()) -> Any:
        sent.append(len(fds))
        return roundtrip(c, data, fds)

    monkeypatch.setattr(lib, "_roundtrip", counting)
    return sent


def test_large_staged_calls_reuse_one_overflow_region(master, client_process_factory, store_factory, monkeypatch):
    """Calls larger than the local buffer stage through one region shared
    once and kept (a region per call cost page faults on both sides), grown
    to the largest call, and let go once it went unused long enough."""
    from gostore import standalone

    # Else nothing is staged: the server would write this process's memory
    # itself, and the gets copy from the segments here.
    monkeypatch.setattr(standalone, "CROSS_MEMORY", False)
    monkeypatch.setattr(standalone, "PLACES_MIN", 1 << 62)
    srv = client_process_factory(master)
    app = _dummy(srv.server_address, local=1 * MiB)
    reader = store_factory(master)
    lib = app._lib()
    assert not lib._cross
    values = {f"ov-{i}": _pattern(20 + i, 3 * MiB + i) for i in range(4)}
    for k, v in values.items():
        assert reader.put(k, v) == 0
    keys = list(values)
    assert app.get_batch(keys[:2]) == [values[k] for k in keys[:2]]
    first = lib._overflow
    assert first is not None and first.size >= 2 * 3 * MiB and not lib._overflow_busy
    sent_fds = _count_fds(lib, monkeypatch)
    for _ in range(3):  # the same region every time, bytes right every time
        assert app.get_batch(keys[:2]) == [values[k] for k in keys[:2]]
        assert app.get(keys[2]) == values[keys[2]]
        assert lib._overflow is first
    # ...and not sent again with the calls: the server maps it once.
    assert sent_fds and not any(sent_fds)
    # A larger call grows it (the old one is taken back from the server).
    assert app.get_batch(keys) == [values[k] for k in keys]
    grown = lib._overflow
    assert grown is not first and grown.size >= 4 * 3 * MiB and first.fd == -1
    # Writes stage through it too.
    assert app.put("ov-put", values[keys[3]]) == 0
    assert reader.get("ov-put") == values[keys[3]]
    # Unused past OVERFLOW_IDLE_S: the next call lets it go.
    monkeypatch.setattr(standalone, "OVERFLOW_IDLE_S", 0.0)
    assert app.get_size(keys[0]) == len(values[keys[0]])
    assert lib._overflow is None and grown.fd == -1
    assert app.get_batch(keys[:1]) == [values[keys[0]]]
    assert srv.alive()


def test_copying_calls_read_and_write_the_applications_memory_in_place(master, client_process_factory,
                                                                       store_factory, monkeypatch):
    """Past the local buffer, copying gets and puts move the bytes straight
    between this process's memory and the owner's segment: the server's
    library copies them with process_vm_readv/writev (one copy), nothing is
    staged, no region is shared for them; a forked child is checked again
    and reads into its own memory."""
    # No lend regions: batch_get_buffer's copies past the local buffer go
    # to this process's memory too. And no copies from the segments here
    # (test_standalone_places.py): the server writes every get's bytes.
    monkeypatch.setenv("GOSTORE_HEAP_RETAIN_BYTES", "0")
    monkeypatch.setattr(standalone, "PLACES_MIN", 1 << 62)
    srv = client_process_factory(master)
    app = _dummy(srv.server_address, local=1 * MiB)
    reader = store_factory(master)
    lib = app._lib()
    values = {f"cm-{i}": _pattern(60 + i, 5 * MiB + 3 * i) for i in range(4)}
    for k, v in values.items():
        assert reader.put(k, v) == 0
    keys = list(values)
    sent_fds = _count_fds(lib, monkeypatch)
    assert app.get_batch(keys) == [values[k] for k in keys]
    assert lib._cross
    bufs = app.batch_get_buffer(keys)  # past the 1 MiB buffer: this process's memory
    assert [bytes(b) for b in bufs] == [values[k] for k in keys]
    del bufs
    big = _pattern(70, 9 * MiB + 5)
    assert app.put("cm-put", big) == 0
    assert reader.get("cm-put") == big
    assert app.put_batch(["cm-pb-0", "cm-pb-1"], [big[:3 * MiB], big[1:]]) == 0
    assert reader.get_batch(["cm-pb-0", "cm-pb-1"]) == [big[:3 * MiB], big[1:]]
    # Nothing staged: no overflow region, no region of a call's own.
    assert lib._overflow is None and sent_fds and not any(sent_fds)
    # A forked child: a session of its own, checked again.
    assert _in_forked_child(lambda: app.get_batch(keys[:2]) == [values[k] for k in keys[:2]] and lib._cross)
    assert app.get_batch(keys[:1]) == [values[keys[0]]]
    assert srv.alive()


def _stored_for_get_buffer(master: Any, client_process_factory: Any, store_factory: Any, local: int,
                           values: List[bytes]) -> Any:
    """(application store with a ``local``-byte buffer, keys, values, its
    gostore-client): the values put by another client of ``master``, under
    keys of their own."""
    srv = client_process_factory(master)
    app = _dummy(srv.server_address, local=local)
    reader = store_factory(master)
    keys = [f"gb-{local}-{i}" for i in range(len(values))]
    for k, v in zip(keys, values):
        assert reader.put(k, v) == 0
    return app, keys, values, srv


def test_get_buffer_copies_live_in_shared_memory(master, client_process_factory, store_factory, monkeypatch):
    """batch_get_buffer's copies take the local buffer while it has room,
    then a lend region shared with the server once and kept (the server
    reads straight into both, at memcpy speed), and give their room back
    when freed: the same batch again shares nothing new. A forked child
    lends from regions of its own, and the parent's copies keep their
    bytes."""
    app, keys, values, _ = _stored_for_get_buffer(master, client_process_factory, store_factory, 4 * MiB,
                                               [_pattern(40 + i, MiB + 17 * i) for i in range(5)])
    lib = app._lib()
    sent_fds = _count_fds(lib, monkeypatch)
    bufs = app.batch_get_buffer(keys)
    assert [bytes(b) for b in bufs] == values
    staging = lib._staging
    assert [staging.contains(b.ptr(), b.size()) for b in bufs] == [True, True, True, False, False]  # 3 MiB and a bit fill 4 MiB
    assert len(lib._lent) == 1 and all(lib._lent[0][0].contains(b.ptr(), b.size()) for b in bufs[3:])
    assert sent_fds.count(1) == 1  # the lend region, shared once
    assert lib._arena.alloc(MiB) is None
    del bufs
    import gc

    gc.collect()
    off = lib._arena.alloc(4 * MiB)  # every copy gave its room back
    assert off == 0
    lib._arena.free(off, 4 * MiB)
    sent_fds.clear()
    bufs = app.batch_get_buffer(keys)
    assert [bytes(b) for b in bufs] == values
    assert len(lib._lent) == 1 and not any(sent_fds)  # the kept region serves again
    def child_lends_its_own() -> bool:  # the parent's regions are not the child's to lend from
        theirs = [reg for reg, _ in lib._lent]
        got = app.batch_get_buffer(keys)
        return ([bytes(b) for b in got] == values and len(lib._lent) == 1 and lib._lent[0][0] not in theirs
                and all(lib._lent[0][0].contains(b.ptr(), b.size()) for b in got[3:]))

    assert _in_forked_child(child_lends_its_own)
    assert [bytes(b) for b in bufs] == values


def test_an_idle_lend_region_is_let_go(master, client_process_factory, store_factory, monkeypatch):
    """A lend region that holds no copy, and saw none made or freed for
    LEND_IDLE_S, is taken back from the server and unmapped at the next
    call: a burst of large copying reads does not keep its memory for the
    store's life. One that still holds a copy is kept, however old; the
    next large read makes a new one."""
    import gc

    from gostore import standalone

    app, keys, values, srv = _stored_for_get_buffer(master, client_process_factory, store_factory, 4 * MiB,
                                                    [_pattern(120 + i, MiB + 3 * i) for i in range(5)])
    lib = app._lib()

    def server_maps_lend() -> int:
        with open(f"/proc/{srv.proc.pid}/maps") as f:
            return sum("gostore-lend" in line for line in f)

    bufs = app.batch_get_buffer(keys)
    assert [bytes(b) for b in bufs] == values
    assert len(lib._lent) == 1 and server_maps_lend() >= 1
    region = lib._lent[0][0]
    monkeypatch.setattr(standalone, "LEND_IDLE_S", 0.0)
    assert app.get_size(keys[0]) == len(values[0])  # copies still in it: kept
    assert lib._lent and lib._lent[0][0] is region and region.fd != -1
    assert [bytes(b) for b in bufs] == values
    del bufs
    gc.collect()
    assert app.get_size(keys[0]) == len(values[0])  # empty and idle: let go
    assert lib._lent == [] and lib._lent_bytes == 0 and region.fd == -1
    assert server_maps_lend() == 0
    bufs = app.batch_get_buffer(keys)
    assert [bytes(b) for b in bufs] == values
    assert len(lib._lent) == 1 and lib._lent[0][0] is not region
    assert srv.alive()


def test_get_buffer_copies_past_the_lend_bound_live_in_private_memory(master, client_process_factory,
                                                                      store_factory, monkeypatch):
    """With GOSTORE_HEAP_RETAIN_BYTES below a lend region, copies past the
    local buffer are made in this process's own memory (the server writes
    them with cross memory), and still read right."""
    monkeypatch.setenv("GOSTORE_HEAP_RETAIN_BYTES", str(MiB))
    app, keys, values, _ = _stored_for_get_buffer(master, client_process_factory, store_factory, 2 * MiB,
                                               [_pattern(80 + i, MiB + 5 * i) for i in range(3)])
    lib = app._lib()
    bufs = app.batch_get_buffer(keys)
    assert [bytes(b) for b in bufs] == values
    assert lib._lent == []
    assert not any(lib._staging.contains(b.ptr(), b.size()) for b in bufs[1:])


def test_a_copy_that_cannot_be_made_gives_back_the_rooms_already_lent(master, client_process_factory,
                                                                     store_factory, monkeypatch):
    """batch_get_buffer past the local buffer, with no lend region allowed:
    the first copies take the local buffer and the next ones this process's
    own memory. When one of those cannot be made (MemoryError), the call
    fails with it, the rooms already taken come back, the pending get is
    ended, and the next call reads right."""
    from gostore import standalone

    monkeypatch.setenv("GOSTORE_HEAP_RETAIN_BYTES", "0")
    app, keys, values, srv = _stored_for_get_buffer(master, client_process_factory, store_factory, MiB,
                                                    [_pattern(150 + i, 300_000) for i in range(5)])
    lib = app._lib()
    private = standalone._Copy.private

    def refused(size: int) -> Any:
        raise MemoryError(f"no {size} bytes")

    monkeypatch.setattr(standalone._Copy, "private", staticmethod(refused))
    with pytest.raises(MemoryError):
        app.batch_get_buffer(keys)
    assert lib._arena._free == [(0, MiB)] and lib._buffers == {}
    monkeypatch.setattr(standalone._Copy, "private", private)
    bufs = app.batch_get_buffer(keys)
    assert [bytes(b) for b in bufs] == values
    assert srv.alive()


def test_a_small_tensor_batch_lends_nothing(master, client_process_factory, store_factory):
    """Tensors that fit the scratch buffer together are read with their
    lookup into a scratch in the local buffer and copied out by this
    process: they make no lend region, and the scratch's room is given
    back when the call returns."""
    import numpy as np

    srv = client_process_factory(master)
    app = _dummy(srv.server_address, local=MiB)
    writer = store_factory(master)
    arrays = [np.arange(256, dtype=np.int32) + i for i in range(4)]
    keys = [f"st-{i}" for i in range(len(arrays))]
    assert writer.batch_put_tensor(keys, arrays) == [0] * len(keys)
    got = app.batch_get_tensor(keys)
    assert all(t is not None and np.array_equal(np.asarray(t), want) for want, t in zip(arrays, got))
    lib = app._lib()
    assert lib._lent == [] and lib._arena._free == [(0, MiB)]


def test_lend_regions_growing_at_once_stay_within_the_bound(master, client_process_factory, monkeypatch):
    """Two threads that need a lend region at once, with room for one under
    GOSTORE_HEAP_RETAIN_BYTES: the second is refused while the first is
    still sharing its region (the room is reserved before the region is
    made), so the bound holds."""
    import threading

    from gostore import standalone

    monkeypatch.setenv("GOSTORE_HEAP_RETAIN_BYTES", str(standalone.LEND_CHUNK))
    srv = client_process_factory(master)
    app = _dummy(srv.server_address, local=MiB)
    lib = app._lib()
    assert app.is_exist("nothing") == 0  # the session is open
    entered, go = threading.Event(), threading.Event()
    share = lib._share

    def held_share(c: Any, r: Any) -> None:
        if threading.current_thread().name == "first":
            entered.set()
            assert go.wait(30)
        share(c, r)

    monkeypatch.setattr(lib, "_share", held_share)
    got: List[Any] = []
    first = threading.Thread(target=lambda: got.append(lib._grow_lent(MiB)), name="first")
    first.start()
    assert entered.wait(30)
    second = lib._grow_lent(MiB)  # while the first region is being shared
    go.set()
    first.join(30)
    assert second is None
    assert got and got[0] is not None and lib._lent == [got[0]]


@pytest.mark.parametrize("retain", [None, 0], ids=["lent", "private"])
def test_copying_tensor_reads_land_in_lend_regions(master, client_process_factory, store_factory, monkeypatch,
                                                   retain):
    """batch_get_tensor's arrays are lent from lend regions (the server
    writes them at memcpy speed), never from the local buffer, which other
    calls stage through: the room comes back when the last view of an
    array goes. With GOSTORE_HEAP_RETAIN_BYTES=0 they are this process's
    own memory. The values are right either way."""
    import gc

    import numpy as np

    if retain is not None:
        monkeypatch.setenv("GOSTORE_HEAP_RETAIN_BYTES", str(retain))
    srv = client_process_factory(master)
    app = _dummy(srv.server_address, local=4 * MiB)
    writer = store_factory(master)
    lib = app._lib()
    arrays = [np.arange(MiB // 2, dtype=np.float32) * (i + 1) for i in range(5)]  # 2 MiB each
    keys = [f"lt-{i}" for i in range(len(arrays))]
    assert writer.batch_put_tensor(keys, arrays) == [0] * len(keys)
    got = app.batch_get_tensor(keys)
    assert all(t is not None and np.array_equal(np.asarray(t), want) for want, t in zip(arrays, got))
    where = [np.asarray(t).ctypes.data for t in got]
    assert not any(lib._staging.contains(a, want.nbytes) for a, want in zip(where, arrays))
    if retain == 0:
        assert lib._lent == []
        return
    assert len(lib._lent) == 1
    region, arena = lib._lent[0]
    assert all(region.contains(a, want.nbytes) for a, want in zip(where, arrays))
    views = [np.asarray(t)[1:] for t in got]  # a view keeps its array's room
    del got
    gc.collect()
    assert arena.alloc(region.size) is None
    del views
    gc.collect()
    off = arena.alloc(region.size)  # every array gave its room back
    assert off == 0
    arena.free(off, region.size)


@pytest.mark.parametrize("cross", [True, False], ids=["cross-memory", "staged"])
def test_a_batch_of_small_values_comes_back_in_one_round_trip(master, client_process_factory, store_factory,
                                                               monkeypatch, cross):
    """get_batch and batch_get_buffer of values that fit the scratch buffer
    together are one call to the server (gs_get_packed: looked up and read
    at once), whether the server writes the application's memory itself or
    through the staging area; a batch past the scratch buffer takes a
    second call to finish."""
    from gostore import standalone
    from gostore.buffers.pins import SCRATCH_BYTES

    monkeypatch.setattr(standalone, "CROSS_MEMORY", cross)
    srv = client_process_factory(master)
    app = _dummy(srv.server_address, local=1 * MiB)
    reader = store_factory(master)
    lib = app._lib()
    sizes = [3, 4096, 4096, 65_537, 777]
    values = {f"one-rt-{i}": _pattern(80 + i, n) for i, n in enumerate(sizes)}
    for k, v in values.items():
        assert reader.put(k, v) == 0
    keys = list(values)
    assert app.get_size(keys[0]) == sizes[0]  # the session is up before counting
    assert lib._cross == cross
    frames = _count_fds(lib, monkeypatch)
    assert app.get_batch(keys[:2] + ["one-rt-missing"] + keys[2:]) == (
        [values[k] for k in keys[:2]] + [b""] + [values[k] for k in keys[2:]])
    assert len(frames) == 1
    # batch_get_buffer too: one round trip, copies in the local buffer.
    bufs = app.batch_get_buffer(["one-rt-missing"] + keys)
    assert bufs[0] is None and [bytes(b) for b in bufs[1:]] == [values[k] for k in keys]
    assert all(lib._staging.contains(b.ptr(), b.size()) for b in bufs[1:])
    assert len(frames) == 2
    del bufs
    big = _pattern(90, SCRATCH_BYTES)
    assert reader.put("one-rt-big", big) == 0
    assert app.get_batch([keys[0], "one-rt-big"]) == [values[keys[0]], big]
    assert len(frames) == 4
    bufs = app.batch_get_buffer([keys[0], "one-rt-big"])
    assert [bytes(b) for b in bufs] == [values[keys[0]], big]
    assert len(frames) == 6
    assert srv.alive()


@pytest.mark.parametrize("where", ["local-buffer", "lend-region", "private"])
def test_small_batches_are_read_into_shared_memory(master, client_process_factory, store_factory, monkeypatch,
                                                    where):
    """A batch of values that fit the scratch buffer together is read by the
    server into shared memory (the local buffer, else a lend region), where
    it writes at memcpy speed, not into this process's own memory (a
    cross-memory copy, one system call per value). get_batch gives the
    room back when it returns; batch_get_buffer's copies stay where they
    were read when each starts on ALIGN bytes there, one block for the
    batch, whose room goes back with the last copy; otherwise they are
    copied into aligned rooms and the scratch's room goes back at once. A
    forked child reads into its own local buffer. With no room to lend,
    the thread's own scratch serves."""
    import gc

    from gostore.buffers.pins import SCRATCH_BYTES
    from gostore.standalone.shm import ALIGN, round_up

    if where == "private":
        monkeypatch.setenv("GOSTORE_HEAP_RETAIN_BYTES", str(MiB))  # below a lend region
    srv = client_process_factory(master)
    local = MiB if where == "local-buffer" else 0
    app = _dummy(srv.server_address, local=local)
    reader = store_factory(master)
    lib = app._lib()

    def stored(name: str, sizes: List[int]) -> List[str]:
        keys = [f"small-{where}-{name}-{i}" for i in range(len(sizes))]
        for i, (k, n) in enumerate(zip(keys, sizes)):
            assert reader.put(k, _pattern(200 + i, n)) == 0
        return keys

    aligned = [4096, 4096, 128, 65_536, 64]
    keys = stored("aligned", aligned)
    values = [_pattern(200 + i, n) for i, n in enumerate(aligned)]
    scratches: List[Any] = []
    packed = lib.gs_get_packed

    def recording(h: int, n: int, keys_: bytes, lens: int, scratch: int, cap: int, *rest: Any) -> Any:
        scratches.append((scratch, cap))
        return packed(h, n, keys_, lens, scratch, cap, *rest)

    monkeypatch.setattr(lib, "gs_get_packed", recording)
    assert app.get_batch(keys + ["small-missing"]) == values + [b""]
    ((scratch, cap),) = scratches
    assert cap == SCRATCH_BYTES
    if where == "private":
        assert lib._region_of(scratch, cap) is None and lib._lent == []
        bufs = app.batch_get_buffer(keys)
        assert [bytes(b) for b in bufs] == values
        return
    assert lib._region_of(scratch, cap) is not None
    arena = lib._arena if local else lib._lent[0][1]

    def whole() -> bool:
        return arena._free == [(0, arena._size)]

    assert whole()  # get_batch gave its room back
    bufs = app.batch_get_buffer(keys)
    assert [bytes(b) for b in bufs] == values
    scratch, _ = scratches[-1]
    assert [b.ptr() - scratch for b in bufs] == [sum(aligned[:i]) for i in range(len(aligned))]  # read in place
    kept = bufs[2]
    del bufs
    gc.collect()
    assert not whole() and bytes(kept) == values[2]  # one copy holds the block
    del kept
    gc.collect()
    assert whole()
    # Values that would start off ALIGN bytes are copied into aligned rooms.
    odd = [4096, 100, 65_537, 3]
    keys = stored("odd", odd)
    bufs = app.batch_get_buffer(keys)
    assert [bytes(b) for b in bufs] == [_pattern(200 + i, n) for i, n in enumerate(odd)]
    assert all(b.ptr() % ALIGN == 0 for b in bufs)
    del bufs
    gc.collect()
    assert whole()
    # Past the scratch buffer (two round trips): one block of aligned rooms.
    large = [SCRATCH_BYTES // 2 + 1, SCRATCH_BYTES // 2, 5]
    keys = stored("large", large)
    bufs = app.batch_get_buffer(keys)
    assert [bytes(b) for b in bufs] == [_pattern(200 + i, n) for i, n in enumerate(large)]
    starts = [b.ptr() - bufs[0].ptr() for b in bufs]
    assert starts == [0, round_up(large[0]), round_up(large[0]) + round_up(large[1])]
    del bufs
    gc.collect()
    assert whole()
    if where == "local-buffer":
        # A forked child has no local buffer until its first call connects.
        keys = stored("child", aligned)

        def child_reads_into_its_local_buffer() -> bool:
            got = app.get_batch(keys)
            return (got == values and lib._lent == [] and lib._staging is not None
                    and lib._region_of(scratches[-1][0], SCRATCH_BYTES) is lib._staging)

        assert _in_forked_child(child_reads_into_its_local_buffer)
    assert srv.alive()


def test_help_lists_every_flag_and_its_default():
    from gostore.standalone.server import _FLAGS
    proc = subprocess.run([sys.executable, "-m", "gostore.client_server", "--help"],
                          capture_output=True, text=True, timeout=30)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.startswith("Usage: gostore-client [flags]"), proc.stdout
    for name, (default, typ, _text) in _FLAGS.items():
        assert f"--{name} ({typ.__name__}) default: {json.dumps(default)}\n" in proc.stdout, name
    assert '--host (str) default: "127.0.0.1"' in proc.stdout


def _client_args(master, ipc: str, *extra: str) -> List[str]:
    return [sys.executable, "-m", "gostore.client_server", "--port=0", f"--master_server_address={master.addr}",
            "--global_segment_size=16MB", "--metadata_server=P2PHANDSHAKE", f"--ipc_socket_path={ipc}", *extra]


def test_a_second_client_on_a_live_socket_is_refused(master, client_process_factory, tmp_path):
    ipc = str(tmp_path / "client.sock")
    first = client_process_factory(master, ipc_path=ipc)
    segments = len(master.segments())
    proc = subprocess.run(_client_args(master, ipc, "--host=127.0.0.1"), capture_output=True, text=True, timeout=60)
    assert proc.returncode == 1, (proc.stdout, proc.stderr)
    assert f"--ipc_socket_path {ipc} is served by another gostore-client (pid {first.proc.pid})" in proc.stderr, \
        proc.stderr
    assert '"ready"' not in proc.stdout
    assert len(master.segments()) == segments  # refused before its setup: nothing joined the pool
    # The first one still serves its applications.
    app = _dummy(first.server_address)
    assert app.put("still-served", b"v" * 100) == 0 and app.get("still-served") == b"v" * 100
    app.close()
    # Once it is dead, its socket file is taken over.
    first.kill()
    assert os.path.exists(ipc)
    second = client_process_factory(master, ipc_path=ipc)
    app = _dummy(second.server_address)
    cfg = ReplicateConfig()
    cfg.preferred_segment = second.segment  # the dead one's is listed until its client_ttl passes
    assert app.put("after", b"w" * 10, cfg) == 0 and app.get("after") == b"w" * 10
    app.close()


def test_a_non_socket_path_is_not_replaced(master, tmp_path):
    path = tmp_path / "notes.txt"
    path.write_text("keep me")
    proc = subprocess.run(_client_args(master, str(path)), capture_output=True, text=True, timeout=60)
    assert proc.returncode == 1 and "exists and is not a socket" in proc.stderr, proc.stderr
    assert path.read_text() == "keep me"


def _listening_addresses(port: int) -> List[str]:
    """The local addresses of the TCP sockets listening on ``port``."""
    found = []
    for table, width in (("/proc/net/tcp", 8), ("/proc/net/tcp6", 32)):
        with open(table) as f:
            for line in f.readlines()[1:]:
                local, state = line.split()[1], line.split()[3]
                addr, p = local.split(":")
                if state == "0A" and int(p, 16) == port:
                    found.append(addr)
    return found


def test_the_tcp_port_listens_on_loopback_by_default(master, tmp_path):
    from conftest import _readline_with_timeout
    proc = subprocess.Popen(_client_args(master, str(tmp_path / "c.sock")), stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)
    try:
        line = _readline_with_timeout(proc.stdout, 30.0)
        assert '"ready"' in line, proc.stderr.read() if proc.poll() is not None else line
        port = json.loads(line)["port"]
        assert _listening_addresses(port) == ["0100007F"]  # 127.0.0.1, and nothing else
    finally:
        proc.terminate()
        proc.wait(30)


def test_a_closed_application_store_logs_a_line_not_a_flood(master, client_process_factory, caplog):
    srv = client_process_factory(master)
    app = _dummy(srv.server_address)
    assert app.close() == 0
    caplog.clear()
    for _ in range(100):
        assert app.put("k", b"x") == -1 and app.get("k") == b""
    lines = [r.getMessage() for r in caplog.records]
    assert len(lines) == 1 and "store is closed: put_batch refused" in lines[0], lines


def test_setup_dummy_pointed_at_the_master_says_so(master, caplog):
    store = MooncakeDistributedStore()
    with caplog.at_level("ERROR", logger="gostore"):
        assert store.setup_dummy(MiB, MiB, master.addr) == -1
    assert f"{master.addr} answered nothing in 5 s: is it gostore-client's --port (not the master's)?" in caplog.text
