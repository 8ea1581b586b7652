"""vLLM's own Mooncake store KV connector (``vllm.distributed.kv_transfer.
kv_connector.v1.mooncake.store``, from the installed CPU build of vLLM,
unchanged) on gostore: ``mooncake.store`` resolves to gostore
(GOSTORE_AS_MOONCAKE=1), the connector is made by vLLM's own factory for
both roles, and driven the way vLLM's scheduler and model runner drive it:
the scheduler half (get_num_new_matched_tokens, update_state_after_alloc,
build_connector_meta, update_connector_output, request_finished) and the
worker half (register_kv_caches, start_load_kv, wait_for_layer_load,
save_kv_layer, wait_for_save, get_finished), over CPU KV caches and a real
gostore-master. A second request with the same prompt finds the first
one's blocks in gostore and loads them, byte for byte.

Two stand-ins, for what cannot exist here, and nothing else: vLLM's
parallel-group helpers answer "rank 0 of 1" (no torch.distributed world is
started), and ``torch.cuda.Event`` (which ``wait_for_save`` records on the
GPU stream before a save) is an event that is always complete: there is no
GPU.
"""

from __future__ import annotations

import json
import os
import time
from types import SimpleNamespace

import pytest

vllm = pytest.importorskip("vllm", reason="vLLM is not installed here: `make test-engines` installs it")
torch = pytest.importorskip("torch")

from vllm.config import CacheConfig, KVTransferConfig, VllmConfig  # noqa: E402
from vllm.distributed.kv_transfer.kv_connector.factory import KVConnectorFactory  # noqa: E402
from vllm.distributed.kv_transfer.kv_connector.v1.base import KVConnectorRole  # noqa: E402
from vllm.sampling_params import SamplingParams  # noqa: E402
from vllm.utils.hashing import sha256  # noqa: E402
from vllm.v1.core.block_pool import BlockPool  # noqa: E402
from vllm.v1.core.kv_cache_manager import KVCacheBlocks  # noqa: E402
from vllm.v1.core.kv_cache_utils import get_request_block_hasher, init_none_hash  # noqa: E402
from vllm.v1.core.sched.output import KVConnectorBlockState, NewRequestData, SchedulerOutput  # noqa: E402
from vllm.v1.kv_cache_interface import FullAttentionSpec, KVCacheConfig, KVCacheGroupSpec  # noqa: E402
from vllm.v1.outputs import KVConnectorOutput  # noqa: E402
from vllm.v1.request import Request  # noqa: E402

import gostore  # noqa: E402
from conftest import wait_until  # noqa: E402

BLOCK, BLOCKS, LAYERS, HEADS, HEAD = 16, 32, 2, 2, 8
LAYER_NAMES = [f"model.layers.{i}.self_attn.attn" for i in range(LAYERS)]
_port = iter(range(23100, 23200))


class _CompletedEvent:
    """Stands in for torch.cuda.Event: no GPU here, so nothing to wait on."""

    def record(self, *a, **k) -> None:
        pass

    def synchronize(self) -> None:
        pass


@pytest.fixture
def vllm_pair(master, tmp_path, monkeypatch):
    """vLLM's connector, scheduler and worker halves, on gostore."""
    yield from _pair(master, tmp_path, monkeypatch, "64MB")


@pytest.fixture
def vllm_pair_small(master, tmp_path, monkeypatch):
    """The same with a segment of 4 KiB, the pool's only one: room for one
    block of this model's KV (2 KiB) beside the others, not three, and
    puts that do not wait for room."""
    monkeypatch.setenv("GOSTORE_PUT_SPACE_WAIT_MS", "0")
    yield from _pair(master, tmp_path, monkeypatch, "4KB")


def _pair(master, tmp_path, monkeypatch, segment: str):
    import vllm.distributed.kv_transfer.kv_connector.v1.mooncake.store.worker as worker_mod

    cfg = tmp_path / "mooncake.json"
    cfg.write_text(json.dumps({"metadata_server": "P2PHANDSHAKE", "master_server_address": master.addr,
                               "protocol": "tcp", "device_name": "", "global_segment_size": segment,
                               "local_buffer_size": "16MB"}))
    monkeypatch.setenv("MOONCAKE_CONFIG_PATH", str(cfg))
    monkeypatch.setenv("MOONCAKE_REQUESTER_LOCAL_HOSTNAME", "127.0.0.1")
    monkeypatch.setenv("VLLM_RPC_BASE_PATH", str(tmp_path))
    monkeypatch.setattr(worker_mod, "get_tensor_model_parallel_rank", lambda: 0)
    monkeypatch.setattr(worker_mod, "get_tensor_model_parallel_world_size", lambda: 1)
    one = SimpleNamespace(world_size=1, rank_in_group=0)
    monkeypatch.setattr(worker_mod, "get_pcp_group", lambda: one)
    monkeypatch.setattr(worker_mod, "get_dcp_group", lambda: one)
    monkeypatch.setattr(torch.cuda, "Event", _CompletedEvent)

    ktc = KVTransferConfig(kv_connector="MooncakeStoreConnector", kv_role="kv_both",
                           kv_connector_extra_config={"lookup_rpc_port": next(_port)})
    vc = VllmConfig(cache_config=CacheConfig(block_size=BLOCK), kv_transfer_config=ktc)
    # A model config without a model download: what the worker reads.
    vc.model_config = SimpleNamespace(model="org/tiny-llama", get_num_layers=lambda pc: LAYERS,
                                      get_total_num_kv_heads=lambda: HEADS, enable_sleep_mode=False,
                                      enable_cumem_allocator=False)
    spec = FullAttentionSpec(block_size=BLOCK, num_kv_heads=HEADS, head_size=HEAD, dtype=torch.float16)
    kcc = KVCacheConfig(num_blocks=BLOCKS, kv_cache_tensors=[], kv_cache_groups=[KVCacheGroupSpec(LAYER_NAMES, spec)])
    worker = KVConnectorFactory.create_connector(vc, KVConnectorRole.WORKER, kcc)
    sched = KVConnectorFactory.create_connector(vc, KVConnectorRole.SCHEDULER, kcc)
    vc.cache_config.num_gpu_blocks = BLOCKS
    kv = {n: torch.randn(BLOCKS, 2, BLOCK, HEADS, HEAD, dtype=torch.float16) for n in LAYER_NAMES}
    worker.register_kv_caches(kv)
    pool = BlockPool(num_gpu_blocks=BLOCKS, enable_caching=True, hash_block_size=BLOCK)
    sched.bind_gpu_block_pool(pool)
    yield SimpleNamespace(worker=worker, sched=sched, kv=kv, pool=pool, master=master)
    sched.shutdown()
    worker.shutdown()


