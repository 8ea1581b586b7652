#!/usr/bin/env python3
"""The engines' storage call patterns, through each engine's own code, on
gostore and on Mooncake's wheel, in one run. Each figure is the median of
the rounds, taken in turns; each is shown beside its limits measured in the
same run: the store's raw batch API moving the same objects (multi-buffer
zero-copy put and get, the engine code taken away) and memcpy of a batch.
Bytes read back are checked in every round. It never fails on a number.

* ``--engine sglang``: HiCache L3 pages on SGLang's real host pool
  (page_first, bf16): ``batch_set_v1`` / ``batch_get_v1`` of 64 pages,
  through gostore's backend and SGLang's Mooncake backend.
* ``--engine lmcache``: KV chunks from LMCache's CPU backend:
  ``batched_put`` / ``batched_get`` through gostore's connector and
  LMCache's Mooncake connector (with and without its chunk header).
* ``--engine vllm``: a 2k-token request of a Llama-3-8B-shaped model
  (32 layers, 8 KV heads of 128, bf16, blocks of 16 tokens): the save of
  its 128 blocks by one worker (one key per block, one buffer per layer)
  and their lookup and load by another, through gostore's connector and
  vLLM's Mooncake store connector, driven as vLLM's scheduler and model
  runner drive them (tests/engines/vllm_harness.py).

The engine's Mooncake integration runs twice: on gostore (``mooncake.store``
resolved to gostore in this process) and, when Mooncake's wheel is there
(``make bench-peers`` puts it in .venv-peers/mooncake-wheel, or point
GOSTORE_BENCH_MOONCAKE_WHEEL at a ``pip install --target`` of it), on the
real wheel and its ``mooncake_master``, in a second process that takes its
turn in every round.

    .venv-engines/<engine>/bin/python bench/engines.py --engine <engine> [--rounds N] [--json PATH]
"""

from __future__ import annotations

import argparse
import json
import math
import os
import statistics
import subprocess
import sys
import tempfile
import time
from typing import Callable, Dict, List, Optional, Tuple

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
sys.path.insert(0, os.path.join(ROOT, "tests", "engines"))  # the engines' harnesses

# The peer process (Mooncake's wheel) is this script with this variable set.
ON_MOONCAKE = os.environ.get("GOSTORE_BENCH_PEER") == "mooncake"
STORE = "Mooncake" if ON_MOONCAKE else "gostore"

import mooncake_wheel  # noqa: E402  (bench/, this script's directory)
import torch  # noqa: E402

if not ON_MOONCAKE:
    import gostore  # noqa: E402
    import gostore.mooncake_alias  # noqa: E402

    gostore.mooncake_alias.install()  # the engines' Mooncake integrations run on gostore

Round = Callable[[int], Optional[Dict[str, float]]]  # round number -> {"put": B/s, "get": B/s}, None if it failed
CLOSERS: List[Callable[[], object]] = []  # every store and connector made, closed before its master stops


def close_all() -> None:
    while CLOSERS:
        CLOSERS.pop()()


def memcpy_rate(nbytes: int, seconds: float = 0.5) -> float:
    a = torch.empty(nbytes, dtype=torch.uint8)
    b = torch.randint(0, 256, (nbytes,), dtype=torch.uint8)
    a.copy_(b)  # the destination's pages faulted in first, as a store's buffers are
    n, t0 = 0, time.perf_counter()
    while time.perf_counter() - t0 < seconds:
        a.copy_(b)
        n += 1
    return n * nbytes / (time.perf_counter() - t0)


def open_store(master: str, segment: int = 1 << 30):
    """A store of whichever MooncakeDistributedStore this process has."""
    from mooncake.store import MooncakeDistributedStore

    s = MooncakeDistributedStore()
    rc = s.setup("127.0.0.1", "P2PHANDSHAKE", segment, 64 << 20, "tcp", "", master)
    if rc != 0:
        raise RuntimeError(f"{STORE}: setup against {master} failed: {rc}")
    CLOSERS.append(s.close)
    return s


