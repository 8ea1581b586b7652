"""Tenants (``--enable_multi_tenants``, setup's ``tenant_id``) with the real
``gostore-master`` and client processes: each tenant has its own key space
(the same key in two tenants is two objects, read back with their own
bytes), and no call of one tenant reads, checks, removes or upserts
another's; the master's HTTP queries name a tenant with ``?tenant_id=``.
Without the flag, tenants share one key space as before. The tenant of
every object survives a master restart on its state directory."""

from __future__ import annotations

import json
import urllib.parse

from conftest import wait_until
from test_master_ha import etcd_one  # noqa: F401  (the fixture)

SIZE = 5000


def _seeds(peers):
    """Each peer's seed: its own bytes under the same key."""
    return {p: 100 + i for i, p in enumerate(peers)}


def test_same_key_in_two_tenants_is_two_objects(launcher):
    m = launcher.master(enable_multi_tenants=True)
    a, b = launcher.peer(m, tenant="tenant-a"), launcher.peer(m, tenant="tenant-b")
    d = launcher.peer(m)  # the default tenant
    seeds = _seeds([a, b, d])
    for p, seed in seeds.items():
        assert p.put_pattern("shared/k", SIZE, seed=seed) == 0, p  # not OBJECT_ALREADY_EXISTS
    for p, seed in seeds.items():
        assert p.check_pattern("shared/k", SIZE, seed), p  # its own bytes, not another's
    # The master's view, per tenant: three objects under one user key.
    for tenant in ("tenant-a", "tenant-b", "default"):
        status, body = m.http("/query_key?key=shared/k&tenant_id=" + tenant)
        assert status == 200, (tenant, status, body)
        assert json.loads(body)["key"] == "shared/k"
    assert m.http("/query_key?key=shared/k&tenant_id=tenant-c")[0] == 404

    # A key only tenant-a holds is invisible to the others.
    assert a.put_pattern("only/a", SIZE, seed=7) == 0
    for tenant, keys in (("tenant-a", {"shared/k", "only/a"}), ("tenant-b", {"shared/k"}), ("tenant-c", set())):
        status, body = m.http("/get_all_keys?tenant_id=" + tenant)
        assert status == 200 and set(body.split()) == keys, (tenant, body)
    assert set(m.http("/get_all_keys")[1].split()) == {"shared/k"}  # the default tenant's, as Mooncake lists
    assert a.is_exist("only/a") == 1
    for p in (b, d):
        assert p.is_exist("only/a") == 0
        assert p.call("batch_is_exist", keys=["only/a", "shared/k"])["rc"] == [0, 1]
        assert p.get_size("only/a") < 0
        assert p.get("only/a") == b""
        assert p.remove("only/a", force=True) < 0  # not found: it is not theirs
    assert a.check_pattern("only/a", SIZE, 7)
    # Replica tasks name keys too: b cannot copy a's object, a can.
    info = m.http("/query_key?key=only/a&tenant_id=tenant-a")[1]
    target = next(p.hostname for p in (a, b, d) if p.hostname not in info)
    assert b.call("copy_task", key="only/a", targets=[target])["rc"] == -704  # OBJECT_NOT_FOUND
    assert a.call("copy_task", key="only/a", targets=[target])["rc"] == 0

    # An upsert by b replaces b's object only.
    assert b.call("upsert_pattern", key="shared/k", size=SIZE, seed=999)["rc"] == 0
    assert b.check_pattern("shared/k", SIZE, 999)
    assert a.check_pattern("shared/k", SIZE, seeds[a]) and d.check_pattern("shared/k", SIZE, seeds[d])

    # Removal by key, by pattern and of all: the caller's objects only.
    assert a.remove("shared/k", force=True) == 0
    assert a.is_exist("shared/k") == 0
    assert b.check_pattern("shared/k", SIZE, 999) and d.check_pattern("shared/k", SIZE, seeds[d])
    for i in range(3):
        assert a.put_pattern(f"rx/{i}", SIZE, seed=i) == 0
        assert b.put_pattern(f"rx/{i}", SIZE, seed=50 + i) == 0
    assert a.call("remove_by_regex", pattern="^rx/", force=True)["rc"] == 3
    assert a.call("batch_is_exist", keys=["rx/0", "rx/1", "rx/2"])["rc"] == [0, 0, 0]
    assert all(b.check_pattern(f"rx/{i}", SIZE, 50 + i) for i in range(3))
    # b's remove_all counts and takes b's four objects, nothing of a's or d's.
    assert b.call("remove_all", force=True)["rc"] == 4
    assert b.is_exist("shared/k") == 0
    assert a.check_pattern("only/a", SIZE, 7) and d.check_pattern("shared/k", SIZE, seeds[d])


