"""gostore as an SGLang HiCache storage backend (the L3 tier).

Load it through SGLang's dynamic backend::

    python -m sglang.launch_server ... --enable-hierarchical-cache \\
        --hicache-storage-backend dynamic \\
        --hicache-storage-backend-extra-config '{"backend_name": "gostore",
            "module_path": "gostore.integrations.sglang",
            "class_name": "GostoreHiCacheStorage", "interface_v1": 1,
            "master_server_address": "10.0.0.1:50051"}'

Configuration uses Mooncake's names, as SGLang's Mooncake backend reads
them: the extra config's keys (``master_server_address``,
``local_hostname``, ``protocol``, ``global_segment_size``, ``device_name``,
``client_server_address``, ``extra_backend_tag``), else the JSON file named
by ``SGLANG_HICACHE_MOONCAKE_CONFIG_PATH`` (or ``MOONCAKE_CONFIG_PATH``),
else ``MOONCAKE_MASTER`` and the other ``MOONCAKE_*`` variables.

What it does differently from SGLang's Mooncake backend, for speed:

* **One object per page.** A page's parts (an MHA page's K and V) go in
  one object through the multi-buffer calls, straight from and into the
  registered host pool: half the keys, half the metadata work.
* **No existence check before a write.** gostore's put never overwrites
  and answers success for a key already stored, so a write is one round
  trip, not two.
* **A read succeeds only with the page's exact size**, so a page stored by
  an engine with another layout is a miss, never wrong bytes.

Keys: ``[tag_]model/{key}`` for MLA models (every tensor-parallel rank
holds the same KV, so ranks share pages), ``[tag_]model/tp{r}of{n}/{key}``
for MHA (each rank holds its heads), with ``/pp{r}`` when pipeline
parallel.
"""

from __future__ import annotations

import logging
from typing import Any, List, Optional

import torch
from sglang.srt.mem_cache.hicache_storage import HiCacheStorage, HiCacheStorageConfig

from . import _config

__all__ = ["GostoreHiCacheStorage"]

_log = logging.getLogger("gostore.integrations.sglang")