def raw_batch(master: str, nobj: int, parts: List[int]) -> Round:
    """The limit: the store's own multi-buffer batch calls on the engine's
    objects (nobj keys of len(parts) buffers), writer and reader apart."""
    writer, reader = open_store(master), open_store(master)
    size = nobj * sum(parts)
    src = torch.randint(0, 256, (size,), dtype=torch.uint8)
    dst = torch.zeros(size, dtype=torch.uint8)
    for s, t in ((writer, src), (reader, dst)):
        rc = s.register_buffer(t.data_ptr(), size)
        if rc != 0:
            raise RuntimeError(f"{STORE}: register_buffer failed: {rc}")

    def ptrs(t):
        out, off = [], t.data_ptr()
        for _ in range(nobj):
            row = []
            for p in parts:
                row.append(off)
                off += p
            out.append(row)
        return out

    sizes = [list(parts) for _ in range(nobj)]
    src_ptrs, dst_ptrs = ptrs(src), ptrs(dst)  # once, outside the timed calls

    def rnd(r: int):
        keys = [f"raw/{r}/{i}" for i in range(nobj)]
        dst.zero_()
        t0 = time.perf_counter()
        put = writer.batch_put_from_multi_buffers(keys, src_ptrs, sizes)
        t1 = time.perf_counter()
        got = reader.batch_get_into_multi_buffers(keys, dst_ptrs, sizes)
        t2 = time.perf_counter()
        ok = all(c == 0 for c in put) and all(n == sum(parts) for n in got) and torch.equal(src, dst)
        writer.remove_all()
        if not ok:
            print(f"{STORE} raw batch: round {r} failed: put {list(put)[:4]}, get {list(got)[:4]}", file=sys.stderr)
            return None
        return {"put": size / (t1 - t0), "get": size / (t2 - t1)}

    return rnd


# ---- SGLang -----------------------------------------------------------------

SG_LAYERS, SG_HEADS, SG_HEAD_DIM, SG_PAGE, SG_PAGES = 8, 8, 128, 16, 64  # a batch: a prefix of 1024 tokens


def sglang(master: str) -> Tuple[dict, Dict[str, Round], Tuple[int, List[int]]]:
    from sglang.srt.mem_cache.hicache_storage import HiCacheStorageConfig
    from sglang.srt.mem_cache.storage.backend_factory import StorageBackendFactory
    from sglang.srt.mem_cache.storage.mooncake_store.mooncake_store import MooncakeStore
    from sglang_pools import mha_host_pool

    def pool():
        p = mha_host_pool(layers=SG_LAYERS, heads=SG_HEADS, head_dim=SG_HEAD_DIM, page=SG_PAGE,
                          device_tokens=2 * SG_PAGES * SG_PAGE, dtype=torch.bfloat16)
        raw = p.kv_buffer.view(torch.uint8)
        raw.copy_(torch.randint(0, 256, raw.shape, dtype=torch.uint8))
        return p

    def make(native: bool, p):
        extra = {"master_server_address": master, "protocol": "tcp", "local_hostname": "127.0.0.1",
                 "global_segment_size": 1 << 30}
        if native:
            extra.update(backend_name="gostore", module_path="gostore.integrations.sglang",
                         class_name="GostoreHiCacheStorage", interface_v1=1)
        cfg = HiCacheStorageConfig(tp_rank=0, tp_size=1, pp_rank=0, pp_size=1, attn_cp_rank=0, attn_cp_size=1,
                                   is_mla_model=False, enable_storage_metrics=False, is_page_first_layout=True,
                                   model_name="bench/model", extra_config=extra)
        b = StorageBackendFactory.create_backend("dynamic", cfg, p) if native else MooncakeStore(cfg, p)
        b.register_mem_pool_host(p)
        # SGLang's Mooncake backend leaves its store to the destructor.
        CLOSERS.append(b.close if native else b.store.close)
        return b

    pools = []  # every kind's (writer pool, reader pool)

    def kind(native: bool) -> Round:
        wp, rp = pool(), pool()
        pools.append((wp, rp))
        writer, reader = make(native, wp), make(native, rp)
        src, dst = torch.arange(0, SG_PAGES * SG_PAGE), torch.arange(SG_PAGES * SG_PAGE, 2 * SG_PAGES * SG_PAGE)

        def rnd(r: int):
            keys = [f"r{r}-p{i}" for i in range(SG_PAGES)]
            t0 = time.perf_counter()
            ok = writer.batch_set_v1(keys, src)
            t1 = time.perf_counter()
            got = reader.batch_get_v1(keys, dst)
            t2 = time.perf_counter()
            same = all(torch.equal(_sg_page(wp, int(a)), _sg_page(rp, int(b)))
                       for a, b in ((src[0], dst[0]), (src[-SG_PAGE], dst[-SG_PAGE])))
            writer.clear()
            if not all(ok) or not all(got) or not same:
                print(f"{STORE} sglang: round {r}: set {ok.count(True)}/{SG_PAGES}, get {got.count(True)}/{SG_PAGES},"
                      f" bytes {'equal' if same else 'DIFFER'}", file=sys.stderr)
                return None
            return {"put": nbytes / (t1 - t0), "get": nbytes / (t2 - t1)}

        return rnd

    kinds = {"SGLang's Mooncake backend": kind(False)}
    if not ON_MOONCAKE:
        kinds["gostore's backend"] = kind(True)
    _, sizes = pools[0][0].get_page_buffer_meta(torch.arange(0, SG_PAGE))
    nbytes = SG_PAGES * sum(sizes)  # read by the rounds, which run later
    title = (f"SGLang HiCache L3: batch_set_v1 / batch_get_v1 of {SG_PAGES} pages of {sum(sizes) >> 10} KiB "
             f"({SG_LAYERS} layers, {SG_HEADS} heads x {SG_HEAD_DIM}, {SG_PAGE} tokens, bf16, page_first)")
    return {"title": title, "bytes": nbytes, "pages": SG_PAGES}, kinds, (SG_PAGES, [int(s) for s in sizes])