def test_query_prefix_names_a_tenant(launcher):
    m = launcher.master(enable_multi_tenants=True)
    a = launcher.peer(m, tenant="tenant-a")
    for i in range(3):
        assert a.put_pattern(f"page/{i}", SIZE, seed=i) == 0
    body = json.dumps({"keys": [f"page/{i}" for i in range(4)]}).encode()

    def longest(tenant):
        import urllib.request

        q = "" if tenant is None else "?tenant_id=" + urllib.parse.quote(tenant)
        req = urllib.request.Request(f"http://{m.http_addr}/query_prefix{q}", data=body, method="POST")
        with urllib.request.urlopen(req, timeout=5) as r:
            return json.loads(r.read())["longest_matched"]

    assert longest("tenant-a") == 3
    assert longest(None) == 0 and longest("tenant-b") == 0


def test_bad_tenant_id_is_refused_at_setup(launcher):
    m = launcher.master(enable_multi_tenants=True)
    p = launcher.peer(m, tenant="_reserved", expect_ready=False)
    assert p.setup_rc == -600, p.setup_rc
    assert "tenant_id" in p.log()


def test_without_the_flag_tenants_share_one_key_space(launcher):
    m = launcher.master()
    a, b = launcher.peer(m, tenant="tenant-a"), launcher.peer(m, tenant="tenant-b")
    assert a.put_pattern("k", SIZE, seed=1) == 0
    status, body = m.http("/api/v1/tenant_quotas")
    assert status == 409 and json.loads(body)["error_code"] == -1011, (status, body)  # UNAVAILABLE_IN_CURRENT_MODE
    assert m.http("/get_all_keys?tenant_id=tenant-b")[1].split() == ["k"]  # one key space
    b.put_pattern("k", SIZE, seed=2)  # the key exists: it is a's object b writes to
    assert b.check_pattern("k", SIZE, 1) and a.check_pattern("k", SIZE, 1)
    assert b.remove("k", force=True) == 0
    assert a.is_exist("k") == 0


def test_restart_keeps_each_tenants_objects(launcher, tmp_path):
    state = str(tmp_path / "state")
    m = launcher.master(enable_multi_tenants=True, snapshot_backup_dir=state)
    a, b = launcher.peer(m, tenant="tenant-a"), launcher.peer(m, tenant="tenant-b")
    for i in range(5):
        assert a.put_pattern(f"r/{i}", SIZE, seed=i) == 0
        assert b.put_pattern(f"r/{i}", SIZE, seed=100 + i) == 0
    m.kill()
    m2 = launcher.master(enable_multi_tenants=True, snapshot_backup_dir=state, rpc_port=m.rpc_port)
    assert "state restored" in m2.log()
    wait_until(lambda: a.check_pattern("r/0", SIZE, 0), timeout=30, what="a's read after the restart")
    wait_until(lambda: b.check_pattern("r/0", SIZE, 100), timeout=30, what="b's read after the restart")
    for i in range(5):
        assert a.check_pattern(f"r/{i}", SIZE, i) and b.check_pattern(f"r/{i}", SIZE, 100 + i), i
    # Each tenant's charge is rebuilt from the restored objects.
    assert _series(m2, "mooncake_tenant_quota_charged_bytes", tenant_id="tenant-a") == 5 * SIZE
    assert a.call("remove_all", force=True)["rc"] == 5
    assert all(b.check_pattern(f"r/{i}", SIZE, 100 + i) for i in range(5))


