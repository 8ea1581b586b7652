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
    assert a.is_exist("only/a") == 1
    for p in (b, d):
        assert p.is_exist("only/a") == 0
        assert p.call("batch_is_exist", keys=["only/a", "shared/k"])["rc"] == [0, 1]
        assert p.get_size("only/a") < 0
        assert p.get("only/a") == b""
        assert p.remove("only/a", force=True) < 0  # not found: it is not theirs
    assert a.check_pattern("only/a", SIZE, 7)

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
    assert a.call("remove_all", force=True)["rc"] == 5
    assert all(b.check_pattern(f"r/{i}", SIZE, 100 + i) for i in range(5))
