"""The client HTTP server (setup's enable_client_http_server): /metrics,
/health and /metrics/summary of a real client against the real
``gostore-master``, counting what the test did; tenant_id as Mooncake
0.3.13 treats it (carried, isolating nothing)."""

from __future__ import annotations

import ctypes
import json
import re
import socket
import urllib.error
import urllib.request

import pytest

from conftest import MiB, wait_until
from gostore import MooncakeDistributedStore

MODE = 'client_mode="real"'


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("0.0.0.0", 0))
        return s.getsockname()[1]


def fetch(port: int, path: str):
    """(status, content type, body) of GET http://127.0.0.1:port/path."""
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}{path}", timeout=10) as r:
            return r.status, r.headers.get("Content-Type", ""), r.read().decode()
    except urllib.error.HTTPError as e:
        return e.code, e.headers.get("Content-Type", ""), e.read().decode()


def scrape(port: int) -> dict:
    """/metrics as {"name{labels}": value}."""
    status, ctype, body = fetch(port, "/metrics")
    assert status == 200 and ctype.startswith("text/plain"), (status, ctype)
    out = {}
    for line in body.splitlines():
        if line and not line.startswith("#"):
            name, _, value = line.rpartition(" ")
            out[name] = float(value)
    return out


def series(m: dict, name: str, **labels) -> float:
    labels_text = ",".join([MODE] + [f'{k}="{v}"' for k, v in sorted(labels.items())])
    return m.get(f"{name}{{{labels_text}}}", 0.0)


@pytest.fixture
def http_store(master, launcher):
    """A client with the HTTP server on a free port; closed after the test."""
    port = free_port()
    s = MooncakeDistributedStore()
    launcher.stores.append(s)
    rc = s.setup("127.0.0.1", "P2PHANDSHAKE", 64 * MiB, 16 * MiB, "tcp", "", master.addr,
                 None, False, "", "team-a", True, port)
    assert rc == 0
    return s, port