# ---- quotas: --tenant_quota_connector_uri (Mooncake's YAML policy) -------

KiB, MiB = 1 << 10, 1 << 20


def _policy(path, **quotas) -> str:
    """Writes Mooncake's policy file (a new version: rename over the old)."""
    import os

    body = "version: 1\ntenants:\n" + "".join(f"  - name: {n.replace('_', '-')}\n    quota: {q}\n" for n, q in quotas.items())
    tmp = str(path) + ".tmp"
    with open(tmp, "w") as f:
        f.write(body)
    os.replace(tmp, str(path))
    return str(path)


def _series(m, name: str, **labels) -> float:
    import re

    status, body = m.http("/metrics")
    assert status == 200, (status, body)
    want = ",".join(f'{k}="{v}"' for k, v in sorted(labels.items()))
    for line in body.splitlines():
        mm = re.match(rf"^{re.escape(name)}(?:\{{(.*)\}})? (\S+)$", line)
        if mm and ",".join(sorted((mm.group(1) or "").split(","))) == ",".join(sorted(want.split(","))):
            return float(mm.group(2))
    raise AssertionError(f"{name}{{{want}}} missing from /metrics")


def test_quota_refuses_over_quota_puts_with_mooncakes_code(launcher, tmp_path):
    pol = _policy(tmp_path / "policy.yaml", tenant_a="1MB", tenant_b="8MB")
    m = launcher.master(enable_multi_tenants=True, tenant_quota_connector_type="file", tenant_quota_connector_uri=pol)
    a, b = launcher.peer(m, tenant="tenant-a"), launcher.peer(m, tenant="tenant-b")
    c = launcher.peer(m, tenant="tenant-c")  # not in the policy
    # A hard-pinned object cannot be evicted to make room for the next.
    assert a.call("put_pattern", key="pinned", size=600 * KiB, seed=1, hard_pin=True)["rc"] == 0
    assert a.put_pattern("second", 600 * KiB, seed=2) == -1700  # TENANT_QUOTA_EXCEEDED
    assert a.put_pattern("huge", 2 * MiB, seed=3) == -1700
    assert a.is_exist("second") == 0 and a.is_exist("huge") == 0
    assert c.put_pattern("k", 1000, seed=4) == -1701  # TENANT_NOT_REGISTERED
    assert b.put_pattern("second", 600 * KiB, seed=5) == 0  # b's quota is its own
    assert a.check_pattern("pinned", 600 * KiB, 1) and b.check_pattern("second", 600 * KiB, 5)
    assert _series(m, "mooncake_tenant_quota_reject_total", tenant_id="tenant-a", reason="quota_exceeded") == 2
    assert _series(m, "mooncake_tenant_quota_reject_total", tenant_id="tenant-c", reason="not_registered") == 1
    assert _series(m, "mooncake_tenant_quota_charged_bytes", tenant_id="tenant-a") == 600 * KiB
    assert _series(m, "mooncake_tenant_quota_requested_bytes", tenant_id="tenant-a") == MiB
    assert _series(m, "mooncake_tenant_quota_effective_bytes", tenant_id="tenant-a") == MiB
    assert _series(m, "mooncake_tenant_quota_explicit_policy", tenant_id="tenant-a") == 1
    assert _series(m, "mooncake_tenant_quota_admission_closed", tenant_id="tenant-c") == 1
    assert _series(m, "mooncake_tenant_quota_over_quota", tenant_id="tenant-a") == 0
    assert _series(m, "mooncake_tenant_quota_requested_bytes_sum") == 9 * MiB
    assert _series(m, "mooncake_tenant_quota_allocatable_capacity_bytes") > 0
    # Mooncake's admin API, read-only here: the file is the policy.
    status, body = m.http("/api/v1/tenant_quotas?tenant_id=tenant-a")
    assert status == 200 and json.loads(body) == {"success": True, "data": {
        "tenant_id": "tenant-a", "requested_quota_bytes": MiB, "effective_quota_bytes": MiB,
        "charged_bytes": 600 * KiB, "admission_closed": False, "over_quota": False, "has_explicit_policy": True}}, body
    status, body = m.http("/api/v1/tenant_quotas")
    assert status == 200 and {t["tenant_id"] for t in json.loads(body)["data"]} == {"tenant-a", "tenant-b", "tenant-c"}
    assert m.http("/api/v1/tenant_quotas?tenant_id=nobody")[0] == 404
    assert m.http("/api/v1/tenant_quotas?tenant_id=_bad")[0] == 400
    # Removing frees the quota.
    assert a.remove("pinned", force=True) == 0
    assert a.put_pattern("second", 600 * KiB, seed=2) == 0 and a.check_pattern("second", 600 * KiB, 2)


