"""Lifecycle: setup() forms, health_check(), get_hostname(), close()."""

from __future__ import annotations

import re
import socket

import pytest

from conftest import MiB, wait_until
from gostore import ErrorCode, MooncakeDistributedStore, ReplicateConfig


def _segment(master, name):
    for s in master.segments():
        if s["Name"] == name:
            return s
    return None


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_setup_positional_with_size_strings_mounts_segment_of_that_size(master):
    s = MooncakeDistributedStore()
    try:
        assert s.setup("127.0.0.1", "P2PHANDSHAKE", "32MB", "16MB", "tcp", "", master.addr) == 0
        assert s.health_check() == 0
        seg = _segment(master, s.get_hostname())
        assert seg is not None, master.segments()
        assert seg["Size"] == 32 * MiB
    finally:
        s.close()


def test_setup_keyword_arguments_in_any_order(master):
    s = MooncakeDistributedStore()
    try:
        rc = s.setup(
            master_server_addr=master.addr,
            rdma_devices="",
            protocol="tcp",
            local_buffer_size=16 * MiB,
            global_segment_size=24 * MiB,
            metadata_server="P2PHANDSHAKE",
            local_hostname="127.0.0.1",
        )
        assert rc == 0
        seg = _segment(master, s.get_hostname())
        assert seg is not None and seg["Size"] == 24 * MiB
    finally:
        s.close()


def test_setup_mixed_positional_and_keyword_with_engine_none(master):
    s = MooncakeDistributedStore()
    try:
        rc = s.setup("127.0.0.1", "P2PHANDSHAKE", 8 * MiB, 8 * MiB, "tcp", "",
                     master_server_addr=master.addr, engine=None)
        assert rc == 0
        assert s.health_check() == 0
    finally:
        s.close()


@pytest.mark.parametrize("addr_key", ["master_server_addr", "master_server_address"])
def test_setup_dict_form_parses_lowercase_size_strings(master, addr_key):
    s = MooncakeDistributedStore()
    try:
        rc = s.setup({
            "local_hostname": "127.0.0.1",
            "metadata_server": "P2PHANDSHAKE",
            "global_segment_size": "48mb",
            "local_buffer_size": "16MB",
            "protocol": "tcp",
            addr_key: master.addr,
        })
        assert rc == 0
        seg = _segment(master, s.get_hostname())
        assert seg is not None and seg["Size"] == 48 * MiB
        assert s.put("dict-form/k", b"v") == 0 and s.get("dict-form/k") == b"v"
    finally:
        s.close()


def test_setup_dict_form_defaults_to_16mib_segment(master):
    s = MooncakeDistributedStore()
    try:
        assert s.setup({"master_server_addr": master.addr}) == 0
        host = s.get_hostname()
        assert host.startswith("127.0.0.1:")
        seg = _segment(master, host)
        assert seg is not None and seg["Size"] == 16 * MiB
    finally:
        s.close()


def test_setup_zero_segment_is_pure_consumer(master, peer_factory):
    p = peer_factory(master, segment="32MB")
    s = MooncakeDistributedStore()
    try:
        assert s.setup("127.0.0.1", "P2PHANDSHAKE", 0, 16 * MiB, "tcp", "", master.addr) == 0
        # a pure consumer contributes nothing: its name is not a segment
        assert master.segment_names() == [p.hostname]
        assert s.put("consumer/k", b"x" * 1000) == 0
        info = master.query_key("consumer/k")
        assert [r["segment"] for r in info["replicas"]] == [p.hostname]
        assert p.get("consumer/k") == b"x" * 1000
    finally:
        s.close()


def test_setup_unknown_kwarg_raises_type_error_and_store_stays_usable(master):
    s = MooncakeDistributedStore()
    with pytest.raises(TypeError):
        s.setup("127.0.0.1", "P2PHANDSHAKE", 16 * MiB, 16 * MiB, "tcp", "", master.addr,
                no_such_option=True)
    assert s.health_check() == 1
    try:
        assert s.setup("127.0.0.1", "P2PHANDSHAKE", 16 * MiB, 16 * MiB, "tcp", "",
                       master.addr) == 0
    finally:
        s.close()


def test_setup_missing_required_argument_raises_type_error():
    s = MooncakeDistributedStore()
    with pytest.raises(TypeError):
        s.setup("127.0.0.1", "P2PHANDSHAKE", 16 * MiB, 16 * MiB, "tcp", "")
    with pytest.raises(TypeError):
        s.setup(local_hostname="127.0.0.1")


def test_health_check_is_1_before_setup_0_after_and_1_after_close(master):
    s = MooncakeDistributedStore()
    assert s.health_check() == 1
    assert s.get_hostname() == ""
    assert s.setup("127.0.0.1", "P2PHANDSHAKE", 16 * MiB, 16 * MiB, "tcp", "", master.addr) == 0
    assert s.health_check() == 0
    assert s.close() == 0
    assert s.health_check() == 1
    assert s.close() == 0  # idempotent


