"""LMCache's own Mooncake store remote connector (``lmcache.v1.
storage_backend.connector.mooncakestore_connector``, from the installed
``lmcache`` package, unchanged) on gostore: ``mooncake.store`` resolves to
gostore (GOSTORE_AS_MOONCAKE=1, set by ``make test-engines``), the
connector is made by LMCache's own factory from a ``mooncakestore://`` URL
and driven as LMCache's remote backend drives it (on its event loop
thread), against a real ``gostore-master``. Two connectors with their own
CPU backends stand for two LMCache instances sharing KV chunks: every
chunk read back is compared byte for byte, with and without LMCache's
chunk metadata header (``put_parts`` / ``batch_get_buffer`` against
``put_from`` / ``batch_get_into``)."""

from __future__ import annotations

import asyncio
import json
import threading

import pytest

lmcache = pytest.importorskip("lmcache", reason="LMCache is not installed here: `make test-engines` installs it")
torch = pytest.importorskip("torch")

from lmcache.utils import CacheEngineKey  # noqa: E402
from lmcache.v1.config import LMCacheEngineConfig  # noqa: E402
from lmcache.v1.metadata import LMCacheMetadata  # noqa: E402
from lmcache.v1.storage_backend.connector import CreateConnector  # noqa: E402
from lmcache.v1.storage_backend.local_cpu_backend import LocalCPUBackend  # noqa: E402

import gostore  # noqa: E402

CHUNK = 16
KV_SHAPE = (2, 2, CHUNK, 2, 8)  # layers, k/v, tokens, heads, head size


@pytest.fixture
def loop():
    lp = asyncio.new_event_loop()
    t = threading.Thread(target=lp.run_forever, daemon=True)
    t.start()
    yield lp
    lp.call_soon_threadsafe(lp.stop)
    t.join(10)
    lp.close()


def lmcache_instance(master_addr: str, loop, save_chunk_meta: bool, use_json: str = ""):
    """LMCache's config, CPU backend and connector, as one LMCache worker
    makes them for remote_url=mooncakestore://."""
    extra = {"save_chunk_meta": save_chunk_meta}
    if not use_json:
        extra.update({"local_hostname": "127.0.0.1", "metadata_server": "P2PHANDSHAKE",
                      "master_server_address": master_addr, "protocol": "tcp",
                      "global_segment_size": 32 << 20, "local_buffer_size": 16 << 20, "transfer_timeout": 10})
    cfg = LMCacheEngineConfig.from_defaults(chunk_size=CHUNK, local_cpu=False, max_local_cpu_size=0.05,
                                            remote_url="mooncakestore://unused:0", remote_serde="naive",
                                            extra_config=extra)
    md = LMCacheMetadata(model_name="tiny", world_size=1, local_world_size=1, worker_id=0, local_worker_id=0,
                         kv_dtype=torch.bfloat16, kv_shape=KV_SHAPE, chunk_size=CHUNK)
    backend = LocalCPUBackend(cfg, md)
    conn = CreateConnector(cfg.remote_url, loop, backend, cfg, md)
    return conn, backend, md


def run(loop, coro):
    return asyncio.run_coroutine_threadsafe(coro, loop).result(60)


def chunk(backend, md, seed: int):
    obj = backend.allocate(md.get_shapes(), md.get_dtypes())
    g = torch.Generator().manual_seed(seed)
    raw = obj.raw_tensor.view(torch.uint8)
    raw.copy_(torch.randint(0, 256, raw.shape, generator=g, dtype=torch.uint8))
    return obj


def key(h: int) -> CacheEngineKey:
    return CacheEngineKey("tiny", 1, 0, h, torch.bfloat16)


def test_mooncake_store_is_gostore():
    import mooncake.store

    assert mooncake.store.MooncakeDistributedStore is gostore.MooncakeDistributedStore


@pytest.mark.parametrize("save_chunk_meta", [True, False], ids=["put_parts+header", "put_from"])
def test_chunks_put_by_one_instance_are_read_by_another(master, loop, save_chunk_meta):
    writer, wb, md = lmcache_instance(master.addr, loop, save_chunk_meta)
    reader, rb, _ = lmcache_instance(master.addr, loop, save_chunk_meta)
    assert isinstance(writer.getWrappedConnector().store, gostore.MooncakeDistributedStore)
    keys = [key(0x1000 + i) for i in range(4)]
    objs = [chunk(wb, md, seed=i) for i in range(4)]
    expected = [bytes(o.raw_tensor.view(torch.uint8).numpy()) for o in objs]
    assert not run(loop, reader.exists(keys[0]))

    for o in objs[:3]:
        o.ref_count_up()  # the instrumented connector releases each after its put
    run(loop, writer.batched_put(keys[:3], objs[:3]))
    run(loop, writer.put(keys[3], objs[3]))
    assert run(loop, reader.exists(keys[0])) and reader.exists_sync(keys[3])
    missing = key(0xdead)
    assert run(loop, reader.batched_async_contains("lookup-1", keys + [missing])) == 4
    assert run(loop, reader.batched_async_contains("lookup-2", [missing] + keys)) == 0

    got = run(loop, reader.batched_get(keys + [missing]))
    assert got[4] is None
    for g, want in zip(got[:4], expected):
        assert g is not None
        assert bytes(g.raw_tensor.view(torch.uint8).numpy()[:len(want)]) == want
        assert g.get_shapes() == md.get_shapes()
    run(loop, writer.close())
    run(loop, reader.close())


def test_a_partial_last_chunk(master, loop):
    """A chunk shorter than chunk_size (the end of a prompt) comes back with
    its own token count (save_chunk_meta off: the size read says it)."""
    writer, wb, md = lmcache_instance(master.addr, loop, save_chunk_meta=False)
    reader, _, _ = lmcache_instance(master.addr, loop, save_chunk_meta=False)
    inner = writer.getWrappedConnector()
    full = chunk(wb, md, seed=9)
    tokens = 5
    part = inner.single_token_size * tokens
    # What LMCache's put_from writes for a 5-token chunk: its first bytes.
    data = bytes(full.raw_tensor.view(torch.uint8).numpy())
    assert inner.store.put("tiny@1@0@77@bfloat16", data[:part]) == 0
    got = run(loop, reader.batched_get([key(0x77)]))[0]
    assert got is not None and got.get_size() == part
    assert bytes(got.raw_tensor.view(torch.uint8).numpy()[:part]) == data[:part]


def test_config_from_a_json_file(master, loop, tmp_path, monkeypatch):
    path = tmp_path / "mooncake.json"
    path.write_text(json.dumps({"local_hostname": "127.0.0.1", "metadata_server": "P2PHANDSHAKE",
                                "master_server_address": master.addr, "protocol": "tcp",
                                "global_segment_size": 32 << 20, "local_buffer_size": 16 << 20}))
    monkeypatch.setenv("MOONCAKE_CONFIG_PATH", str(path))
    writer, wb, md = lmcache_instance("", loop, save_chunk_meta=True, use_json=str(path))
    reader, _, _ = lmcache_instance("", loop, save_chunk_meta=True, use_json=str(path))
    obj = chunk(wb, md, seed=3)
    want = bytes(obj.raw_tensor.view(torch.uint8).numpy())
    run(loop, writer.put(key(0x42), obj))
    got = run(loop, reader.batched_get([key(0x42)]))[0]
    assert got is not None and bytes(got.raw_tensor.view(torch.uint8).numpy()[:len(want)]) == want
