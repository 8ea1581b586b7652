"""The master's KV events decoded with a serving engine's own classes
(vLLM's vllm.distributed.kv_events, SGLang's
sglang.srt.disaggregation.kv_events): its msgspec decoder for
KVEventBatch reads our batches, live and replayed, into its BlockStored /
BlockRemoved / AllBlocksCleared."""

from __future__ import annotations

import msgspec

from kv_events_sub import Subscriber, events_master, replay


def check_engine_decodes(launcher, KVEventBatch, BlockStored, BlockRemoved, AllBlocksCleared) -> None:
    m = events_master(launcher, kv_events_block_size=32)
    store = launcher.store(m)
    decode = msgspec.msgpack.Decoder(type=KVEventBatch).decode
    sub = Subscriber(m, decode)  # every batch goes through the engine's decoder
    try:
        last = sub.sync(store)
        assert store.put("1000", b"a" * 4096) == 0  # a key that is a block hash
        assert store.put("page-x", b"b" * 4096) == 0  # one that is not
        assert store.remove("1000", force=True) == 0
        assert store.remove_all(force=True) > 0
        got = sub.until(lambda b: any(isinstance(e, AllBlocksCleared) for e in b[1].events))
        assert all(isinstance(b, KVEventBatch) for _, b in got)
        assert [s for s, _ in got] == list(range(last + 1, last + 1 + len(got)))
        evs = [e for _, b in got for e in b.events]
        stored, named, removed = evs[0], evs[1], evs[2]
        assert isinstance(stored, BlockStored) and stored.block_hashes == [1000], stored
        assert stored.medium == "cpu" and stored.block_size == 32 and stored.token_ids == [], stored
        assert stored.parent_block_hash is None and stored.lora_id is None
        assert isinstance(named, BlockStored) and named.block_hashes == [], named
        assert isinstance(removed, BlockRemoved) and removed.block_hashes == [1000] and removed.medium == "cpu"
        assert all(isinstance(e, BlockRemoved) for e in evs[3:-1]) and isinstance(evs[-1], AllBlocksCleared)
        ts = got[0][1].ts
        assert isinstance(ts, float) and ts > 1.6e9
        # Replayed batches decode the same, from the master's first: all cleared
        # (numbered on from the start's µs).
        first = replay(m, 0, decode)
        assert first[0][0] > 1.6e15 and isinstance(first[0][1].events[0], AllBlocksCleared)
        assert [b for b in first if b[0] > last][: len(got)] == got
    finally:
        sub.close()