def test_metrics_count_what_the_client_did(http_store, peer_factory, master):
    s, port = http_store
    peer_factory(master)  # a second segment: some replicas land in another process
    values = {f"k{i}": bytes([i]) * (1000 * (i + 1)) for i in range(6)}
    put_bytes = sum(map(len, values.values()))
    assert s.put("k0", values["k0"]) == 0
    assert s.put_batch(["k1", "k2"], [values["k1"], values["k2"]]) == 0
    buf = ctypes.create_string_buffer(64 * 1024)
    addr = ctypes.addressof(buf)
    assert s.register_buffer(addr, len(buf)) == 0
    try:
        for key in ("k3", "k4", "k5"):
            ctypes.memmove(addr, values[key], len(values[key]))
            assert s.put_from(key, addr, len(values[key])) == 0
        ctypes.memset(addr, 0, len(buf))
        assert s.get_into("k4", addr, len(buf)) == len(values["k4"])
        assert ctypes.string_at(addr, len(values["k4"])) == values["k4"]
    finally:
        assert s.unregister_buffer(addr) == 0
    assert s.get("k0") == values["k0"]
    assert s.get_batch(["k1", "k2"]) == [values["k1"], values["k2"]]
    got = s.get_buffer("k5")
    assert bytes(got) == values["k5"]
    del got
    assert s.get("missing") == b""
    read_bytes = len(values["k4"]) + len(values["k0"]) + len(values["k1"]) + len(values["k2"]) + len(values["k5"])

    m = scrape(port)
    for name in ("mooncake_client_rpc_count", "mooncake_client_rpc_latency_bucket",
                 "mooncake_client_rpc_latency_sum", "mooncake_client_rpc_latency_count",
                 "mooncake_transfer_read_bytes", "mooncake_transfer_write_bytes",
                 "mooncake_transfer_get_latency_bucket", "mooncake_transfer_put_latency_bucket",
                 "mooncake_transfer_read_operation_count", "mooncake_transfer_read_operation_bytes",
                 "mooncake_transfer_read_operation_latency_bucket",
                 "mooncake_transfer_write_operation_count", "mooncake_transfer_write_operation_bytes",
                 "mooncake_transfer_write_operation_latency_bucket"):
        assert any(k.startswith(name + "{") for k in m), f"{name} not served"
    # Replicas are single: every byte put was written once, every byte got read once.
    assert series(m, "mooncake_transfer_write_bytes") == put_bytes
    assert series(m, "mooncake_transfer_read_bytes") == read_bytes
    # One PutStart and one PutEnd per put call (a batch is one call).
    assert series(m, "mooncake_client_rpc_count", rpc_name="PutStart") == 5
    assert series(m, "mooncake_client_rpc_count", rpc_name="PutEnd") == 5
    assert series(m, "mooncake_client_rpc_latency_count", rpc_name="PutStart") == 5
    # get_into, get, get_batch, get_buffer and the miss: one lookup each
    assert series(m, "mooncake_client_rpc_count", rpc_name="GetReplicas") == 5
    assert series(m, "mooncake_client_rpc_count", rpc_name="MountSegment") == 1
    # Transfer latencies: single-object writes and reads vs batches; the
    # miss moved nothing.
    assert series(m, "mooncake_transfer_put_latency_count") == 4
    assert series(m, "mooncake_transfer_batch_put_latency_count") == 1
    assert series(m, "mooncake_transfer_get_latency_count") == 3
    assert series(m, "mooncake_transfer_batch_get_latency_count") == 1
    # Interface-level calls, as the client names them.
    wrote = {"put": (4, put_bytes - len(values["k1"]) - len(values["k2"])),
             "put_batch": (1, len(values["k1"]) + len(values["k2"]))}
    for op, (count, nbytes) in wrote.items():
        assert series(m, "mooncake_transfer_write_operation_count", op_name=op) == count, op
        assert series(m, "mooncake_transfer_write_operation_bytes", op_name=op) == nbytes, op
        assert series(m, "mooncake_transfer_write_operation_latency_count", op_name=op) == count, op
    read = {"get": (2, len(values["k4"]) + len(values["k0"])),
            "batch_get": (1, len(values["k1"]) + len(values["k2"])),
            "get_buffer": (1, len(values["k5"]))}
    for op, (count, nbytes) in read.items():
        assert series(m, "mooncake_transfer_read_operation_count", op_name=op) == count, op
        assert series(m, "mooncake_transfer_read_operation_bytes", op_name=op) == nbytes, op
    # Latencies are in microseconds, under Mooncake's bucket bounds.
    assert series(m, "mooncake_transfer_put_latency_bucket", le="50") <= 4
    assert series(m, "mooncake_transfer_put_latency_bucket", le="+Inf") == 4
    assert series(m, "mooncake_transfer_put_latency_sum") > 0

    # One more put moves the counters by exactly that put.
    assert s.put("k6", b"x" * 777) == 0
    m2 = scrape(port)
    assert series(m2, "mooncake_transfer_write_bytes") == put_bytes + 777
    assert series(m2, "mooncake_client_rpc_count", rpc_name="PutStart") == 6
    assert series(m2, "mooncake_transfer_write_operation_count", op_name="put") == 5

    status, ctype, summary = fetch(port, "/metrics/summary")
    assert status == 200 and ctype.startswith("text/plain")
    for word in ("team-a", "PutStart", "GetReplicas", "put_batch", "batch_get", "get_buffer"):
        assert word in summary, f"summary lacks {word!r}:\n{summary}"


def test_health_root_and_close(http_store):
    s, port = http_store
    status, ctype, body = fetch(port, "/health")
    assert (status, ctype, json.loads(body)) == (200, "application/json", {"status": "healthy", "code": 0})
    assert fetch(port, "/")[0] == 404
    assert fetch(port, "/metrics/")[0] == 404
    assert s.close() == 0
    with pytest.raises(ConnectionRefusedError):
        socket.create_connection(("127.0.0.1", port), timeout=5).close()


def test_health_says_when_the_master_is_gone(master_factory, launcher):
    m = master_factory()
    port = free_port()
    s = MooncakeDistributedStore()
    launcher.stores.append(s)
    assert s.setup("127.0.0.1", "P2PHANDSHAKE", 0, 16 * MiB, "tcp", "", m.addr,
                   enable_client_http_server=True, client_http_port=port) == 0
    m.kill()
    # The client notices at its next heartbeat; /health follows health_check.
    wait_until(lambda: s.health_check() == 2, timeout=10, what="the client to miss the master")
    status, _, body = fetch(port, "/health")
    assert (status, json.loads(body)) == (503, {"status": "master_unreachable", "code": 2})