def _sg_page(pool, first_token: int) -> torch.Tensor:
    """A page's bytes in a page_first host pool: every layer's K and V."""
    ptrs, sizes = pool.get_page_buffer_meta(torch.arange(first_token, first_token + SG_PAGE))
    raw = pool.kv_buffer.view(torch.uint8).reshape(-1)
    base = raw.data_ptr()
    return torch.cat([raw[p - base:p - base + n] for p, n in zip(ptrs, sizes)])


# ---- LMCache ----------------------------------------------------------------

LM_CHUNK, LM_SHAPE, LM_N = 256, (8, 2, 256, 8, 128), 8  # 8 chunks of 8 MiB a batch


def lmcache(master: str) -> Tuple[dict, Dict[str, Round], Tuple[int, List[int]]]:
    import asyncio
    import threading

    from lmcache.utils import CacheEngineKey
    from lmcache.v1.config import LMCacheEngineConfig
    from lmcache.v1.metadata import LMCacheMetadata
    from lmcache.v1.storage_backend.connector import CreateConnector
    from lmcache.v1.storage_backend.local_cpu_backend import LocalCPUBackend

    loop = asyncio.new_event_loop()
    threading.Thread(target=loop.run_forever, daemon=True).start()

    def run(c):
        return asyncio.run_coroutine_threadsafe(c, loop).result(120)

    def instance(kind: str):
        if kind == "gostore":
            extra = {"remote_storage_plugin.gostore.module_path": "gostore.integrations.lmcache",
                     "remote_storage_plugin.gostore.class_name": "GostoreConnectorAdapter",
                     "remote_storage_plugin.gostore.url": f"gostore://{master}",
                     "global_segment_size": 1 << 30, "local_buffer_size": 64 << 20}
            cfg = LMCacheEngineConfig.from_defaults(chunk_size=LM_CHUNK, local_cpu=False, max_local_cpu_size=0.6,
                                                    remote_storage_plugins=["gostore"], extra_config=extra)
            url = "plugin://gostore"
        else:
            extra = {"local_hostname": "127.0.0.1", "metadata_server": "P2PHANDSHAKE",
                     "master_server_address": master, "protocol": "tcp", "global_segment_size": 1 << 30,
                     "local_buffer_size": 256 << 20, "transfer_timeout": 60, "save_chunk_meta": kind == "header",
                     # Mooncake 0.3.13's setup(dict) reads the master only
                     # as master_server_addr (gostore reads either name);
                     # LMCache forwards mooncake_* keys to it.
                     "mooncake_master_server_addr": master}
            cfg = LMCacheEngineConfig.from_defaults(chunk_size=LM_CHUNK, local_cpu=False, max_local_cpu_size=0.6,
                                                    remote_url="mooncakestore://unused:0", remote_serde="naive",
                                                    extra_config=extra)
            url = cfg.remote_url
        md = LMCacheMetadata(model_name="bench", world_size=1, local_world_size=1, worker_id=0, local_worker_id=0,
                             kv_dtype=torch.bfloat16, kv_shape=LM_SHAPE, chunk_size=LM_CHUNK)
        be = LocalCPUBackend(cfg, md)
        conn = CreateConnector(url, loop, be, cfg, md, plugin_name="gostore" if kind == "gostore" else None)
        CLOSERS.append(lambda: run(conn.close()))
        return conn, be, md

    def kind(which: str, salt: int) -> Round:
        w, wb, md = instance(which)
        r, _, _ = instance(which)

        def rnd(n: int):
            keys = [CacheEngineKey("bench", 1, 0, n * 1000 + i + 7919 * salt, torch.bfloat16) for i in range(LM_N)]
            objs = [wb.allocate(md.get_shapes(), md.get_dtypes()) for _ in range(LM_N)]
            want = [torch.randint(0, 256, (chunk,), dtype=torch.uint8) for _ in objs]
            for o, w_ in zip(objs, want):
                o.raw_tensor.view(torch.uint8)[:chunk].copy_(w_)
            t0 = time.perf_counter()
            run(w.batched_put(keys, objs))
            t1 = time.perf_counter()
            got = run(r.batched_get(keys))
            t2 = time.perf_counter()
            good = sum(g is not None and torch.equal(g.raw_tensor.view(torch.uint8)[:chunk], w_) for g, w_ in zip(got, want))
            for g in got:  # batched_put released objs; the reads are ours
                if g is not None:
                    g.ref_count_down()
            if good != LM_N:
                print(f"{STORE} lmcache {which}: round {n}: {good}/{LM_N} chunks read back whole", file=sys.stderr)
                return None
            return {"put": nbytes / (t1 - t0), "get": nbytes / (t2 - t1)}

        return rnd

    chunk = math.prod(LM_SHAPE) * 2  # bf16
    nbytes = LM_N * chunk
    kinds = {"LMCache's Mooncake connector, chunk header": kind("header", 0),
             "LMCache's Mooncake connector, put_from": kind("put_from", 1)}
    if not ON_MOONCAKE:
        kinds["gostore's connector"] = kind("gostore", 2)
    title = (f"LMCache remote chunks: batched_put / batched_get of {LM_N} chunks of {chunk >> 20} MiB "
             f"(8 layers, 8 heads x 128, {LM_CHUNK} tokens, bf16)")
    return {"title": title, "bytes": nbytes, "chunks": LM_N}, kinds, (LM_N, [chunk])


