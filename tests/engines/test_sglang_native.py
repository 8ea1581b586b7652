"""gostore's own SGLang HiCache backend (gostore.integrations.sglang),
loaded by SGLang's own storage factory as a dynamic backend and driven
over SGLang's real host KV pools, against a real gostore-master."""

from __future__ import annotations

import pytest

sglang = pytest.importorskip("sglang", reason="SGLang is not installed here: `make test-engines` installs it")
torch = pytest.importorskip("torch")

from sglang.srt.mem_cache.hicache_storage import HiCacheStorageConfig  # noqa: E402
from sglang.srt.mem_cache.storage.backend_factory import StorageBackendFactory  # noqa: E402

from gostore.integrations.sglang import GostoreHiCacheStorage  # noqa: E402
from test_sglang_hicache import PAGE, fill_pages, mha_host_pool, same_pages, token_indices  # noqa: E402


def backend(master_addr: str, pool, *, tp_rank: int = 0, tp_size: int = 1, mla: bool = False, model="org/tiny"):
    cfg = HiCacheStorageConfig(
        tp_rank=tp_rank, tp_size=tp_size, pp_rank=0, pp_size=1, attn_cp_rank=0, attn_cp_size=1,
        is_mla_model=mla, enable_storage_metrics=False, is_page_first_layout=True, model_name=model,
        extra_config={"backend_name": "gostore", "module_path": "gostore.integrations.sglang",
                      "class_name": "GostoreHiCacheStorage", "interface_v1": 1,
                      "master_server_address": master_addr, "global_segment_size": "32mb"})
    b = StorageBackendFactory.create_backend("dynamic", cfg, pool)
    b.register_mem_pool_host(pool)
    return b


def test_sglangs_factory_loads_it_and_two_engines_share_pages(master):
    writer_pool, reader_pool = mha_host_pool(), mha_host_pool()
    writer, reader = backend(master.addr, writer_pool), backend(master.addr, reader_pool)
    assert isinstance(writer, GostoreHiCacheStorage)
    keys = [f"page-{i}" for i in range(5)]
    fill_pages(writer_pool, 0, 5, seed=21)
    assert writer.batch_set_v1(keys[:3], token_indices(0, 3)) == [True] * 3
    assert reader.batch_exists(keys) == 3
    # Pages already stored answer success without a check first.
    assert writer.batch_set_v1(keys, token_indices(0, 5)) == [True] * 5
    assert reader.batch_exists(keys) == 5
    # One object per page, K and V together (SGLang's Mooncake backend
    # stores two).
    assert master.metric("master_key_count") == 5
    assert reader.batch_get_v1(keys + ["absent"], token_indices(8, 6)) == [True] * 5 + [False]
    assert same_pages(writer_pool, 0, reader_pool, 8, 5)
    assert reader.exists("page-0") and not reader.exists("absent")


def test_a_page_of_another_layout_is_a_miss_not_wrong_bytes(master):
    """An engine whose pages have another size (another head count, say,
    under the same model name) reads nothing rather than a cut page."""
    small = mha_host_pool()
    fill_pages(small, 0, 2, seed=5)
    assert backend(master.addr, small).batch_set_v1(["p0", "p1"], token_indices(0, 2)) == [True, True]
    big = mha_host_pool(heads=4)
    assert backend(master.addr, big).batch_get_v1(["p0", "p1"], token_indices(0, 2)) == [False, False]


def test_tensor_parallel_ranks(master):
    pools = [mha_host_pool() for _ in range(2)]
    ranks = [backend(master.addr, pools[r], tp_rank=r, tp_size=2) for r in range(2)]
    fill_pages(pools[0], 0, 2, seed=1)
    fill_pages(pools[1], 0, 2, seed=2)
    assert ranks[0].batch_set_v1(["a", "b"], token_indices(0, 2)) == [True, True]
    assert ranks[1].batch_exists(["a", "b"]) == 0  # its heads are not rank 0's
    assert ranks[1].batch_set_v1(["a", "b"], token_indices(0, 2)) == [True, True]
    for r in range(2):
        assert ranks[r].batch_get_v1(["a", "b"], token_indices(3, 2)) == [True, True]
        assert same_pages(pools[r], 0, pools[r], 3, 2)
