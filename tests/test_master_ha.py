"""High availability with the real parts: a three-member etcd cluster
(Debian's etcd-server) on loopback, two ``gostore-master`` processes with
``--enable_ha``, and client processes that name the master as
``etcd://...``. kill -9 the leader while the clients hold objects: the
standby takes over, every acknowledged object reads back with its bytes
from the other client, writes work again, and nothing unacknowledged
appears."""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import time
import urllib.request

import pytest

from conftest import Master, _die_with_parent, wait_until
from gostore import MooncakeDistributedStore

ETCD = shutil.which("etcd")
pytestmark = pytest.mark.skipif(ETCD is None, reason="etcd-server is not installed (make test installs it as root)")


def _port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class EtcdCluster(str):
    """The endpoints ("a;b;c"), and the members' processes to stop and
    start again."""

    def __new__(cls, endpoints: str, procs):
        self = super().__new__(cls, endpoints)
        self.procs = procs
        self.args = [p.args for p in procs]
        return self

    def stop(self, i: int) -> None:
        self.procs[i].kill()
        self.procs[i].wait()

    def start(self, i: int) -> None:
        self.procs[i] = subprocess.Popen(self.args[i], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                                         preexec_fn=_die_with_parent)


@pytest.fixture
def etcd_cluster(tmp_path):
    yield from _etcd(tmp_path, ["e0", "e1", "e2"])


@pytest.fixture
def etcd_one(tmp_path):
    """One etcd member: enough where no member fails."""
    yield from _etcd(tmp_path, ["e0"])


def _etcd(tmp_path, names):
    client = [f"127.0.0.1:{_port()}" for _ in names]
    peer = [f"127.0.0.1:{_port()}" for _ in names]
    initial = ",".join(f"{n}=http://{p}" for n, p in zip(names, peer))
    procs = []
    for n, c, p in zip(names, client, peer):
        log = open(tmp_path / f"{n}.log", "w")
        procs.append(subprocess.Popen(
            [ETCD, "--name", n, "--data-dir", str(tmp_path / n), "--listen-client-urls", f"http://{c}",
             "--advertise-client-urls", f"http://{c}", "--listen-peer-urls", f"http://{p}",
             "--initial-advertise-peer-urls", f"http://{p}", "--initial-cluster", initial,
             "--heartbeat-interval", "50", "--election-timeout", "500", "--log-level", "error"],
            stdout=log, stderr=log, preexec_fn=_die_with_parent))

    def healthy(c):
        try:
            with urllib.request.urlopen(f"http://{c}/health", timeout=1) as r:
                return r.status == 200
        except OSError:
            return False

    for c in client:
        wait_until(lambda c=c: healthy(c), timeout=30, what=f"etcd at {c}")
    cluster = EtcdCluster(";".join(client), procs)
    yield cluster
    for p in cluster.procs:
        p.kill()
        p.wait()
    for n in names:  # each member preallocates a 64 MB WAL and more: ~120 MB
        shutil.rmtree(tmp_path / n, ignore_errors=True)


def _start_master(launcher, endpoints: str, state, wait: bool = True, **flags):
    """A master with --enable_ha (clients use the default cluster id) on
    its own state directory ``state``. A standby prints nothing until it
    leads: without ``wait`` it is returned running, and its ready() waits
    for the leadership."""
    return launcher.master(wait=wait, enable_ha=True, etcd_endpoints=endpoints, ha_lease_ttl_ms=2000,
                           snapshot_backup_dir=str(state), **flags)


