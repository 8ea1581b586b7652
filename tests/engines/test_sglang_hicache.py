"""SGLang's own HiCache Mooncake backend (``sglang.srt.mem_cache.storage.
mooncake_store``, from the installed ``sglang`` package, unchanged) on
gostore: ``mooncake.store`` resolves to gostore (GOSTORE_AS_MOONCAKE=1, set
by ``make test-engines``), a real ``gostore-master`` and SGLang's real
host KV pools (CPU tensors, ``page_first`` layout) are driven the way
SGLang's cache controller drives them: ``register_mem_pool_host``,
``batch_exists``, ``batch_set_v1`` / ``batch_get_v1`` with host indices,
``exists``, ``clear``, and ``standalone_storage`` over a ``gostore-client``
process. Two stores with their own pools stand for two engine processes
sharing a prefix: every page read back is compared byte for byte."""

from __future__ import annotations

import json

import pytest

sglang = pytest.importorskip("sglang", reason="SGLang is not installed here: `make test-engines` installs it")
torch = pytest.importorskip("torch")

from sglang.srt.mem_cache.device_pool_info import MLABufferInfo  # noqa: E402
from sglang.srt.mem_cache.hicache_storage import HiCacheStorageConfig  # noqa: E402
from sglang.srt.mem_cache.pool_host.mha import MHATokenToKVPoolHost  # noqa: E402
from sglang.srt.mem_cache.pool_host.mla import MLATokenToKVPoolHost  # noqa: E402
from sglang.srt.mem_cache.storage.mooncake_store.mooncake_store import MooncakeStore  # noqa: E402

import gostore  # noqa: E402
import sglang_pools  # noqa: E402
from conftest import wait_until  # noqa: E402

LAYERS, HEADS, HEAD_DIM, PAGE = 2, 2, 8, 4
DEVICE_TOKENS = 64


def test_mooncake_store_is_gostore():
    import mooncake.store

    assert mooncake.store.MooncakeDistributedStore is gostore.MooncakeDistributedStore


def storage_config(master_addr: str, *, mla: bool = False, tp_rank: int = 0, tp_size: int = 1, **extra):
    return HiCacheStorageConfig(
        tp_rank=tp_rank, tp_size=tp_size, pp_rank=0, pp_size=1, attn_cp_rank=0, attn_cp_size=1,
        is_mla_model=mla, enable_storage_metrics=False, is_page_first_layout=True, model_name="org/tiny-llama",
        extra_config={"master_server_address": master_addr, "protocol": "tcp", "local_hostname": "127.0.0.1",
                      "global_segment_size": 32 << 20, **extra})


def mha_host_pool(heads: int = HEADS, **kw) -> MHATokenToKVPoolHost:
    """SGLang's MHA host pool over CPU device buffers, page_first."""
    return sglang_pools.mha_host_pool(layers=LAYERS, heads=heads, head_dim=HEAD_DIM, page=PAGE,
                                      device_tokens=DEVICE_TOKENS, ratio=2.0, **kw)


def fill_pages(pool, first_page: int, pages: int, seed: int) -> None:
    g = torch.Generator().manual_seed(seed)
    for p in range(first_page, first_page + pages):
        page = pool.get_data_page(p * PAGE, flat=True)
        pool.set_from_flat_data_page(p * PAGE, torch.randn(page.shape, generator=g, dtype=page.dtype))


def same_pages(a, a_first: int, b, b_first: int, pages: int) -> bool:
    return all(torch.equal(a.get_data_page((a_first + i) * PAGE, flat=True),
                           b.get_data_page((b_first + i) * PAGE, flat=True)) for i in range(pages))


def token_indices(first_page: int, pages: int):
    return torch.arange(first_page * PAGE, (first_page + pages) * PAGE)


@pytest.mark.parametrize("config_from", ["extra_config", "json_file"])
def test_a_prefix_written_by_one_engine_is_read_by_another(master_factory, tmp_path, monkeypatch, config_from):
    master = master_factory(default_kv_lease_ttl=200)
    if config_from == "json_file":
        path = tmp_path / "mooncake.json"
        path.write_text(json.dumps({"master_server_address": master.addr, "protocol": "tcp",
                                    "local_hostname": "127.0.0.1", "global_segment_size": 32 << 20}))
        monkeypatch.setenv("SGLANG_HICACHE_MOONCAKE_CONFIG_PATH", str(path))
        cfg = lambda: HiCacheStorageConfig(  # noqa: E731
            tp_rank=0, tp_size=1, pp_rank=0, pp_size=1, attn_cp_rank=0, attn_cp_size=1, is_mla_model=False,
            enable_storage_metrics=False, is_page_first_layout=True, model_name="org/tiny-llama", extra_config={})
    else:
        cfg = lambda: storage_config(master.addr)  # noqa: E731
    writer_pool, reader_pool = mha_host_pool(), mha_host_pool()
    writer, reader = MooncakeStore(cfg(), writer_pool), MooncakeStore(cfg(), reader_pool)
    writer.register_mem_pool_host(writer_pool)
    reader.register_mem_pool_host(reader_pool)
    assert isinstance(writer.store, gostore.MooncakeDistributedStore)

    keys = [f"prefix-page-{i}" for i in range(6)]
    fill_pages(writer_pool, 0, 6, seed=1)
    assert reader.batch_exists(keys) == 0
    assert writer.batch_set_v1(keys[:4], token_indices(0, 4)) == [True] * 4
    # The controller asks how long a prefix the store holds: 4 of 6 pages.
    assert reader.batch_exists(keys) == 4
    assert writer.batch_set_v1(keys, token_indices(0, 6)) == [True] * 6  # the first 4 exist: skipped
    assert reader.batch_exists(keys) == 6

    # The other engine reads them into other host slots, byte for byte.
    assert reader.batch_get_v1(keys, token_indices(8, 6)) == [True] * 6
    assert same_pages(writer_pool, 0, reader_pool, 8, 6)
    # A page nobody wrote fails alone.
    got = reader.batch_get_v1(keys[:2] + ["never-written"], token_indices(2, 3))
    assert got == [True, True, False]

    # exists() takes the backend's raw key (no model prefix, no rank suffix).
    assert not reader.exists(keys[0])
    raw = f"{writer.config_prefix}_{keys[0]}_{writer.mha_suffix}_k"
    assert reader.exists(raw)
    # clear() is remove_all(): objects leased (read, or asked about) stay
    # until their lease ends, as on Mooncake's master (here 200 ms). The
    # master's key count is watched: asking the store would lease again.
    wait_until(lambda: (writer.clear(), master.metric("master_key_count") == 0)[1],
               what="clear() to empty the store")
    assert reader.batch_exists(keys) == 0


