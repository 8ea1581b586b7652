"""What ReplicateConfig's fields do to a real write (docs/python-api.md
"ReplicateConfig"): the fields the native side applies reach the master;
the requests gostore cannot honour return -600 and store nothing; the
fields without an effect yet change nothing.
"""

from __future__ import annotations

import pytest

from conftest import MiB
from gostore import ObjectDataType, ReplicateConfig, SoftPinAction

INVALID = -600


@pytest.fixture
def one(master, store_factory):
    return master, store_factory(master, segment=16 * MiB)


def pins(master, key):
    info = master.query_key(key)
    assert info is not None, key
    return info["hard_pin"], info["soft_pin"]


def test_soft_pin_action(one):
    m, s = one
    for action, pinned in ((SoftPinAction.ENABLE, True), (SoftPinAction.DISABLE, False),
                           (SoftPinAction.PRESERVE, False)):
        cfg = ReplicateConfig()
        cfg.soft_pin_action = action
        key = f"soft/{action.name}"
        assert s.put(key, b"x", cfg) == 0
        assert pins(m, key) == (False, pinned), action
    # an upsert with DISABLE clears the pin an object had
    cfg = ReplicateConfig(soft_pin_action=SoftPinAction.DISABLE)
    assert s.upsert("soft/ENABLE", b"y", cfg) == 0
    assert pins(m, "soft/ENABLE") == (False, False)


def test_applied_fields(one):
    m, s = one
    cfg = ReplicateConfig()
    cfg.with_hard_pin = True
    cfg.prefer_alloc_in_same_node = True
    cfg.preferred_segments = [s.get_hostname()]
    # kept on the object, no effect yet: the write is the same
    cfg.data_type = ObjectDataType.KVCACHE
    cfg.group_ids = ["g"]
    cfg.preferred_nof_segments = ["nowhere:1"]
    assert s.put("applied/k", b"v" * 100, cfg) == 0
    assert pins(m, "applied/k") == (True, False)
    info = m.query_key("applied/k")
    assert [r["segment"] for r in info["replicas"]] == [s.get_hostname()]


@pytest.mark.parametrize("change", [
    dict(replica_num=0),
    dict(nof_replica_num=1),
    dict(dfs_replica_num=1),
    dict(soft_pin_ttl_ms=1000),  # a TTL needs soft_pin_action ENABLE
], ids=["replica_num 0", "nvme-of replica", "dfs replica", "ttl without enable"])
def test_requests_gostore_cannot_honour(one, change):
    m, s = one
    key = "refused/" + "-".join(change)
    cfg = ReplicateConfig(**change)
    assert s.put(key, b"x", cfg) == INVALID
    assert s.upsert(key, b"x", cfg) == INVALID
    assert s.put_batch([key], [b"x"], cfg) == INVALID
    assert s.is_exist(key) == 0


def test_ttl_with_enable_is_accepted(one):
    m, s = one
    cfg = ReplicateConfig(soft_pin_action=SoftPinAction.ENABLE, soft_pin_ttl_ms=1000)
    assert s.put("ttl/k", b"x", cfg) == 0
    assert pins(m, "ttl/k") == (False, True)
