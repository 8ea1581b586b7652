"""The Nano Mooncake seed's example (§14) on one host, as a script:

    python examples/nano_prefill_decode.py

A master runs inside this process. A "decode" process joins with a heap
and waits; this process, the "prefill" producer, opens a write plan for the
KV of layer 0 on the decode rank, writes the KV straight into the decode
process's memory (a numpy view of the plan's payload: no staging copy, no
round trip per page), and commits. The decode side then finds the object
with get_location and reads it (one hop from its own heap), and checks the
bytes.
"""

from __future__ import annotations

import multiprocessing as mp
import os
import sys

import numpy as np

os.environ.setdefault("GOSTORE_LOG_LEVEL", "warn")  # before the library loads

from gostore import EmbeddedMaster, NanoKVCache  # noqa: E402

KEY = "sess:42:kv:L0"
SHAPE = (2, 32, 128, 128)  # K and V: heads x tokens x head_dim
PAGE = 256 * 1024


def kv_for_layer0() -> np.ndarray:
    """What a prefill kernel would produce (deterministic, to check it)."""
    return np.arange(np.prod(SHAPE), dtype=np.float32).reshape(SHAPE) % 997


def decode(master: str, ready, done, result) -> None:
    """The decode rank: contributes its heap, then reads the KV."""
    cache = NanoKVCache(heap_bytes=64 << 20, page_bytes=PAGE, master_server_addr=master)
    ready.put(cache.rank)
    done.wait()
    meta = cache.get_location(KEY)  # ObjMeta: owner, offsets, epoch
    local = np.frombuffer(cache.get(KEY), dtype=np.float32).reshape(SHAPE)
    result.put((meta.owner_rank, meta.n_pages, bool(np.array_equal(local, kv_for_layer0()))))
    cache.close()


def main() -> int:
    ctx = mp.get_context("spawn")  # a forked child of a Go process hangs
    master = EmbeddedMaster(rpc_port=0, metrics_port=0)
    ready, done, result = ctx.Queue(), ctx.Event(), ctx.Queue()
    p = ctx.Process(target=decode, args=(master.address, ready, done, result))
    p.start()
    decode_rank = ready.get(timeout=60)

    # Host side: create the cache and allocate a write plan on the decode rank.
    cache = NanoKVCache(heap_bytes=16 << 20, page_bytes=PAGE, master_server_addr=master.address)
    kv = kv_for_layer0()
    plan = cache.open_for_write(KEY, kv.nbytes, preferred_segment=decode_rank)
    print(f"plan: rank {plan.dst_rank}, {plan.n_pages} pages of {plan.page_bytes} B, "
          f"header at {plan.header_off}, payload at {plan.payload_base}, epoch {plan.epoch}")

    # The "kernel": write the KV straight into the decode process's memory.
    dst = np.frombuffer(cache.writable(plan), dtype=np.float32).reshape(SHAPE)
    np.copyto(dst, kv)
    cache.commit(KEY)  # the header turns READY; readers see it from now on

    done.set()
    owner, pages, ok = result.get(timeout=60)
    p.join(30)
    cache.close()
    master.stop()
    print(f"decode rank {owner} read {pages} pages: {'bytes verified' if ok else 'BYTES DIFFER'}")
    return 0 if ok and owner == decode_rank else 1


if __name__ == "__main__":
    sys.exit(main())
