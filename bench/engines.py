#!/usr/bin/env python3
"""The engines' storage paths on gostore: each engine's own Mooncake
integration (through GOSTORE_AS_MOONCAKE) against gostore's connector for
it, one writer and one reader on this host, beside the memcpy rate of a
batch measured in the same run (the limit). Each figure is the median of
the rounds, taken in turns. It never fails on a number.

* ``--engine sglang`` (in SGLang's virtualenv): HiCache L3 pages on SGLang's
  real host pool (page_first, bf16): batch_set_v1 / batch_get_v1.
* ``--engine lmcache`` (in LMCache's virtualenv): KV chunks from LMCache's
  CPU backend: batched_put / batched_get, LMCache's Mooncake connector with
  and without its chunk header, and gostore's connector.

    GOSTORE_AS_MOONCAKE=1 .venv-engines/<engine>/bin/python bench/engines.py --engine <engine> [--json PATH]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time

# SGLang's host pool, built as the engine tests build it.
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "tests", "engines"))
os.environ.setdefault("GOSTORE_AS_MOONCAKE", "1")

import torch  # noqa: E402

import gostore  # noqa: E402

LAYERS, HEADS, HEAD_DIM, PAGE = 8, 8, 128, 16
PAGES = 64  # a batch: one prefix of 1024 tokens


def pool():
    from sglang_pools import mha_host_pool

    p = mha_host_pool(layers=LAYERS, heads=HEADS, head_dim=HEAD_DIM, page=PAGE, device_tokens=2 * PAGES * PAGE,
                      dtype=torch.bfloat16)
    p.kv_buffer.view(torch.uint8).copy_(torch.randint(0, 256, p.kv_buffer.view(torch.uint8).shape, dtype=torch.uint8))
    return p


def config(master: str, native: bool):
    from sglang.srt.mem_cache.hicache_storage import HiCacheStorageConfig
    extra = {"master_server_address": master, "protocol": "tcp", "local_hostname": "127.0.0.1",
             "global_segment_size": 1 << 30}
    if native:
        extra.update(backend_name="gostore", module_path="gostore.integrations.sglang",
                     class_name="GostoreHiCacheStorage", interface_v1=1)
    return HiCacheStorageConfig(tp_rank=0, tp_size=1, pp_rank=0, pp_size=1, attn_cp_rank=0, attn_cp_size=1,
                                is_mla_model=False, enable_storage_metrics=False, is_page_first_layout=True,
                                model_name="bench/model", extra_config=extra)


def make(master: str, native: bool, p):
    from sglang.srt.mem_cache.storage.backend_factory import StorageBackendFactory
    from sglang.srt.mem_cache.storage.mooncake_store.mooncake_store import MooncakeStore
    cfg = config(master, native)
    b = StorageBackendFactory.create_backend("dynamic", cfg, p) if native else MooncakeStore(cfg, p)
    b.register_mem_pool_host(p)
    return b


def page_bytes(p) -> int:
    _, sizes = p.get_page_buffer_meta(torch.arange(0, PAGE))
    return sum(sizes)


def memcpy_rate(nbytes: int, seconds: float = 0.5) -> float:
    a = torch.empty(nbytes, dtype=torch.uint8)
    b = torch.randint(0, 256, (nbytes,), dtype=torch.uint8)
    n, t0 = 0, time.perf_counter()
    while time.perf_counter() - t0 < seconds:
        a.copy_(b)
        n += 1
    return n * nbytes / (time.perf_counter() - t0)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--engine", choices=["sglang", "lmcache"], default="sglang")
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--json", default="")
    args = ap.parse_args()
    master = gostore.EmbeddedMaster(rpc_port=0, metrics_port=-1, log_level="warn")
    out = (bench_sglang if args.engine == "sglang" else bench_lmcache)(master, args.rounds)
    if args.json:
        with open(args.json, "w") as f:
            json.dump(out, f, indent=2)
    master.stop()
    return 0


def bench_sglang(master, rounds: int) -> dict:
    backends = {}
    for name, native in (("SGLang's Mooncake backend", False), ("gostore's backend", True)):
        w, r = pool(), pool()
        backends[name] = (make(master.address, native, w), make(master.address, native, r), w, r)
    nbytes = PAGES * page_bytes(next(iter(backends.values()))[2])
    limit = memcpy_rate(nbytes)
    results = {name: {"set": [], "get": []} for name in backends}
    for rnd in range(rounds):
        for name, (writer, reader, wp, rp) in backends.items():
            keys = [f"r{rnd}-p{i}" for i in range(PAGES)]
            src, dst = torch.arange(0, PAGES * PAGE), torch.arange(PAGES * PAGE, 2 * PAGES * PAGE)
            t0 = time.perf_counter()
            ok = writer.batch_set_v1(keys, src)
            t1 = time.perf_counter()
            got = reader.batch_get_v1(keys, dst)
            t2 = time.perf_counter()
            if not all(ok) or not all(got):
                print(f"{name}: round {rnd} failed: set {ok.count(True)}/{PAGES}, get {got.count(True)}/{PAGES}")
                continue
            results[name]["set"].append(nbytes / (t1 - t0))
            results[name]["get"].append(nbytes / (t2 - t1))
            writer.clear()
    print(f"\nSGLang HiCache L3 on gostore: batches of {PAGES} pages of {nbytes // PAGES >> 10} KiB "
          f"({LAYERS} layers, {HEADS} heads x {HEAD_DIM}, {PAGE} tokens, bf16), tcp, one host, "
          f"median of {rounds} rounds")
    print(f"limit: memcpy of a batch ({nbytes >> 20} MiB) in this run: {limit / 1e9:.2f} GB/s")
    print(f"{'backend':<28} {'set GB/s':>9} {'get GB/s':>9} {'set % limit':>12} {'get % limit':>12}")
    out = {"pages": PAGES, "page_bytes": nbytes // PAGES, "memcpy_gbps": limit / 1e9, "backends": {}}
    for name, r in results.items():
        if not r["set"]:
            continue
        s, g = statistics.median(r["set"]), statistics.median(r["get"])
        print(f"{name:<28} {s / 1e9:9.2f} {g / 1e9:9.2f} {100 * s / limit:11.0f}% {100 * g / limit:11.0f}%")
        out["backends"][name] = {"set_gbps": s / 1e9, "get_gbps": g / 1e9}
    return out


def bench_lmcache(master, rounds: int) -> dict:
    import asyncio
    import threading

    from lmcache.utils import CacheEngineKey
    from lmcache.v1.config import LMCacheEngineConfig
    from lmcache.v1.metadata import LMCacheMetadata
    from lmcache.v1.storage_backend.connector import CreateConnector
    from lmcache.v1.storage_backend.local_cpu_backend import LocalCPUBackend

    chunk, kv_shape, n = 256, (8, 2, 256, 8, 128), 8  # 8 chunks of 8 MiB a batch
    loop = asyncio.new_event_loop()
    threading.Thread(target=loop.run_forever, daemon=True).start()

    def run(c):
        return asyncio.run_coroutine_threadsafe(c, loop).result(120)

    def instance(kind: str):
        if kind == "gostore":
            extra = {"remote_storage_plugin.gostore.module_path": "gostore.integrations.lmcache",
                     "remote_storage_plugin.gostore.class_name": "GostoreConnectorAdapter",
                     "remote_storage_plugin.gostore.url": f"gostore://{master.address}",
                     "global_segment_size": 1 << 30, "local_buffer_size": 64 << 20}
            cfg = LMCacheEngineConfig.from_defaults(chunk_size=chunk, local_cpu=False, max_local_cpu_size=0.6,
                                                    remote_storage_plugins=["gostore"], extra_config=extra)
            url = "plugin://gostore"
        else:
            extra = {"local_hostname": "127.0.0.1", "metadata_server": "P2PHANDSHAKE",
                     "master_server_address": master.address, "protocol": "tcp", "global_segment_size": 1 << 30,
                     "local_buffer_size": 256 << 20, "transfer_timeout": 60,
                     "save_chunk_meta": kind == "mooncake, chunk header"}
            cfg = LMCacheEngineConfig.from_defaults(chunk_size=chunk, local_cpu=False, max_local_cpu_size=0.6,
                                                    remote_url="mooncakestore://unused:0", remote_serde="naive",
                                                    extra_config=extra)
            url = cfg.remote_url
        md = LMCacheMetadata(model_name="bench", world_size=1, local_world_size=1, worker_id=0, local_worker_id=0,
                             kv_dtype=torch.bfloat16, kv_shape=kv_shape, chunk_size=chunk)
        be = LocalCPUBackend(cfg, md)
        conn = CreateConnector(url, loop, be, cfg, md, plugin_name="gostore" if kind == "gostore" else None)
        return conn, be, md

    kinds = ["LMCache's Mooncake connector, chunk header", "LMCache's Mooncake connector, put_from",
             "gostore's connector"]
    setups = {}
    for k in kinds:
        kind = "gostore" if k.startswith("gostore") else ("mooncake, chunk header" if "header" in k else "mooncake")
        w, wb, md = instance(kind)
        r, _, _ = instance(kind)
        setups[k] = (w, wb, md, r)
    w0, wb0, md0, _ = setups[kinds[0]]
    probe = wb0.allocate(md0.get_shapes(), md0.get_dtypes())
    nbytes = n * probe.get_size()
    probe.ref_count_down()
    limit = memcpy_rate(nbytes)
    res = {k: {"put": [], "get": []} for k in kinds}
    for rnd in range(rounds):
        for k in kinds:
            w, wb, md, r = setups[k]
            keys = [CacheEngineKey("bench", 1, 0, rnd * 1000 + i + 7919 * kinds.index(k), torch.bfloat16)
                    for i in range(n)]
            objs = [wb.allocate(md.get_shapes(), md.get_dtypes()) for _ in range(n)]
            t0 = time.perf_counter()
            run(w.batched_put(keys, objs))
            t1 = time.perf_counter()
            got = run(r.batched_get(keys))
            t2 = time.perf_counter()
            ok = sum(g is not None for g in got)
            for g in got:
                if g is not None:
                    g.ref_count_down()
            if ok != n:
                print(f"{k}: round {rnd}: {ok}/{n} chunks read back")
                continue
            res[k]["put"].append(nbytes / (t1 - t0))
            res[k]["get"].append(nbytes / (t2 - t1))
    print(f"\nLMCache remote chunks on gostore: batches of {n} chunks of {nbytes // n >> 20} MiB "
          f"(8 layers, 8 heads x 128, 256 tokens, bf16), one host, median of {rounds} rounds")
    print(f"limit: memcpy of a batch ({nbytes >> 20} MiB) in this run: {limit / 1e9:.2f} GB/s")
    print(f"{'connector':<44} {'put GB/s':>9} {'get GB/s':>9}")
    out = {"chunks": n, "chunk_bytes": nbytes // n, "memcpy_gbps": limit / 1e9, "connectors": {}}
    for k, v in res.items():
        if v["put"]:
            p_, g_ = statistics.median(v["put"]), statistics.median(v["get"])
            print(f"{k:<44} {p_ / 1e9:9.2f} {g_ / 1e9:9.2f}")
            out["connectors"][k] = {"put_gbps": p_ / 1e9, "get_gbps": g_ / 1e9}
    return out


if __name__ == "__main__":
    sys.exit(main())