class GostoreHiCacheStorage(HiCacheStorage):
    """SGLang's ``HiCacheStorage`` on gostore (see the module doc)."""

    def __init__(self, storage_config: HiCacheStorageConfig, kwargs: Optional[dict] = None) -> None:
        if storage_config is None:
            raise TypeError("GostoreHiCacheStorage needs SGLang's HiCacheStorageConfig")
        extra = dict(storage_config.extra_config or {})
        cfg = _config.load(extra, ("SGLANG_HICACHE_MOONCAKE_CONFIG_PATH", "MOONCAKE_CONFIG_PATH"))
        ranks_here = max(1, storage_config.tp_size) * max(1, storage_config.pp_size)
        self.store = _config.open_store(cfg, segment_share=ranks_here)
        model = (storage_config.model_name or "model").replace("/", "-")
        parts = [p for p in (extra.get("extra_backend_tag"), model) if p]
        scope = "_".join(parts)
        if not storage_config.is_mla_model:
            scope += f"/tp{storage_config.tp_rank}of{storage_config.tp_size}"
        if storage_config.pp_size > 1:
            scope += f"/pp{storage_config.pp_rank}"
        self.key_prefix = scope + "/"
        self.mem_pool_host = None
        _log.info("gostore HiCache backend ready: keys under %r, master %s", self.key_prefix,
                  cfg["client_server_address"] or cfg["master_server_address"])

    # ---- the host pool ------------------------------------------------------

    def register_mem_pool_host(self, mem_pool_host: Any) -> None:
        """Register the host pool's buffers: pages move straight between
        them and the store."""
        super().register_mem_pool_host(mem_pool_host)
        if getattr(mem_pool_host, "kv_buffer", None) is None:
            return
        buffers = []
        if hasattr(mem_pool_host, "get_hybrid_pool_buffer"):
            buffers = list(mem_pool_host.get_hybrid_pool_buffer() or [])
        if not buffers:
            buffers = [mem_pool_host.kv_buffer]
        for t in buffers:
            size = t.numel() * t.element_size()
            if size == 0:
                continue
            rc = self.store.register_buffer(t.data_ptr(), size)
            if rc != 0:
                raise RuntimeError(f"gostore: register_buffer of the host KV pool ({size} bytes) failed: {rc}")

    def _pages(self, keys: List[str], host_indices: torch.Tensor):
        """Each page's parts in the host pool: their pointers and sizes,
        one list per page (an MHA page has K and V, an MLA page one part)."""
        ptrs, sizes = self.mem_pool_host.get_page_buffer_meta(host_indices)
        n = len(keys)
        if len(ptrs) % n:
            raise ValueError(f"{len(ptrs)} buffer parts for {n} pages")
        per = len(ptrs) // n
        return [ptrs[i * per:(i + 1) * per] for i in range(n)], [sizes[i * per:(i + 1) * per] for i in range(n)]

    def _pool_empty(self) -> bool:
        return self.mem_pool_host is None or self.mem_pool_host.kv_buffer is None

    def _keys(self, keys: List[str]) -> List[str]:
        return [self.key_prefix + k for k in keys]

    # ---- the v1 interface (zero copy, host indices) -------------------------

    def batch_set_v1(self, keys: List[str], host_indices: torch.Tensor, extra_info: Any = None) -> List[bool]:
        if self._pool_empty() or not keys:
            return [True] * len(keys)
        ptrs, sizes = self._pages(keys, host_indices)
        return [c == 0 for c in self.store.batch_put_from_multi_buffers(self._keys(keys), ptrs, sizes)]

    def batch_get_v1(self, keys: List[str], host_indices: torch.Tensor, extra_info: Any = None) -> List[bool]:
        if self._pool_empty() or not keys:
            return [True] * len(keys)
        ptrs, sizes = self._pages(keys, host_indices)
        got = self.store.batch_get_into_multi_buffers(self._keys(keys), ptrs, sizes)
        return [g == sum(s) for g, s in zip(got, sizes)]

    def batch_exists(self, keys: List[str], extra_info: Any = None) -> int:
        """How many leading pages of ``keys`` the store holds."""
        return _config.leading(c == 1 for c in self.store.batch_is_exist(self._keys(keys))) if keys else 0

    # ---- the base interface (explicit locations) ----------------------------

    def exists(self, key: str) -> bool:
        return self.store.is_exist(self.key_prefix + key) == 1

    def get(self, key: str, target_location: Any = None, target_sizes: Any = None) -> bool:
        if target_location is None or target_sizes is None:
            raise ValueError("gostore's HiCache backend reads into a target_location (zero copy)")
        return self.store.get_into(self.key_prefix + key, target_location, target_sizes) == target_sizes

    def batch_get(self, keys: List[str], target_locations: Any = None, target_sizes: Any = None) -> int:
        """The number of leading pages read whole."""
        if target_locations is None or target_sizes is None:
            raise ValueError("gostore's HiCache backend reads into target_locations (zero copy)")
        got = self.store.batch_get_into(self._keys(keys), list(target_locations), list(target_sizes))
        return _config.leading(g == w for g, w in zip(got, target_sizes))

    def set(self, key: str, value: Any = None, target_location: Any = None, target_sizes: Any = None) -> bool:
        if target_location is None or target_sizes is None:
            raise ValueError("gostore's HiCache backend writes from a target_location (zero copy)")
        return self.store.put_from(self.key_prefix + key, target_location, target_sizes) == 0

    def batch_set(self, keys: List[str], values: Any = None, target_locations: Any = None,
                  target_sizes: Any = None) -> bool:
        if target_locations is None or target_sizes is None:
            raise ValueError("gostore's HiCache backend writes from target_locations (zero copy)")
        if not keys:
            return False
        codes = self.store.batch_put_from(self._keys(keys), list(target_locations), list(target_sizes))
        return all(c == 0 for c in codes)

    def clear(self) -> None:
        """Remove every object of the store (not only this engine's), as
        SGLang's Mooncake backend does; leased objects stay until their
        lease ends."""
        self.store.remove_all()

    def close(self) -> None:
        self.store.close()
