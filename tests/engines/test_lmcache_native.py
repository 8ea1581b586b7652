"""gostore's own LMCache connector (gostore.integrations.lmcache), loaded
by LMCache's own connector factory as the ``gostore`` remote storage
plugin and driven on LMCache's event loop, against a real gostore-master."""

from __future__ import annotations

import pytest

lmcache = pytest.importorskip("lmcache", reason="LMCache is not installed here: `make test-engines` installs it")
torch = pytest.importorskip("torch")

from lmcache.v1.config import LMCacheEngineConfig  # noqa: E402
from lmcache.v1.metadata import LMCacheMetadata  # noqa: E402
from lmcache.v1.storage_backend.connector import CreateConnector  # noqa: E402
from lmcache.v1.storage_backend.local_cpu_backend import LocalCPUBackend  # noqa: E402

from gostore.integrations.lmcache import GostoreConnector  # noqa: E402
from test_lmcache_mooncake import CHUNK, KV_SHAPE, chunk, key, lmcache_instance, loop, run  # noqa: E402,F401


def gostore_instance(master_addr: str, loop, kv_shape=KV_SHAPE, url_in="plugin"):
    extra = {"remote_storage_plugin.gostore.module_path": "gostore.integrations.lmcache",
             "remote_storage_plugin.gostore.class_name": "GostoreConnectorAdapter",
             "global_segment_size": 32 << 20, "local_buffer_size": 16 << 20}
    if url_in == "plugin":
        extra["remote_storage_plugin.gostore.url"] = f"gostore://{master_addr}"
    else:
        extra["master_server_address"] = master_addr
    cfg = LMCacheEngineConfig.from_defaults(chunk_size=CHUNK, local_cpu=False, max_local_cpu_size=0.05,
                                            remote_storage_plugins=["gostore"], extra_config=extra)
    md = LMCacheMetadata(model_name="tiny", world_size=1, local_world_size=1, worker_id=0, local_worker_id=0,
                         kv_dtype=torch.bfloat16, kv_shape=kv_shape, chunk_size=CHUNK)
    backend = LocalCPUBackend(cfg, md)
    conn = CreateConnector("plugin://gostore", loop, backend, cfg, md, plugin_name="gostore")
    return conn, backend, md


@pytest.mark.parametrize("url_in", ["plugin", "extra_config"])
def test_lmcaches_factory_loads_it_and_two_instances_share_chunks(master, loop, url_in):
    writer, wb, md = gostore_instance(master.addr, loop, url_in=url_in)
    reader, _, _ = gostore_instance(master.addr, loop, url_in=url_in)
    inner = writer.getWrappedConnector()
    assert isinstance(inner, GostoreConnector) and inner.zero_copy
    keys = [key(0x2000 + i) for i in range(4)]
    objs = [chunk(wb, md, seed=40 + i) for i in range(4)]
    want = [bytes(o.raw_tensor.view(torch.uint8).numpy()) for o in objs]
    for o in objs[:3]:
        o.ref_count_up()
    run(loop, writer.batched_put(keys[:3], objs[:3]))
    run(loop, writer.put(keys[3], objs[3]))
    assert run(loop, reader.batched_async_contains("l", keys + [key(1)])) == 4
    assert reader.exists_sync(keys[0]) and not reader.exists_sync(key(1))
    got = run(loop, reader.batched_get(keys + [key(1)]))
    assert got[4] is None
    for g, w in zip(got[:4], want):
        assert g is not None and bytes(g.raw_tensor.view(torch.uint8).numpy()) == w
    single = run(loop, reader.getWrappedConnector().get(keys[2]))
    assert single is not None and bytes(single.raw_tensor.view(torch.uint8).numpy()) == want[2]


def test_a_partial_chunk_and_a_foreign_layout(master, loop):
    writer, wb, md = gostore_instance(master.addr, loop)
    reader, _, _ = gostore_instance(master.addr, loop)
    full = chunk(wb, md, seed=8)
    tokens = 5
    shapes = [torch.Size([s[0], s[1], tokens, s[3]]) for s in md.get_shapes()]
    part = wb.allocate(shapes, md.get_dtypes())
    part.raw_tensor.view(torch.uint8).copy_(full.raw_tensor.view(torch.uint8)[: part.get_size()])
    want = bytes(part.raw_tensor.view(torch.uint8).numpy())
    run(loop, writer.put(key(0x55), part))
    got = run(loop, reader.batched_get([key(0x55)]))[0]
    # As LMCache's reshape_partial_chunk leaves it: the token count in
    # meta.shape, the chunk's bytes in front.
    assert got is not None and got.meta.shape == shapes[0] and got.get_size() == part.get_size()
    assert bytes(got.raw_tensor.view(torch.uint8).numpy()[: len(want)]) == want
    # An engine with another KV shape (more heads) under the same key: a miss.
    other, _, _ = gostore_instance(master.addr, loop, kv_shape=(2, 2, CHUNK, 4, 8))
    run(loop, writer.put(key(0x56), chunk(wb, md, seed=9)))
    assert run(loop, other.batched_get([key(0x56)])) == [None]


def test_its_chunks_read_by_lmcaches_mooncake_connector(master, loop):
    """Same keys, same layout as LMCache's Mooncake connector with
    save_chunk_meta on: a deployment can switch either way."""
    writer, wb, md = gostore_instance(master.addr, loop)
    mooncake_reader, _, _ = lmcache_instance(master.addr, loop, save_chunk_meta=True)
    obj = chunk(wb, md, seed=77)
    want = bytes(obj.raw_tensor.view(torch.uint8).numpy())
    run(loop, writer.put(key(0x99), obj))
    got = run(loop, mooncake_reader.batched_get([key(0x99)]))[0]
    assert got is not None and bytes(got.raw_tensor.view(torch.uint8).numpy()) == want