def test_a_tenant_at_its_quota_evicts_its_own_oldest(launcher, tmp_path):
    pol = _policy(tmp_path / "policy.yaml", tenant_a="1MB", tenant_b="8MB")
    m = launcher.master(enable_multi_tenants=True, tenant_quota_connector_uri=pol)
    a, b = launcher.peer(m, tenant="tenant-a"), launcher.peer(m, tenant="tenant-b")
    assert b.put_pattern("b-old", 300 * KiB, seed=9) == 0  # the pool's oldest object
    for i in range(3):
        assert a.put_pattern(f"a/{i}", 300 * KiB, seed=i) == 0
    assert a.put_pattern("a/3", 300 * KiB, seed=3) == 0  # 1200 KiB > 1 MiB: room is made
    assert a.is_exist("a/0") == 0  # a's oldest went for it
    assert all(a.check_pattern(f"a/{i}", 300 * KiB, i) for i in (1, 2, 3))
    assert b.check_pattern("b-old", 300 * KiB, 9)  # not another tenant's
    assert _series(m, "mooncake_tenant_evict_bytes_total", tenant_id="tenant-a") == 300 * KiB
    assert _series(m, "mooncake_tenant_evict_bytes_total", tenant_id="tenant-b") == 0


def test_policy_file_edited_while_running(launcher, tmp_path):
    path = tmp_path / "policy.yaml"
    pol = _policy(path, tenant_a="1MB")
    m = launcher.master(enable_multi_tenants=True, tenant_quota_connector_uri=pol)
    a = launcher.peer(m, tenant="tenant-a")
    assert a.put_pattern("big", 3 * MiB, seed=1) == -1700
    _policy(path, tenant_a="4MB")
    wait_until(lambda: a.put_pattern("big", 3 * MiB, seed=1) == 0, timeout=10, interval=0.2,
               what="the raised quota in force")
    assert a.check_pattern("big", 3 * MiB, 1)
    assert "tenant quota policy reloaded" in m.log()
    # A bad version keeps the last good policy, and is logged once.
    with open(path, "w") as f:
        f.write("version: 2\ntenants: []\n")
    wait_until(lambda: "tenant quota policy not reloaded" in m.log(), timeout=10, what="the bad policy's log line")
    import time

    time.sleep(2.5)  # two more polls of the same bad file
    assert m.log().count("tenant quota policy not reloaded") == 1, m.log()
    assert _series(m, "mooncake_tenant_quota_requested_bytes", tenant_id="tenant-a") == 4 * MiB
    assert a.put_pattern("small", 500 * KiB, seed=2) == 0  # still admitted under 4MB