def test_kill_9_the_leader_and_the_standby_serves_every_object(launcher, etcd_cluster, tmp_path):
    leader = _start_master(launcher, etcd_cluster, tmp_path / "a")
    addr = "etcd://" + etcd_cluster
    a = launcher.peer(addr)
    b = launcher.peer(addr)
    objects = {}
    for i in range(30):
        key, size = f"ha/{i}", (1, 4096, 300_000)[i % 3]
        assert (a, b)[i % 2].put_pattern(key, size, seed=i, replica_num=1 + i % 2) == 0
        objects[key] = (size, i)

    # The standby: started now, it waits for the leadership (it prints its
    # "listening" line only once it leads).
    standby = _start_master(launcher, etcd_cluster, tmp_path / "b", wait=False)
    # Longer than the lease: it really waits while the leader lives. (A
    # negative check: nothing to wait on but time.)
    time.sleep(3)
    assert standby.alive() and "leading" not in standby.log()
    leader.kill()  # SIGKILL: no resignation; its lease lapses
    standby.ready(timeout=30)
    assert "leading: state read from etcd" in standby.log() and "objects=30" in standby.log()
    # The clients find the new leader through etcd by themselves, at their
    # next ping: until it is answered they know the master is gone and fail
    # calls at once (docs/python-api.md, timeouts).
    for p in (a, b):
        wait_until(lambda p=p: p.health_check() == 0, timeout=30, what="a ping of the new leader answered")
    for key, (size, seed) in objects.items():
        reader = b if int(key.split("/")[1]) % 2 == 0 else a
        assert reader.check_pattern(key, size, seed), key
    wait_until(lambda: a.put_pattern("ha/after", 5000, seed=77) == 0, timeout=30, what="a put after the failover")
    assert b.check_pattern("ha/after", 5000, 77)
    assert b.call("is_exist", key="ha/never")["rc"] == 0


def test_etcd_members_fail_one_at_a_time(launcher, etcd_cluster, tmp_path):
    """One etcd member down: the master serves on. Two down (no quorum):
    writes are refused with ETCD_OPERATION_ERROR (-1000) and never
    acknowledged, reads of what exists keep working. The members back:
    writes work again, and nothing acknowledged was lost."""
    m = launcher.master(enable_ha=True, etcd_endpoints=etcd_cluster, ha_lease_ttl_ms=15000,
                        snapshot_backup_dir=str(tmp_path / "m"))
    addr = "etcd://" + etcd_cluster
    a, b = launcher.peer(addr), launcher.peer(addr)
    for i in range(10):
        assert a.put_pattern(f"q/{i}", 20_000, seed=i) == 0
    etcd_cluster.stop(0)
    wait_until(lambda: a.put_pattern("q/one-down", 20_000, seed=100) == 0, timeout=30, interval=0.2,
               what="a put with one member down")
    etcd_cluster.stop(1)
    rc = a.put_pattern("q/no-quorum", 20_000, seed=101)
    assert rc == -1000, rc
    for i in range(10):
        assert b.check_pattern(f"q/{i}", 20_000, i), i  # reads serve on
    etcd_cluster.start(0)
    etcd_cluster.start(1)
    wait_until(lambda: a.put_pattern("q/back", 20_000, seed=102) == 0, timeout=60, interval=0.2,
               what="a put with the quorum back")
    assert m.alive()
    for i in range(10):
        assert b.check_pattern(f"q/{i}", 20_000, i), i
    assert b.check_pattern("q/one-down", 20_000, 100) and b.check_pattern("q/back", 20_000, 102)


def test_clients_of_a_named_cluster_find_its_master(launcher, etcd_one, tmp_path):
    """Masters started with --cluster_id=blue lead under that id on etcd.
    A client finds them when told the id (Mooncake's MC_STORE_CLUSTER_ID,
    setup's cluster_id key, gostore-client's --cluster_id) and reads back
    what another wrote; one that is not told looks under the default id and
    its setup fails with -900 and one line naming the id it looked under."""
    m = launcher.master(enable_ha=True, etcd_endpoints=etcd_one, ha_lease_ttl_ms=2000, cluster_id="blue",
                        snapshot_backup_dir=str(tmp_path / "m"))
    addr = "etcd://" + etcd_one
    by_env = launcher.peer(addr, env={"MC_STORE_CLUSTER_ID": "blue"})
    value = os.urandom(70_000)
    assert by_env.put("blue/env", value) == 0

    by_key = MooncakeDistributedStore()
    launcher.stores.append(by_key)
    assert by_key.setup("127.0.0.1", "P2PHANDSHAKE", 16 << 20, 16 << 20, "tcp", "", addr, cluster_id="blue") == 0
    assert by_key.get("blue/env") == value
    assert by_key.put("blue/key", value[::-1]) == 0
    assert by_env.get("blue/key") == value[::-1]

    # The engines' backends: cluster_id in their configuration.
    from gostore.integrations import _config
    engine = _config.open_store(_config.load({"master_server_address": addr, "cluster_id": "blue",
                                              "global_segment_size": "16mb"}, ()))
    launcher.stores.append(engine)
    assert engine.get("blue/env") == value

    standalone = launcher.client_process(addr, segment="16MB", cluster_id="blue")
    app = MooncakeDistributedStore()  # no client of its own: through gostore-client
    launcher.stores.append(app)
    assert app.setup_dummy(16 << 20, 16 << 20, standalone.server_address) == 0
    assert app.get("blue/key") == value[::-1]
    assert sorted(m.segment_names()) == sorted([by_env.hostname, by_key.get_hostname(), engine.get_hostname(),
                                                standalone.segment])

    lost = launcher.peer(addr, env={"MC_STORE_CLUSTER_ID": ""}, expect_ready=False)
    assert lost.setup_rc == -900
    lines = [ln for ln in lost.log().splitlines() if "no master leads" in ln]
    assert len(lines) == 1, lost.log()
    assert 'cluster_id \\"mooncake_cluster\\"' in lines[0] or 'cluster_id "mooncake_cluster"' in lines[0], lines[0]
    assert "/gostore/mooncake_cluster/master/" in lines[0]


