"""A vLLM KV connector driven as vLLM's scheduler and model runner drive it,
without an engine: both halves made by vLLM's own connector factory over
CPU KV caches, a real block pool, real requests with vLLM's block hashes.
The vLLM tests and bench/engines.py share it.

``open_pair(..., native=False)`` makes vLLM's Mooncake store connector
(whatever ``mooncake.store`` is in this process: gostore through
GOSTORE_AS_MOONCAKE, or Mooncake's wheel); ``native=True`` makes gostore's
own connector through ``kv_connector_module_path``.

Two stand-ins, for what cannot exist here, and nothing else: vLLM's
parallel-group helpers answer "rank 0 of 1" (no torch.distributed world is
started), and ``torch.cuda.Event`` (which the Mooncake connector records on
the GPU stream before a save) is an event that is always complete: there
is no GPU. ``patch(obj, name, value)`` and ``setenv(name, value)`` apply
them (pytest's monkeypatch in a test, so they are undone).
"""

from __future__ import annotations

import json
import os
import time
from types import SimpleNamespace
from typing import Callable, List, Optional

import torch
from vllm.config import CacheConfig, KVTransferConfig, VllmConfig
from vllm.distributed.kv_transfer.kv_connector.factory import KVConnectorFactory
from vllm.distributed.kv_transfer.kv_connector.v1.base import KVConnectorRole
from vllm.sampling_params import SamplingParams
from vllm.utils.hashing import sha256
from vllm.v1.core.block_pool import BlockPool
from vllm.v1.core.kv_cache_utils import get_request_block_hasher, init_none_hash
from vllm.v1.core.sched.output import KVConnectorBlockState, NewRequestData, SchedulerOutput
from vllm.v1.kv_cache_interface import FullAttentionSpec, KVCacheConfig, KVCacheGroupSpec
from vllm.v1.outputs import KVConnectorOutput
from vllm.v1.request import Request


class _CompletedEvent:
    """Stands in for torch.cuda.Event: no GPU here, so nothing to wait on."""

    def record(self, *a, **k) -> None:
        pass

    def synchronize(self) -> None:
        pass


def open_pair(master_addr: str, workdir: str, *, native: bool, segment: str, lookup_port: int,
              patch: Callable, setenv: Callable, block: int = 16, blocks: int = 32, layers: int = 2,
              heads: int = 2, head: int = 8, dtype: torch.dtype = torch.float16,
              local_buffer: str = "16MB") -> SimpleNamespace:
    """The scheduler and worker halves of one connector, the worker's KV
    caches (random, registered) and the scheduler's block pool."""
    import vllm.distributed.kv_transfer.kv_connector.v1.mooncake.store.worker as worker_mod

    store = {"metadata_server": "P2PHANDSHAKE", "master_server_address": master_addr, "protocol": "tcp",
             "device_name": "", "global_segment_size": segment, "local_buffer_size": local_buffer}
    cfg = os.path.join(workdir, "mooncake.json")
    with open(cfg, "w") as f:
        json.dump(store, f)
    setenv("MOONCAKE_CONFIG_PATH", cfg)
    # No MOONCAKE_REQUESTER_LOCAL_HOSTNAME: the connector passes this host's
    # IP (vLLM's get_ip), as for a user, and the master is on loopback.
    setenv("VLLM_RPC_BASE_PATH", workdir)  # vLLM's IPC sockets: not in /tmp
    patch(worker_mod, "get_tensor_model_parallel_rank", lambda: 0)
    patch(worker_mod, "get_tensor_model_parallel_world_size", lambda: 1)
    one = SimpleNamespace(world_size=1, rank_in_group=0)
    patch(worker_mod, "get_pcp_group", lambda: one)
    patch(worker_mod, "get_dcp_group", lambda: one)
    patch(torch.cuda, "Event", _CompletedEvent)

    if native:
        ktc = KVTransferConfig(kv_connector="GostoreConnector", kv_connector_module_path="gostore.integrations.vllm",
                               kv_role="kv_both", kv_connector_extra_config=store)
    else:
        ktc = KVTransferConfig(kv_connector="MooncakeStoreConnector", kv_role="kv_both",
                               kv_connector_extra_config={"lookup_rpc_port": lookup_port})
    vc = VllmConfig(cache_config=CacheConfig(block_size=block), kv_transfer_config=ktc)
    # A model config without a model download: what the connectors read.
    vc.model_config = SimpleNamespace(model="org/tiny-llama", get_num_layers=lambda pc: layers,
                                      get_total_num_kv_heads=lambda: heads, enable_sleep_mode=False,
                                      enable_cumem_allocator=False)
    names = [f"model.layers.{i}.self_attn.attn" for i in range(layers)]
    spec = FullAttentionSpec(block_size=block, num_kv_heads=heads, head_size=head, dtype=dtype)
    kcc = KVCacheConfig(num_blocks=blocks, kv_cache_tensors=[], kv_cache_groups=[KVCacheGroupSpec(names, spec)])
    worker = KVConnectorFactory.create_connector(vc, KVConnectorRole.WORKER, kcc)
    sched = KVConnectorFactory.create_connector(vc, KVConnectorRole.SCHEDULER, kcc)
    vc.cache_config.num_gpu_blocks = blocks
    kv = {n: torch.randn(blocks, 2, block, heads, head).to(dtype) for n in names}
    worker.register_kv_caches(kv)
    pool = BlockPool(num_gpu_blocks=blocks, enable_caching=True, hash_block_size=block)
    sched.bind_gpu_block_pool(pool)
    return SimpleNamespace(worker=worker, sched=sched, kv=kv, pool=pool, block=block, layers=names, native=native)


