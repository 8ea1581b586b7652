"""A storage node restarted under its old name (the same ``local_hostname``
host:port, as a pod restart brings it back) takes its dead predecessor's
segment over at once, and its SSD tier claims the disk copies back,
without waiting for ``client_ttl``; a live client's segment is never taken.

Real parts: the master binary, client processes killed with SIGKILL or
stopped with SIGSTOP, real SSD-tier files; network namespaces (root) for
two live clients of one name on two "hosts"."""

from __future__ import annotations

import os
import re
import socket
import time

import pytest

from conftest import wait_until
from test_ssd_tier import OBJ, SEGMENT, on_disk, put_retrying, tier_env, value

TTL = 30  # client_ttl (s): long, so "well under it" is plain


def _free_name() -> str:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return f"127.0.0.1:{s.getsockname()[1]}"


def _mounts(master, name: str) -> list:
    """The clients the master's log says mounted segment ``name``, in order
    (a master in another network namespace: its HTTP port is not reachable)."""
    return re.findall(r'msg="segment mounted" [^\n]*?name=' + re.escape(name) + r' id=\d+ size=\d+ client=(\w+)',
                      master.log())


def _holder(master, name: str) -> str:
    """The client id the master has for segment ``name`` ("" if none)."""
    return next((s["ClientID"] for s in master.segments() if s["Name"] == name), "")


def test_a_node_killed_and_restarted_under_its_name_takes_its_segment_and_disk_copies(
        master_factory, peer_factory, store_factory, tmp_path):
    m = master_factory(enable_offload=True, tick_interval_ms=20, client_ttl=TTL)
    ssd = str(tmp_path / "ssd")
    os.mkdir(ssd)
    env = tier_env("bucket_storage_backend", False)
    name = _free_name()
    holder = peer_factory(m, segment=str(SEGMENT), ssd=ssd, env=env, hostname=name)
    assert holder.hostname == name
    writer = store_factory(m, segment=0)  # every object lands on the holder
    keys = [f"node/{i}" for i in range(8)]
    for i, k in enumerate(keys):
        put_retrying(writer, k, value(i))
    wait_until(lambda: all(on_disk(m, k) for k in keys), timeout=20, what="every object on disk")
    dead = _holder(m, name)
    dead_disk = m.query_key(keys[0])["disk"]

    holder.kill()  # SIGKILL: no leave; the master still counts it alive
    started = time.monotonic()
    restarted = peer_factory(m, segment=str(SEGMENT), ssd=ssd, env=env, hostname=name)
    took = time.monotonic() - started
    assert restarted.hostname == name
    assert took < TTL / 3, f"setup took {took:.1f}s against a {TTL}s client_ttl"

    # The master's view: one segment of that name, the new client's; the
    # dead one retired (not expired: no client_ttl went by), counted once.
    new = _holder(m, name)
    assert new and new != dead
    assert m.segment_names().count(name) == 1
    assert m.metric("gostore_master_clients_taken_over_total") == 1
    assert m.metric("gostore_master_clients_expired_total") == 0
    assert m.metric("gostore_master_clients") == 2  # the writer and the restarted node
    assert f"dead_client={dead}" in m.log() and "segment taken over" in m.log()

    # Its SSD tier claimed every disk copy: served by the new process, bytes intact.
    assert "SSD tier recovered" in restarted.log()
    wait_until(lambda: all(m.query_key(k)["disk"] not in ("", dead_disk) for k in keys), timeout=10,
               what="every disk copy bound to the new process")
    for i, k in enumerate(keys):
        assert writer.get(k) == value(i), f"{k} not readable after the restart"
    # The node stores new objects under its name.
    assert restarted.put("node/after", b"after the restart" * 1000) == 0
    assert writer.get("node/after") == b"after the restart" * 1000


def test_a_stopped_node_keeps_its_segment(master_factory, peer_factory):
    """SIGSTOPped, it still holds its port: a second client given the same
    name cannot bind it, so it cannot claim the name (it takes a free port,
    as Mooncake's setup does), and the stopped one's segment stays its own."""
    m = master_factory(client_ttl=TTL)
    name = _free_name()
    first = peer_factory(m, hostname=name)
    assert first.put("stopped/k", b"kept" * 1000, preferred_segment=name) == 0
    owner = _holder(m, name)
    with first.suspended():
        second = peer_factory(m, hostname=name)
        assert second.hostname != name
        assert _holder(m, name) == owner
    assert m.metric("gostore_master_clients_taken_over_total") == 0
    assert first.get("stopped/k") == b"kept" * 1000
    assert second.get("stopped/k") == b"kept" * 1000


def test_a_live_node_of_the_same_name_on_another_host_is_refused(launcher, hosts, secret):  # noqa: F811
    """Two "hosts" (network namespaces) whose clients both call themselves
    127.0.0.1:PORT: each can bind it, so only the holder's silence tells.
    While the first pings, the second gets -102 and one line naming it;
    once the first is killed, the name is free within seconds."""
    h0, h1, h2 = hosts
    m = launcher.master(wrap=h0["wrap"], address=h0["ip"], client_ttl=TTL, auth_secret_file=secret)
    name = _free_name()

    def node(host, **kw):
        return launcher.peer(m.addr, hostname=name, transport="tcp", wrap=host["wrap"],
                             env={"GOSTORE_AUTH_SECRET_FILE": secret}, **kw)

    first = node(h1)
    assert first.hostname == name
    live = wait_until(lambda: _mounts(m, name), what="the first mount in the master's log")[0]
    second = node(h2, expect_ready=False)
    assert second.setup_rc == -102
    lines = [ln for ln in second.log().splitlines() if "mount segment failed" in ln]
    assert len(lines) == 1, second.log()
    assert f"live client {live}" in lines[0], lines[0]
    assert _mounts(m, name) == [live] and "segment taken over" not in m.log()

    first.kill()
    started = time.monotonic()
    third = node(h2)
    assert third.hostname == name and time.monotonic() - started < TTL / 3
    assert f"dead_client={live}" in m.log()
    assert len(_mounts(m, name)) == 2 and _mounts(m, name)[1] != live