def test_eviction_takes_first_from_the_tenant_over_its_share(launcher, tmp_path):
    path = tmp_path / "policy.yaml"
    pol = _policy(path, tenant_a="40MB", tenant_b="40MB")
    m = launcher.master(enable_multi_tenants=True, tenant_quota_connector_uri=pol,
                        eviction_high_watermark_ratio=0.4)
    a = launcher.peer(m, tenant="tenant-a", segment="32MB")
    b = launcher.peer(m, tenant="tenant-b", segment="32MB")
    # The pool is 64MB: shares of 32MB each. b's objects are the oldest,
    # which a pass by age alone would take first.
    for i in range(10):
        assert b.put_pattern(f"b/{i}", MiB, seed=100 + i) == 0
    for i in range(14):
        assert a.put_pattern(f"a/{i}", MiB, seed=i) == 0
    # 24MB of 64 is under the 0.4 watermark: nothing is evicted yet.
    assert _series(m, "mooncake_tenant_quota_charged_bytes", tenant_id="tenant-a") == 14 * MiB
    # a's quota drops to 4MB: it is 10MB over its share; b fills the pool
    # past the watermark.
    _policy(path, tenant_a="4MB", tenant_b="40MB")
    wait_until(lambda: _series(m, "mooncake_tenant_quota_effective_bytes", tenant_id="tenant-a") == 4 * MiB,
               timeout=10, what="the new policy in force")
    for i in range(10, 14):
        assert b.put_pattern(f"b/{i}", MiB, seed=100 + i) == 0
    wait_until(lambda: _series(m, "mooncake_tenant_quota_charged_bytes", tenant_id="tenant-a") <= 4 * MiB,
               timeout=15, what="a's objects beyond its share evicted")
    assert all(b.check_pattern(f"b/{i}", MiB, 100 + i) for i in range(14)), "b lost an object"
    kept = [i for i in range(14) if a.is_exist(f"a/{i}") == 1]
    assert len(kept) == 4 and all(a.check_pattern(f"a/{i}", MiB, i) for i in kept), kept
    assert _series(m, "mooncake_tenant_evict_bytes_total", tenant_id="tenant-a") == 10 * MiB
    assert _series(m, "mooncake_tenant_evict_bytes_total", tenant_id="tenant-b") == 0


def test_a_bad_policy_file_stops_the_master_at_start(launcher, tmp_path):
    import pytest

    bad = tmp_path / "policy.yaml"
    bad.write_text("version: 1\ntenants:\n  - name: _reserved\n    quota: 1GB\n")
    with pytest.raises(RuntimeError, match="tenant_quota_connector_uri"):
        launcher.master(enable_multi_tenants=True, tenant_quota_connector_uri=str(bad))
    with pytest.raises(RuntimeError, match="needs --enable_multi_tenants"):
        launcher.master(tenant_quota_connector_uri=str(bad))


def test_a_tenants_disk_copies_read_back_through_the_ssd_tier(launcher, tmp_path):
    """The SSD tier stores the stored (scoped) keys; a reader of another
    tenant than the default one names them so when it reads a disk copy."""
    import os

    m = launcher.master(enable_multi_tenants=True, enable_offload=True, tick_interval_ms=20,
                        eviction_high_watermark_ratio=0.8, eviction_ratio=0.2)
    ssd = str(tmp_path / "ssd")
    os.mkdir(ssd)
    env = {"MOONCAKE_OFFLOAD_HEARTBEAT_INTERVAL_SECONDS": "0.2",
           "MOONCAKE_OFFLOAD_TOTAL_SIZE_LIMIT_BYTES": str(256 * MiB)}
    launcher.peer(m, segment="16MB", ssd=ssd, env=env)  # the holder, a default-tenant client
    a = launcher.peer(m, tenant="tenant-a", segment="0")  # holds nothing: every object is the holder's
    b = launcher.peer(m, tenant="tenant-b", segment="0")
    n = 48  # three times the pool
    for i in range(n):
        wait_until(lambda: a.put_pattern(f"d/{i}", MiB, seed=i) == 0, timeout=30, interval=0.05,
                   what=f"a's put d/{i} (the pool makes room as the tier takes the older ones)")
    assert b.put_pattern("d/0", 1000, seed=999) == 0  # same key, b's own object

    def disk_only(key):
        status, body = m.http("/query_key?key=" + key + "&tenant_id=tenant-a")
        info = json.loads(body) if status == 200 else {}
        return bool(info.get("disk")) and not info.get("replicas")

    wait_until(lambda: sum(disk_only(f"d/{i}") for i in range(n)) >= n // 2, timeout=30,
               what="most of a's objects disk-only")
    for i in range(n):
        assert a.check_pattern(f"d/{i}", MiB, i), f"d/{i}"
    assert a.call("disk_reads")["n"] > 0
    assert b.check_pattern("d/0", 1000, 999)