def close_pair(p: SimpleNamespace) -> None:
    p.sched.shutdown()
    p.worker.shutdown()


def make_request(rid: str, prompt: List[int], block: int) -> Request:
    init_none_hash(sha256)
    return Request(rid, prompt, SamplingParams(max_tokens=4), None, block_hasher=get_request_block_hasher(block, sha256))


def block_bytes(p: SimpleNamespace) -> int:
    """Bytes of one block over every layer."""
    return sum(t[0].numel() * t.element_size() for t in p.kv.values())


def prefill(p: SimpleNamespace, request: Request, prompt: List[int]):
    """The scheduler looks the new request up (the store holds none of it,
    as the caller expects), allocates its blocks and schedules its whole
    prompt; one worker step runs it (and saves). Returns the lookup's
    answer and the blocks."""
    from vllm.v1.core.kv_cache_manager import KVCacheBlocks

    lookup = p.sched.get_num_new_matched_tokens(request, 0)
    blocks = p.pool.get_new_blocks(-(-len(prompt) // p.block))
    p.sched.update_state_after_alloc(request, KVCacheBlocks((blocks,)), 0)
    ids = ([b.block_id for b in blocks],)
    rid = request.request_id
    so = SchedulerOutput.make_empty()
    so.scheduled_new_reqs = [NewRequestData.from_request(request, ids)]
    so.num_scheduled_tokens = {rid: len(prompt)}
    so.total_num_scheduled_tokens = len(prompt)
    so.kv_connector_block_state = KVConnectorBlockState(req_ids={rid}, resolve_block_ids=lambda _: ids,
                                                        boundary_state_offloads={})
    step(p, p.sched.build_connector_meta(so))
    return lookup, blocks


def allocate_hit(p: SimpleNamespace, request: Request, nblocks: int):
    """The scheduler's lookup of a request's stored prefix and the
    allocation of its blocks: (tokens hit, loads asynchronously, blocks,
    the connector metadata that loads them)."""
    from vllm.v1.core.kv_cache_manager import KVCacheBlocks

    hit, load_async = p.sched.get_num_new_matched_tokens(request, 0)
    blocks = p.pool.get_new_blocks(nblocks)
    p.sched.update_state_after_alloc(request, KVCacheBlocks((blocks,)), hit)
    return hit, load_async, blocks, p.sched.build_connector_meta(SchedulerOutput.make_empty())


def step(p: SimpleNamespace, meta):
    """One model-runner step of the worker half, then the scheduler's view."""
    w = p.worker
    w.bind_connector_metadata(meta)
    w.start_load_kv(None)
    for name in p.layers:  # as the attention layers call them
        w.wait_for_layer_load(name)
        w.save_kv_layer(name, p.kv[name], None)
    w.wait_for_save()
    out = w.get_transfer_results(set())
    wm = w.build_connector_worker_meta()
    w.clear_connector_metadata()
    p.sched.update_connector_output(KVConnectorOutput(kv_connector_worker_meta=wm))
    return out


def load(p: SimpleNamespace, request: Request, meta, load_async: bool, timeout: float = 30.0) -> None:
    """The worker step that loads a request's stored prefix; an
    asynchronous load (vLLM's Mooncake connector) is done when a later
    step reports the request among finished_recving, as vLLM waits."""
    out = step(p, meta)
    deadline = time.monotonic() + timeout
    while load_async and request.request_id not in (out.finished_recving or ()):
        if time.monotonic() > deadline:
            raise TimeoutError(f"{request.request_id}'s load did not finish in {timeout}s")
        time.sleep(0.0005)
        out = step(p, p.sched.build_connector_meta(SchedulerOutput.make_empty()))


def finish(p: SimpleNamespace, request: Request, blocks, timeout: float = 30.0) -> None:
    """The request is done: the scheduler is told and the blocks go back
    to the pool once the connector lets them go (vLLM's Mooncake connector
    holds a request's blocks until its save is reported done; empty steps
    carry that report)."""
    p.sched.request_finished(request, [b.block_id for b in blocks])
    p.pool.free_blocks(blocks)
    deadline = time.monotonic() + timeout
    while p.sched.has_pending_push_work():
        if time.monotonic() > deadline:
            raise TimeoutError(f"the connector kept {request.request_id}'s blocks for {timeout}s")
        step(p, p.sched.build_connector_meta(SchedulerOutput.make_empty()))


def drain(p: SimpleNamespace) -> None:
    """Wait until the connector's background transfers are done (vLLM's
    Mooncake connector saves and loads on threads; gostore's is
    synchronous and has none)."""
    cw: Optional[object] = getattr(p.worker, "connector_worker", None)
    for name in ("kv_send_thread", "kv_recv_thread"):
        t = getattr(cw, name, None)
        if t is not None:
            t.request_queue.join()