def _request(rid: str, prompt):
    init_none_hash(sha256)
    return Request(rid, prompt, SamplingParams(max_tokens=4), None,
                   block_hasher=get_request_block_hasher(BLOCK, sha256))


def _prefill(p, request, prompt):
    """The scheduler allocates four blocks for a new request with nothing
    cached and schedules its whole prompt; one worker step runs it. The
    blocks are returned."""
    blocks = p.pool.get_new_blocks(4)
    p.sched.update_state_after_alloc(request, KVCacheBlocks((blocks,)), 0)
    ids = ([b.block_id for b in blocks],)
    rid = request.request_id
    so = SchedulerOutput.make_empty()
    so.scheduled_new_reqs = [NewRequestData.from_request(request, ids)]
    so.num_scheduled_tokens = {rid: len(prompt)}
    so.total_num_scheduled_tokens = len(prompt)
    so.kv_connector_block_state = KVConnectorBlockState(req_ids={rid}, resolve_block_ids=lambda _: ids,
                                                        boundary_state_offloads={})
    _step(p, p.sched.build_connector_meta(so))
    return blocks


def _step(p, meta):
    """One model-runner step of the worker half, then the scheduler's view."""
    w = p.worker
    w.bind_connector_metadata(meta)
    w.start_load_kv(None)
    for name in LAYER_NAMES:  # as the attention layers call them
        w.wait_for_layer_load(name)
        w.save_kv_layer(name, p.kv[name], None)
    w.wait_for_save()
    out = w.get_transfer_results(set())
    wm = w.build_connector_worker_meta()
    w.clear_connector_metadata()
    p.sched.update_connector_output(KVConnectorOutput(kv_connector_worker_meta=wm))
    return out


def test_mooncake_store_is_gostore():
    import mooncake.store

    assert mooncake.store.MooncakeDistributedStore is gostore.MooncakeDistributedStore


def test_a_prefix_saved_by_one_request_is_loaded_by_the_next(vllm_pair):
    p = vllm_pair
    prompt = list(range(1, 3 * BLOCK + 5))  # three whole blocks and a bit
    r1 = _request("r1", prompt)
    assert p.sched.get_num_new_matched_tokens(r1, 0) == (0, False)  # nothing stored yet
    blocks = _prefill(p, r1, prompt)
    # The save runs on the connector's sending thread: wait for its objects.
    wait_until(lambda: p.master.metric("master_key_count") >= 3, what="the save of three blocks")
    assert p.sched.request_finished(r1, [b.block_id for b in blocks]) == (False, None)

    r2 = _request("r2", prompt)
    hit, load_async = p.sched.get_num_new_matched_tokens(r2, 0)
    assert (hit, load_async) == (3 * BLOCK, True)
    blocks2 = p.pool.get_new_blocks(4)
    p.sched.update_state_after_alloc(r2, KVCacheBlocks((blocks2,)), hit)
    meta = p.sched.build_connector_meta(SchedulerOutput.make_empty())
    done = set()

    def loaded():
        done.update(_step(p, meta).finished_recving or ())
        return "r2" in done

    wait_until(loaded, what="r2's blocks loaded from gostore")
    for name in LAYER_NAMES:
        for i in range(3):
            assert torch.equal(p.kv[name][blocks[i].block_id], p.kv[name][blocks2[i].block_id]), (name, i)
    # The block after the stored prefix was not loaded over.
    assert not torch.equal(p.kv[LAYER_NAMES[0]][blocks[3].block_id], p.kv[LAYER_NAMES[0]][blocks2[3].block_id])


def test_no_space_is_back_pressure_not_an_error(vllm_pair_small):
    """gostore answers -200 (no space) to a save that cannot fit: vLLM's
    connector reads it as back-pressure (it skips the request's saves while
    the store is under pressure), and still releases the request's blocks."""
    p = vllm_pair_small
    prompt = list(range(1, 3 * BLOCK + 5))
    _prefill(p, _request("big", prompt), prompt)
    sender = p.worker.connector_worker.kv_send_thread
    wait_until(lambda: sender._store_pressure_active, what="vLLM to see gostore's -200 as back-pressure")
    assert "big" in sender._skip_store_requests

    def released():
        _step(p, p.sched.build_connector_meta(SchedulerOutput.make_empty()))
        return not p.sched.has_pending_push_work()

    wait_until(released, what="the request's blocks released after the refused save")