def test_a_default_tenant_key_with_a_nul_reads_its_own_disk_copy(launcher, tmp_path):
    """The default tenant's keys holding a NUL are stored scoped like any
    other tenant's ("default\\0" + key): its reader names them so on the
    SSD tier, not as the raw key, which is tenant "n"'s object "k/i"."""
    import os

    m = launcher.master(enable_multi_tenants=True, enable_offload=True, tick_interval_ms=20,
                        eviction_high_watermark_ratio=0.8, eviction_ratio=0.2)
    ssd = str(tmp_path / "ssd")
    os.mkdir(ssd)
    env = {"MOONCAKE_OFFLOAD_HEARTBEAT_INTERVAL_SECONDS": "0.2",
           "MOONCAKE_OFFLOAD_TOTAL_SIZE_LIMIT_BYTES": str(256 * MiB)}
    launcher.peer(m, segment="16MB", ssd=ssd, env=env)  # the holder
    d = launcher.peer(m, segment="0")  # the default tenant's reader: holds nothing
    n = 48  # three times the pool
    for i in range(n):
        wait_until(lambda: d.put_pattern(f"n\x00k/{i}", MiB, seed=i) == 0, timeout=30, interval=0.05,
                   what=f"put n\\0k/{i}")

    def disk_only(key):
        status, body = m.http("/query_key?key=" + urllib.parse.quote(key))
        info = json.loads(body) if status == 200 else {}
        return bool(info.get("disk")) and not info.get("replicas")

    wait_until(lambda: sum(disk_only(f"n\x00k/{i}") for i in range(n)) >= n // 2, timeout=30,
               what="most of the objects disk-only")
    for i in range(n):
        assert d.check_pattern(f"n\x00k/{i}", MiB, i), f"n\\0k/{i}"
    assert d.call("disk_reads")["n"] > 0


def test_failover_keeps_each_tenants_objects(launcher, tmp_path, request):
    """Under --enable_ha the standby that takes over serves each tenant's
    objects (the log on etcd carries the stored, scoped keys)."""
    import shutil
    import time

    import pytest

    if shutil.which("etcd") is None:
        pytest.skip("etcd-server is not installed (make test installs it as root)")
    from test_master_ha import _start_master

    etcd = request.getfixturevalue("etcd_one")
    leader = _start_master(launcher, etcd, tmp_path / "a", enable_multi_tenants=True)
    addr = "etcd://" + etcd
    a, b = launcher.peer(addr, tenant="tenant-a"), launcher.peer(addr, tenant="tenant-b")
    for i in range(4):
        assert a.put_pattern(f"h/{i}", SIZE, seed=i) == 0
        assert b.put_pattern(f"h/{i}", SIZE, seed=50 + i) == 0
    standby = _start_master(launcher, etcd, tmp_path / "b", wait=False, enable_multi_tenants=True)
    time.sleep(3)  # longer than the lease: the standby waits while the leader lives
    leader.kill()
    standby.ready(timeout=30)
    for p in (a, b):
        wait_until(lambda p=p: p.health_check() == 0, timeout=30, what="a ping of the new leader answered")
    for i in range(4):
        assert a.check_pattern(f"h/{i}", SIZE, i) and b.check_pattern(f"h/{i}", SIZE, 50 + i), i
    assert _series(standby, "mooncake_tenant_quota_charged_bytes", tenant_id="tenant-b") == 4 * SIZE
    assert b.call("remove_all", force=True)["rc"] == 4
    assert all(a.check_pattern(f"h/{i}", SIZE, i) for i in range(4))