def test_port_taken_or_invalid(master, launcher, capfd):
    with socket.socket() as taken:
        taken.bind(("0.0.0.0", 0))
        taken.listen()
        port = taken.getsockname()[1]
        s = MooncakeDistributedStore()
        launcher.stores.append(s)
        # As Mooncake: a taken port is logged and setup goes on without the server.
        assert s.setup("127.0.0.1", "P2PHANDSHAKE", 16 * MiB, 16 * MiB, "tcp", "", master.addr,
                       enable_client_http_server=True, client_http_port=port) == 0
        assert s.put("k", b"v") == 0 and s.get("k") == b"v"
        assert "client HTTP server not started" in capfd.readouterr().err
    for bad in (0, -1, 65536):
        s = MooncakeDistributedStore()
        launcher.stores.append(s)
        assert s.setup("127.0.0.1", "P2PHANDSHAKE", 0, 16 * MiB, "tcp", "", master.addr,
                       enable_client_http_server=True, client_http_port=bad) == -600, bad
        # With the server off the port is not looked at.
        assert s.setup("127.0.0.1", "P2PHANDSHAKE", 0, 16 * MiB, "tcp", "", master.addr,
                       enable_client_http_server=False, client_http_port=bad) == 0, bad
        assert s.close() == 0


def test_dict_form_turns_the_server_on(master, launcher):
    port = free_port()
    s = MooncakeDistributedStore()
    launcher.stores.append(s)
    base = {"local_hostname": "127.0.0.1", "metadata_server": "P2PHANDSHAKE",
            "global_segment_size": 0, "master_server_addr": master.addr}
    assert s.setup(dict(base, client_http_port="x")) == -600
    assert s.setup(dict(base, enable_client_http_server="yes", client_http_port=str(port),
                        tenant_id="t", ipc_socket_path="/nonexistent/mc.sock")) == 0
    assert fetch(port, "/health")[0] == 200
    assert s.close() == 0


def test_tenants_share_keys_as_in_mooncake(master, launcher):
    """Mooncake 0.3.13 isolates nothing by tenant_id; neither does gostore."""
    a, b = MooncakeDistributedStore(), MooncakeDistributedStore()
    launcher.stores += [a, b]
    args = ("127.0.0.1", "P2PHANDSHAKE", 16 * MiB, 16 * MiB, "tcp", "", master.addr)
    assert a.setup(*args, tenant_id="tenant-a") == 0
    assert b.setup(*args, None, False, "", "tenant-b") == 0
    assert a.put("shared", b"from-a") == 0
    assert b.get("shared") == b"from-a"
    assert b.put("shared-b", b"from-b") == 0
    assert a.get("shared-b") == b"from-b"


def test_spot_reads_are_counted_and_never_serve_a_replaced_object(master, launcher, monkeypatch):
    """Over TCP a client reads a key it wrote from where it wrote it while
    it asks the master; the series gostore_client_spot_reads{,_confirmed}
    count those reads. Another client's upsert in place since the write is
    seen (the spot's read is turned down), and a client that never wrote
    or read the key reads it the usual way."""
    monkeypatch.setenv("GOSTORE_TRANSPORT", "tcp")  # read by setup, for this process' stores
    launcher.peer(master, transport="tcp")  # the only segment, in another process
    stores = []
    for _ in range(2):
        port = free_port()
        s = MooncakeDistributedStore()
        launcher.stores.append(s)
        assert s.setup("127.0.0.1", "P2PHANDSHAKE", 0, 16 * MiB, "tcp", "", master.addr,
                       None, False, "", "default", True, port) == 0
        stores.append((s, port))
    (writer, wport), (other, oport) = stores

    def spots(port: int) -> tuple:
        m = scrape(port)
        return series(m, "gostore_client_spot_reads"), series(m, "gostore_client_spot_reads_confirmed")

    v1, v2 = bytes(range(256)) * 16, bytes(reversed(range(256))) * 16
    assert writer.put("k", v1) == 0
    assert writer.get("k") == v1
    assert spots(wport) == (1, 1)
    assert other.get("k") == v1  # no spot: it neither wrote nor read the key
    assert spots(oport) == (0, 0)
    assert other.upsert("k", v2) == 0  # in place: same size, same range, a new write
    assert writer.get("k") == v2
    assert spots(wport) == (2, 1)
    buf = ctypes.create_string_buffer(len(v2))
    assert writer.register_buffer(ctypes.addressof(buf), len(buf)) == 0
    assert writer.get_into("k", ctypes.addressof(buf), len(buf)) == len(v2)
    assert buf.raw == v2
    assert spots(wport) == (3, 2)  # the spot the last get found
    assert writer.unregister_buffer(ctypes.addressof(buf)) == 0
