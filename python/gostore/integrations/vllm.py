"""gostore as a vLLM KV connector (vLLM's V1 connector API).

Load it with vLLM's ``kv_connector_module_path``::

    vllm serve MODEL --kv-transfer-config '{"kv_connector": "GostoreConnector",
        "kv_connector_module_path": "gostore.integrations.vllm", "kv_role": "kv_both",
        "kv_connector_extra_config": {"master_server_address": "10.0.0.1:50051"}}'

Configuration uses Mooncake's names, as vLLM's Mooncake store connector
reads them: ``kv_connector_extra_config`` keys (``master_server_address``,
``local_hostname``, ``protocol``, ``global_segment_size``,
``local_buffer_size``, ``device_name``, ``client_server_address``), else the
JSON file in ``MOONCAKE_CONFIG_PATH``, else the ``MOONCAKE_*`` variables.
The scheduler's process joins the store without memory of its own; each
worker contributes ``global_segment_size``.

How it works: a KV block is one object, keyed by the block's prefix hash
(vLLM's own block hashes, so equal prefixes share objects across engines),
the model, the block size and the tensor-parallel rank, holding that block
of every layer. The worker registers its KV cache tensors with gostore, so
saves and loads move blocks straight between the cache and the store
(multi-buffer zero-copy calls, whatever the attention backend's layout, as
long as a block's slice of each layer is contiguous).

* The scheduler asks the store how long a prefix of the prompt's full
  blocks it holds (one ``batch_is_exist`` per request) and has vLLM
  allocate blocks for it (loads are synchronous: before the forward pass).
* The worker loads those blocks in ``start_load_kv``; a block that does
  not come back whole (missing, or of another size) is reported through
  ``get_block_ids_with_load_errors`` and vLLM computes it again.
* After the forward pass, ``wait_for_save`` stores the request's full
  prompt blocks that the store did not hold; a full store answers ``-200``
  and the blocks are simply not stored.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Dict, List, Optional, Tuple

import torch
from vllm.distributed.kv_transfer.kv_connector.v1.base import (
    KVConnectorBase_V1,
    KVConnectorMetadata,
    KVConnectorRole,
)

from . import _config

if TYPE_CHECKING:
    from vllm.config import VllmConfig
    from vllm.forward_context import ForwardContext
    from vllm.v1.core.kv_cache_manager import KVCacheBlocks
    from vllm.v1.core.sched.output import SchedulerOutput
    from vllm.v1.request import Request

__all__ = ["GostoreConnector", "GostoreConnectorMetadata"]

_log = logging.getLogger("gostore.integrations.vllm")


@dataclass
class _Transfer:
    req_id: str
    keys: List[str]  # one per block, without the rank part
    block_ids: List[int]


@dataclass
class GostoreConnectorMetadata(KVConnectorMetadata):
    """What the worker moves this step: blocks to load before the forward
    pass, blocks to save after it."""

    loads: List[_Transfer] = field(default_factory=list)
    saves: List[_Transfer] = field(default_factory=list)


class GostoreConnector(KVConnectorBase_V1):
    """vLLM's KV connector on gostore (see the module doc)."""

    def __init__(self, vllm_config: "VllmConfig", role: KVConnectorRole, kv_cache_config: Any = None) -> None:
        super().__init__(vllm_config=vllm_config, role=role, kv_cache_config=kv_cache_config)
        ktc = vllm_config.kv_transfer_config
        extra = dict(getattr(ktc, "kv_connector_extra_config", None) or {})
        cfg = _config.load(extra, ("MOONCAKE_CONFIG_PATH",))
        self.block_size = vllm_config.cache_config.block_size
        self.tp_size = vllm_config.parallel_config.tensor_parallel_size
        model = getattr(vllm_config.model_config, "model", None) or "model"
        self.scope = f"{model.rstrip('/').split('/')[-1]}/b{self.block_size}"
        if role == KVConnectorRole.SCHEDULER:
            cfg["global_segment_size"] = 0  # the scheduler only asks
        self.store = _config.open_store(cfg)
        # Scheduler side.
        self._hashes: Dict[str, List[str]] = {}  # req_id -> hex block hashes of the prompt's full blocks
        self._hit_blocks: Dict[str, int] = {}
        self._block_ids: Dict[str, List[int]] = {}  # req_id -> its blocks, in order
        self._saved: Dict[str, int] = {}  # req_id -> leading blocks stored (or found stored)
        self._to_load: Dict[str, Tuple[List[str], List[int]]] = {}
        # Worker side.
        self.rank = 0
        self._parts: List[Tuple[int, int, int]] = []  # per layer part: (base address, block stride, size)
        self._load_errors: set = set()

    # ---- keys ---------------------------------------------------------------

    def _key(self, block_hash: str, rank: int) -> str:
        return f"{self.scope}/tp{rank}of{self.tp_size}/{block_hash}"

    # ---- scheduler side -----------------------------------------------------

    def get_num_new_matched_tokens(self, request: "Request", num_computed_tokens: int) -> Tuple[int, bool]:
        prompt = len(request.prompt_token_ids or [])
        full = prompt // self.block_size
        hashes = [bytes(h).hex() for h in request.block_hashes[:full]]
        self._hashes[request.request_id] = hashes
        # Leave the prompt's last token to compute: vLLM needs one.
        usable = min(full, (prompt - 1) // self.block_size)
        if usable == 0:
            self._hit_blocks[request.request_id] = 0
            return 0, False
        keys = [self._key(h, r) for h in hashes[:usable] for r in range(self.tp_size)]
        codes = self.store.batch_is_exist(keys)
        hit = _config.leading(all(c == 1 for c in codes[b * self.tp_size:(b + 1) * self.tp_size])
                              for b in range(usable))
        self._hit_blocks[request.request_id] = hit
        return max(0, hit * self.block_size - num_computed_tokens), False

    def update_state_after_alloc(self, request: "Request", blocks: "KVCacheBlocks", num_external_tokens: int) -> None:
        if num_external_tokens <= 0:
            return
        rid = request.request_id
        block_ids = blocks.get_block_ids()[0]
        first = request.num_computed_tokens // self.block_size
        n = num_external_tokens // self.block_size
        hashes = self._hashes.get(rid, [])
        self._to_load[rid] = (hashes[first:first + n], list(block_ids[first:first + n]))

    def build_connector_meta(self, scheduler_output: "SchedulerOutput") -> KVConnectorMetadata:
        meta = GostoreConnectorMetadata()
        for rid, (keys, ids) in self._to_load.items():
            if keys:
                meta.loads.append(_Transfer(rid, keys, ids))
        self._to_load.clear()
        scheduled = scheduler_output.num_scheduled_tokens
        for new in scheduler_output.scheduled_new_reqs:
            if new.req_id in self._hashes:
                self._block_ids[new.req_id] = list(new.block_ids[0])
                self._saved[new.req_id] = self._hit_blocks.get(new.req_id, 0)
                self._save_done(meta, new.req_id, new.num_computed_tokens + scheduled.get(new.req_id, 0))
        # A prompt prefilled over several steps (chunked prefill) saves
        # the blocks each step completes.
        cached = scheduler_output.scheduled_cached_reqs
        for i, rid in enumerate(cached.req_ids):
            if rid not in self._block_ids:
                continue
            more = cached.new_block_ids[i]
            if more is not None:
                if rid in cached.resumed_req_ids:
                    self._block_ids[rid] = list(more[0])  # resumed: all its blocks, anew
                else:
                    self._block_ids[rid].extend(more[0])
            self._save_done(meta, rid, cached.num_computed_tokens[i] + scheduled.get(rid, 0))
        return meta

    def _save_done(self, meta: GostoreConnectorMetadata, rid: str, done_tokens: int) -> None:
        """Save the prompt blocks of rid complete after this step that the
        store lacks."""
        hashes, first = self._hashes[rid], self._saved[rid]
        last = min(len(hashes), done_tokens // self.block_size, len(self._block_ids[rid]))
        if last > first:
            meta.saves.append(_Transfer(rid, hashes[first:last], self._block_ids[rid][first:last]))
            self._saved[rid] = last

    def request_finished(self, request: "Request", block_ids: List[int]) -> Tuple[bool, Optional[Dict[str, Any]]]:
        for d in (self._hashes, self._hit_blocks, self._block_ids, self._saved):
            d.pop(request.request_id, None)
        return False, None

    # ---- worker side --------------------------------------------------------

    def register_kv_caches(self, kv_caches: Dict[str, torch.Tensor]) -> None:
        """Register every layer's cache with the store and note where each
        block's slice of it lies."""
        try:
            from vllm.distributed.parallel_state import get_tensor_model_parallel_rank

            self.rank = get_tensor_model_parallel_rank()
        except Exception:  # noqa: BLE001 -- no parallel groups: one rank
            self.rank = 0
        num_blocks = self._kv_cache_config.num_blocks if self._kv_cache_config else None
        for name, t in kv_caches.items():
            nbytes = t.numel() * t.element_size()
            rc = self.store.register_buffer(t.data_ptr(), nbytes)
            if rc != 0:
                raise RuntimeError(f"gostore: register_buffer of KV cache {name} ({nbytes} bytes) failed: {rc}")
            self._parts.extend(_block_parts(name, t, num_blocks))
        _log.info("gostore: %d KV cache tensors registered, %d parts per block", len(kv_caches), len(self._parts))

    def _buffers(self, block_ids: List[int]) -> Tuple[List[List[int]], List[List[int]]]:
        ptrs = [[base + b * stride for base, stride, _ in self._parts] for b in block_ids]
        sizes = [[size for _, _, size in self._parts] for _ in block_ids]
        return ptrs, sizes

    def start_load_kv(self, forward_context: "ForwardContext", **kwargs: Any) -> None:
        meta = self._get_connector_metadata()
        for t in getattr(meta, "loads", []):
            ptrs, sizes = self._buffers(t.block_ids)
            got = self.store.batch_get_into_multi_buffers([self._key(k, self.rank) for k in t.keys], ptrs, sizes)
            want = sum(sizes[0]) if sizes else 0
            bad = [b for b, n in zip(t.block_ids, got) if n != want]
            if bad:
                _log.warning("gostore: %d of %d blocks of %s did not load: vLLM computes them", len(bad),
                             len(t.block_ids), t.req_id)
                self._load_errors.update(bad)

    def wait_for_layer_load(self, layer_name: str) -> None:
        pass  # start_load_kv loaded every layer

    def save_kv_layer(self, layer_name: str, kv_layer: torch.Tensor, attn_metadata: Any, **kwargs: Any) -> None:
        pass  # wait_for_save stores whole blocks, every layer at once

    def wait_for_save(self) -> None:
        meta = self._get_connector_metadata()
        saves = getattr(meta, "saves", [])
        if not saves:
            return
        if torch.cuda.is_available() and torch.cuda.is_initialized():
            torch.cuda.current_stream().synchronize()  # the forward pass wrote the blocks
        for t in saves:
            ptrs, sizes = self._buffers(t.block_ids)
            codes = self.store.batch_put_from_multi_buffers([self._key(k, self.rank) for k in t.keys], ptrs, sizes)
            failed = [c for c in codes if c != 0]
            if failed:
                _log.info("gostore: %d of %d blocks of %s not stored (first code %d)", len(failed), len(codes),
                          t.req_id, failed[0])

    def get_block_ids_with_load_errors(self) -> set:
        errors, self._load_errors = self._load_errors, set()
        return errors

    def shutdown(self) -> None:
        self.store.close()


def _block_parts(name: str, t: torch.Tensor, num_blocks: Optional[int]) -> List[Tuple[int, int, int]]:
    """Where block b of a layer's cache lies: (base, stride, size) parts,
    block b's part at base + b * stride. The block dimension is the first
    of num_blocks entries (dim 0, or dim 1 under a leading K/V dimension);
    the dimensions before it make several parts, and a block's slice must
    be contiguous."""
    dims = list(t.shape)
    if num_blocks is None:
        bdim = 0
    else:
        cands = [d for d, n in enumerate(dims) if n == num_blocks]
        if not cands:
            raise ValueError(f"gostore: KV cache {name} {tuple(dims)} has no dimension of {num_blocks} blocks")
        bdim = cands[0]
    esize = t.element_size()
    inner = 1
    for n in dims[bdim + 1:]:
        inner *= n
    if t.stride(bdim) != inner or any(t.stride(d) != t.stride(d + 1) * dims[d + 1] for d in range(bdim + 1, len(dims) - 1)):
        raise ValueError(f"gostore: a block of KV cache {name} {tuple(dims)} (strides {t.stride()}) is not contiguous")
    outer = [0]
    for d in range(bdim):
        outer = [o + i * t.stride(d) for o in outer for i in range(dims[d])]
    base = t.data_ptr()
    return [(base + o * esize, inner * esize, inner * esize) for o in outer]