def _etcd_footprint(endpoint: str, prefix: str):
    """What etcd itself holds under prefix: the keys and their values'
    bytes, read through etcd's JSON gateway."""
    import base64
    import json
    end = prefix[:-1] + chr(ord(prefix[-1]) + 1)
    body = json.dumps({"key": base64.b64encode(prefix.encode()).decode(),
                       "range_end": base64.b64encode(end.encode()).decode()}).encode()
    with urllib.request.urlopen(urllib.request.Request(f"http://{endpoint}/v3/kv/range", data=body), timeout=10) as r:
        kvs = json.load(r).get("kvs", [])
    keys = {base64.b64decode(kv["key"]).decode(): len(base64.b64decode(kv.get("value", ""))) for kv in kvs}
    return keys, sum(keys.values())


def test_a_standby_that_missed_snapshots_catches_up_and_serves_every_object(launcher, etcd_one, tmp_path):
    """kill -9 a standby; the leader writes on, taking snapshots on its own
    disk and trimming the log on etcd to a tail (20 records here) many
    times over, so etcd never holds more than that tail and what follows
    the newest snapshot. The standby started again on its directory finds
    its own snapshot too old for the log, fetches the leader's over the
    leader's HTTP port, follows the tail; kill -9 the leader and it serves
    every object, bytes checked through the clients."""
    tail = 20
    leader = _start_master(launcher, etcd_one, tmp_path / "a", ha_log_tail_records=tail)
    addr = "etcd://" + etcd_one
    a, b = launcher.peer(addr), launcher.peer(addr)
    objects = {}

    def put(n):
        for _ in range(n):
            i = len(objects)
            key, size = f"miss/{i}", (1, 4096, 100_000)[i % 3]
            assert (a, b)[i % 2].put_pattern(key, size, seed=i) == 0
            objects[key] = (size, i)

    standby = _start_master(launcher, etcd_one, tmp_path / "b", wait=False)
    put(20)
    wait_until(lambda: "standby: campaigning" in standby.log(), what="the standby's start")
    standby.kill()
    prefix = "/gostore/mooncake_cluster/master/"
    most = 0
    for _ in range(6):
        put(20)
        keys, size = _etcd_footprint(etcd_one, prefix)
        most = max(most, len(keys))
    keys, size = _etcd_footprint(etcd_one, prefix)
    assert f"{prefix}trimmed" in keys and not any(k.startswith(prefix + "snap/") for k in keys), keys
    # A key per batch, a record or so each here (every put waits for its
    # own): the tail, the records since the snapshot (four tails bring the
    # next, and a put adds a few while it is written), the leader,
    # trimmed, snapshot_source.
    assert most <= 5 * tail + 10, (most, keys)

    standby = _start_master(launcher, etcd_one, tmp_path / "b", wait=False)
    wait_until(lambda: "standby: fetched the leader's snapshot" in standby.log(), timeout=30,
               what="the restarted standby's fetch of the leader's snapshot")
    put(5)  # the tail after it
    leader.kill()
    standby.ready(timeout=30)
    assert f"objects={len(objects)}" in standby.log(), standby.log()[-2000:]
    for p in (a, b):
        wait_until(lambda p=p: p.health_check() == 0, timeout=30, what="a ping of the new leader answered")
    for key, (size, seed) in objects.items():
        reader = b if int(key.split("/")[1]) % 2 == 0 else a
        assert reader.check_pattern(key, size, seed), key