def test_close_unmounts_segment_and_later_calls_fail_softly(master):
    s = MooncakeDistributedStore()
    assert s.setup("127.0.0.1", "P2PHANDSHAKE", 16 * MiB, 16 * MiB, "tcp", "", master.addr) == 0
    host = s.get_hostname()
    assert host in master.segment_names()
    assert s.put("closed/k", b"abc") == 0
    assert s.close() == 0
    assert host not in master.segment_names()
    # a closed store answers with errors, never raises
    assert s.put("closed/k2", b"abc") < 0
    assert s.get("closed/k") == b""
    assert s.get_buffer("closed/k") is None


def test_health_check_is_2_after_master_killed(master_factory, store_factory):
    m = master_factory()
    s = store_factory(m, segment=8 * MiB)
    assert s.health_check() == 0
    m.kill()
    wait_until(lambda: s.health_check() == 2, timeout=15, what="health_check() == 2")
    # operations fail with an error code instead of hanging or raising
    assert s.put("dead-master/k", b"v") < 0
    assert s.get("dead-master/k") == b""


def test_get_hostname_is_host_colon_port_in_default_range(master):
    stores = [MooncakeDistributedStore() for _ in range(2)]
    try:
        names = []
        for s in stores:
            assert s.setup("127.0.0.1", "P2PHANDSHAKE", 8 * MiB, 8 * MiB, "tcp", "",
                           master.addr) == 0
            name = s.get_hostname()
            m = re.fullmatch(r"127\.0\.0\.1:(\d+)", name)
            assert m, name
            assert 12300 <= int(m.group(1)) <= 14300, name
            names.append(name)
        assert names[0] != names[1]
        assert sorted(master.segment_names()) == sorted(names)
    finally:
        for s in stores:
            s.close()


def test_setup_against_dead_master_returns_negative(master_factory):
    m = master_factory()
    addr = m.addr
    m.kill()
    s = MooncakeDistributedStore()
    rc = s.setup("127.0.0.1", "P2PHANDSHAKE", 8 * MiB, 8 * MiB, "tcp", "", addr)
    assert rc < 0
    assert s.health_check() != 0
    assert s.put("k", b"v") < 0


def test_setup_against_port_with_no_listener_returns_negative():
    s = MooncakeDistributedStore()
    rc = s.setup("127.0.0.1", "P2PHANDSHAKE", 8 * MiB, 8 * MiB, "tcp", "",
                 f"127.0.0.1:{_free_port()}")
    assert rc < 0
    assert rc in {int(c) for c in ErrorCode}  # a contract code, not a random number


@pytest.mark.parametrize("metadata_server", [
    "P2PHANDSHAKE", "http://127.0.0.1:8080/metadata", "127.0.0.1:2379", "etcd://127.0.0.1:2379",
])
def test_setup_accepts_any_metadata_server_form(master, metadata_server):
    """Segment metadata lives in the master: the value may be ignored, never rejected."""
    s = MooncakeDistributedStore()
    try:
        assert s.setup("127.0.0.1", metadata_server, 8 * MiB, 8 * MiB, "tcp", "", master.addr) == 0
        assert s.put("metadata-form/" + metadata_server, b"v") == 0
        assert s.get("metadata-form/" + metadata_server) == b"v"
    finally:
        s.close()


def test_setup_with_explicit_port_uses_it(master):
    port = _free_port()
    s = MooncakeDistributedStore()
    try:
        assert s.setup(f"127.0.0.1:{port}", "P2PHANDSHAKE", 8 * MiB, 8 * MiB, "tcp", "",
                       master.addr) == 0
        assert s.get_hostname() == f"127.0.0.1:{port}"
        assert f"127.0.0.1:{port}" in master.segment_names()
    finally:
        s.close()


def test_setup_with_invalid_values_returns_negative(master):
    for args in [
        ("127.0.0.1", "P2PHANDSHAKE", "notasize", "8MB", "tcp", "", master.addr),
        ("127.0.0.1", "P2PHANDSHAKE", "8MB", "8MB", "carrier-pigeon", "", master.addr),
        ("127.0.0.1", "P2PHANDSHAKE", -1, "8MB", "tcp", "", master.addr),
    ]:
        s = MooncakeDistributedStore()
        assert s.setup(*args) < 0, args
        assert s.health_check() == 1, args
        assert s.put("invalid-setup/k", b"v") < 0
    assert master.segment_names() == []


def test_a_port_in_use_in_local_hostname_falls_back_to_a_free_one(master, caplog):
    """Two clients named with one host:port (Mooncake's tests do this): the
    second gets a free port, logs why, and both serve their segments."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    a, b = MooncakeDistributedStore(), MooncakeDistributedStore()
    try:
        name = f"127.0.0.1:{port}"
        assert a.setup(name, "P2PHANDSHAKE", 16 << 20, 16 << 20, "tcp", "", master.addr) == 0
        assert b.setup(name, "P2PHANDSHAKE", 16 << 20, 16 << 20, "tcp", "", master.addr) == 0
        assert a.get_hostname() == name
        assert b.get_hostname() != name and b.get_hostname().startswith("127.0.0.1:")
        cfg = ReplicateConfig()
        cfg.preferred_segment = b.get_hostname()
        assert a.put("port-reuse", b"on b's segment", cfg) == 0
        assert b.get("port-reuse") == b"on b's segment"
    finally:
        a.close()
        b.close()