def test_tensor_parallel_ranks_keep_their_own_pages(master):
    """Each TP rank stores its heads under its own suffix: rank 1 does not
    see rank 0's pages, and each reads its own back."""
    pools = [mha_host_pool() for _ in range(2)]
    stores = [MooncakeStore(storage_config(master.addr, tp_rank=r, tp_size=2), pools[r]) for r in range(2)]
    for s, p in zip(stores, pools):
        s.register_mem_pool_host(p)
    fill_pages(pools[0], 0, 3, seed=10)
    fill_pages(pools[1], 0, 3, seed=11)
    keys = ["tp-a", "tp-b", "tp-c"]
    assert stores[0].batch_set_v1(keys, token_indices(0, 3)) == [True] * 3
    assert stores[1].batch_exists(keys) == 0
    assert stores[1].batch_set_v1(keys, token_indices(0, 3)) == [True] * 3
    for r in range(2):
        assert stores[r].batch_get_v1(keys, token_indices(4, 3)) == [True] * 3
        assert same_pages(pools[r], 0, pools[r], 4, 3)
    assert not same_pages(pools[0], 4, pools[1], 4, 3)


def test_mla_pages(master):
    radius, rope = 8, 4
    pools = []
    for _ in range(2):
        bufs = tuple(torch.zeros(DEVICE_TOKENS, 1, radius + rope) for _ in range(LAYERS))
        info = MLABufferInfo(buffers=bufs, data_ptrs=torch.tensor([b.data_ptr() for b in bufs], dtype=torch.uint64),
                             layer_indices=tuple(range(LAYERS)), device_layer_num=LAYERS, page_size=PAGE,
                             kv_lora_rank=radius, qk_rope_head_dim=rope, kv_cache_dim=radius + rope,
                             dtype=torch.float32, device=torch.device("cpu"))
        pools.append(MLATokenToKVPoolHost(info, 2.0, 0, PAGE, "page_first", pin_memory=False, device="cpu",
                                          device_capacity_tokens=DEVICE_TOKENS, start_layer=0,
                                          end_layer=LAYERS - 1, target_layer_num=LAYERS))
    stores = [MooncakeStore(storage_config(master.addr, mla=True), p) for p in pools]
    for s, p in zip(stores, pools):
        s.register_mem_pool_host(p)
    fill_pages(pools[0], 0, 3, seed=3)
    keys = ["mla-1", "mla-2", "mla-3"]
    assert stores[0].batch_set_v1(keys, token_indices(0, 3)) == [True] * 3
    assert stores[1].batch_exists(keys) == 3
    assert stores[1].batch_get_v1(keys, token_indices(5, 3)) == [True] * 3
    assert same_pages(pools[0], 0, pools[1], 5, 3)


def test_standalone_storage_through_a_client_process(master, client_process_factory):
    """SGLang's standalone_storage mode: the host pool comes from
    mooncake.store.MooncakeHostMemAllocator and the store is set up with
    setup_dummy against a gostore-client process that owns the segment."""
    client = client_process_factory(master)
    pools = [mha_host_pool(allocator_type="mooncake") for _ in range(2)]
    stores = []
    for p in pools:
        s = MooncakeStore(storage_config(master.addr, standalone_storage=True,
                                         client_server_address=client.server_address), p)
        s.register_mem_pool_host(p)
        stores.append(s)
    fill_pages(pools[0], 0, 4, seed=7)
    keys = [f"standalone-{i}" for i in range(4)]
    assert stores[0].batch_set_v1(keys, token_indices(0, 4)) == [True] * 4
    assert stores[1].batch_exists(keys) == 4
    assert stores[1].batch_get_v1(keys, token_indices(6, 4)) == [True] * 4
    assert same_pages(pools[0], 0, pools[1], 6, 4)