# ---- vLLM -------------------------------------------------------------------

VL_LAYERS, VL_HEADS, VL_HEAD, VL_BLOCK, VL_BLOCKS = 32, 8, 128, 16, 128  # a 2k-token request


def vllm(master: str) -> Tuple[dict, Dict[str, Round], Tuple[int, List[int]]]:
    import vllm_harness as vh

    tmp = tempfile.mkdtemp(prefix="gostore-bench-vllm-")
    ports = iter(range(mooncake_wheel.free_port(), 65535))
    prompt_len = VL_BLOCKS * VL_BLOCK + 1  # the last token is computed, never loaded

    def pair(native: bool, tag: str):
        d = os.path.join(tmp, tag)
        os.makedirs(d)
        p = vh.open_pair(master, d, native=native, segment="1GB", lookup_port=next(ports), patch=setattr,
                         setenv=os.environ.__setitem__, block=VL_BLOCK, blocks=VL_BLOCKS + 8, layers=VL_LAYERS,
                         heads=VL_HEADS, head=VL_HEAD, dtype=torch.bfloat16, local_buffer="64MB")
        CLOSERS.append(lambda: vh.close_pair(p))
        return p

    def kind(native: bool, salt: int) -> Round:
        tag = "native" if native else "mooncake"
        saver, loader = pair(native, tag + "-saver"), pair(native, tag + "-loader")
        per_block = vh.block_bytes(saver)

        def rnd(r: int):
            prompt = [1 + (r * 7919 + salt * 104729 + i) % 30000 for i in range(prompt_len)]
            req = vh.make_request(f"s{r}", prompt, VL_BLOCK)
            t0 = time.perf_counter()
            _, sblocks = vh.prefill(saver, req, prompt)
            vh.drain(saver)
            t1 = time.perf_counter()
            req2 = vh.make_request(f"l{r}", prompt, VL_BLOCK)
            hit, load_async, lblocks, meta = vh.allocate_hit(loader, req2, len(sblocks))
            vh.load(loader, req2, meta, load_async)
            t2 = time.perf_counter()
            n = hit // VL_BLOCK
            same = n == VL_BLOCKS and all(
                torch.equal(saver.kv[name][sblocks[i].block_id], loader.kv[name][lblocks[i].block_id])
                for name in saver.layers for i in (0, n // 2, n - 1))
            vh.finish(saver, req, sblocks)
            vh.finish(loader, req2, lblocks)
            (saver.worker.store if native else saver.worker.connector_worker.store).remove_all()
            if not same:
                print(f"{STORE} vllm {tag}: round {r}: {n}/{VL_BLOCKS} blocks hit, bytes "
                      f"{'equal' if same else 'differ or missing'}", file=sys.stderr)
                return None
            return {"put": VL_BLOCKS * per_block / (t1 - t0), "get": n * per_block / (t2 - t1)}

        return rnd

    kinds = {"vLLM's Mooncake store connector": kind(False, 0)}
    if not ON_MOONCAKE:
        kinds["gostore's connector"] = kind(True, 1)
    layer_block = 2 * VL_BLOCK * VL_HEADS * VL_HEAD * 2
    nbytes = VL_BLOCKS * VL_LAYERS * layer_block
    title = (f"vLLM KV connector: save and load of a {VL_BLOCKS * VL_BLOCK}-token request, {VL_BLOCKS} blocks of "
             f"{VL_LAYERS} layers x {layer_block >> 10} KiB ({VL_HEADS} KV heads x {VL_HEAD}, bf16)")
    return {"title": title, "bytes": nbytes, "blocks": VL_BLOCKS}, kinds, (VL_BLOCKS, [layer_block] * VL_LAYERS)


ENGINES = {"sglang": sglang, "lmcache": lmcache, "vllm": vllm}


def make_kinds(engine: str, master: str) -> Tuple[dict, Dict[str, Round]]:
    """The engine's paths, and the raw batch API on the same objects."""
    info, kinds, (nobj, parts) = ENGINES[engine](master)
    kinds["raw batch API"] = raw_batch(master, nobj, parts)
    return info, kinds


# ---- the Mooncake peer -------------------------------------------------------

class Peer:
    """This script in a second process on Mooncake's wheel: it sets up the
    engine's Mooncake integration and the raw batch, and runs a round when
    told to, so both stores take turns."""

    def __init__(self, engine: str, wheel: str):
        env = dict(os.environ, GOSTORE_BENCH_PEER="mooncake",
                   PYTHONPATH=os.pathsep.join(p for p in (wheel, os.environ.get("PYTHONPATH", "")) if p))
        env.pop("GOSTORE_AS_MOONCAKE", None)
        self.proc = subprocess.Popen([sys.executable, "-W", "ignore", os.path.abspath(__file__), "--engine", engine,
                                      "--serve"], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True, env=env)
        self.kinds = self._reply()["kinds"]

    def _reply(self) -> dict:
        for line in self.proc.stdout:
            if line.startswith("BENCH "):
                return json.loads(line[6:])
        raise RuntimeError(f"the Mooncake peer exited ({self.proc.wait()})")

    def round(self, r: int) -> dict:
        self.proc.stdin.write(f"{r}\n")
        self.proc.stdin.flush()
        return self._reply()["results"]

    def close(self) -> None:
        self.proc.stdin.close()
        try:
            self.proc.wait(60)
        except subprocess.TimeoutExpired:
            self.proc.kill()


def serve(engine: str) -> int:
    """The peer's side: Mooncake's own master, then rounds on request."""
    wheel = os.path.dirname(os.path.dirname(__import__("mooncake").__file__))
    master, addr, log_name = mooncake_wheel.start_master(wheel)
    try:
        kinds = make_kinds(engine, addr)[1]
        print("BENCH " + json.dumps({"kinds": list(kinds)}), flush=True)
        for line in sys.stdin:
            r = int(line)
            print("BENCH " + json.dumps({"results": {k: fn(r) for k, fn in kinds.items()}}), flush=True)
    except BaseException:
        print(f"the Mooncake peer failed; mooncake_master's log: {log_name}", file=sys.stderr)
        raise
    else:
        os.unlink(log_name)
    finally:
        close_all()
        master.terminate()
        master.wait(30)
    return 0


# ---- the run ----------------------------------------------------------------

def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--engine", choices=sorted(ENGINES), default="sglang")
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--json", default="")
    ap.add_argument("--serve", action="store_true", help=argparse.SUPPRESS)  # the Mooncake peer
    args = ap.parse_args()
    if args.serve:
        return serve(args.engine)

    master = gostore.EmbeddedMaster(rpc_port=0, metrics_port=-1, log_level="warn")
    info, kinds = make_kinds(args.engine, master.address)
    wheel = mooncake_wheel.wheel_dir()
    peer = Peer(args.engine, wheel) if wheel else None
    limit = memcpy_rate(info["bytes"])
    results: Dict[Tuple[str, str], Dict[str, list]] = {}

    def record(rnd: int, store: str, name: str, r: Optional[dict]) -> None:
        slot = results.setdefault((name, store), {"put": [], "get": []})
        if r and rnd >= 0:
            for op in ("put", "get"):
                slot[op].append(r[op])

    try:
        for rnd in range(-1, args.rounds):  # round -1 warms every path up and is not counted
            for name, fn in kinds.items():
                record(rnd, "gostore", name, fn(rnd))
            if peer:
                for name, r in peer.round(rnd).items():
                    record(rnd, "Mooncake", name, r)
    finally:
        if peer:
            peer.close()
        close_all()
        master.stop()

    print(f"\n{info['title']}")
    print(f"one writer and one reader on this host, tcp, median of {args.rounds} rounds taken in turns "
          "(after one round not counted)")
    print(f"limits in this run: memcpy of a batch ({info['bytes'] >> 20} MiB) {limit / 1e9:.2f} GB/s; "
          "each store's raw batch API on the same objects (below)")
    if not peer:
        print("Mooncake's wheel is not installed here (make bench-peers): gostore only")
    med = {k: {op: statistics.median(v[op]) if v[op] else None for op in v} for k, v in results.items()}
    print(f"{'path':<46} {'store':<9} {'put GB/s':>9} {'get GB/s':>9} {'put/raw':>8} {'get/raw':>8}")
    out = {**info, "memcpy_gbps": limit / 1e9, "rounds": args.rounds, "paths": []}
    for (name, store), m in med.items():
        raw = med.get(("raw batch API", store), {})
        if m["put"] is None:
            print(f"{name:<46} {store:<9} {'failed':>9}")
            continue
        rel = {op: (m[op] / raw[op] if raw.get(op) else None) for op in ("put", "get")}
        fmt = {op: (f"{100 * rel[op]:7.0f}%" if rel[op] else f"{'-':>8}") for op in rel}
        print(f"{name:<46} {store:<9} {m['put'] / 1e9:9.2f} {m['get'] / 1e9:9.2f} {fmt['put']} {fmt['get']}")
        out["paths"].append({"path": name, "store": store, "put_gbps": m["put"] / 1e9, "get_gbps": m["get"] / 1e9,
                             "put_of_raw": rel["put"], "get_of_raw": rel["get"]})
    if args.json:
        with open(args.json, "w") as f:
            json.dump(out, f, indent=2)
    return 0


if __name__ == "__main__":
    sys.exit(main())
