"""gostore as an LMCache remote storage backend.

LMCache loads it as a remote storage plugin (its configuration, YAML or
``LMCACHE_*`` variables)::

    remote_storage_plugins: ["gostore"]
    extra_config:
      remote_storage_plugin.gostore.module_path: gostore.integrations.lmcache
      remote_storage_plugin.gostore.class_name: GostoreConnectorAdapter
      remote_storage_plugin.gostore.url: gostore://10.0.0.1:50051

The URL names the master (``gostore://host:port``, or
``gostore://etcd/a:2379;b:2379`` for a master under HA). Without it, the
master and the other client settings are read as LMCache's Mooncake
connector reads them: ``extra_config`` keys with Mooncake's names
(``master_server_address``, ``local_hostname``, ``protocol``,
``global_segment_size``, ``local_buffer_size``; a ``mooncake_`` prefix is
dropped), else the JSON file in ``MOONCAKE_CONFIG_PATH``, else the
``MOONCAKE_*`` variables.

Each chunk is one object: LMCache's own chunk header (the one its Mooncake
connector writes with ``put_parts``: length, memory format, dtypes and
shapes) followed by the KV bytes. Unlike that connector:

* **Zero copy both ways.** The KV bytes go straight from and into the
  CPU backend's registered buffer (the multi-buffer calls: the header in
  one part, the chunk in the other), where the Mooncake connector copies
  the whole chunk on every write with its header and on every read.
* **Checked reads.** A chunk is returned only when its header matches this
  engine's format and dtypes and its length is a whole number of tokens:
  an object written by an engine with another layout is a miss, never
  wrong KV.
* Single ``get`` works (LMCache's non-blocking path uses it).

Objects are readable by LMCache's Mooncake connector with
``save_chunk_meta`` on (same keys, same layout), and the other way round.
"""

from __future__ import annotations

import asyncio
import ctypes
import logging
import queue
from typing import List, Optional, Sequence

from lmcache.utils import CacheEngineKey
from lmcache.v1.memory_management import MemoryObj
from lmcache.v1.protocol import RemoteMetadata
from lmcache.v1.storage_backend.connector import ConnectorAdapter, ConnectorContext, extract_plugin_type
from lmcache.v1.storage_backend.connector.base_connector import RemoteConnector

from . import _config

__all__ = ["GostoreConnectorAdapter", "GostoreConnector"]

_log = logging.getLogger("gostore.integrations.lmcache")

SCHEME = "gostore://"
PLUGIN_TYPE = "gostore"
_HEADER_SLOTS = 4096  # chunk headers in flight at once (more wait for a slot)


class GostoreConnectorAdapter(ConnectorAdapter):
    """Makes :class:`GostoreConnector` for ``gostore://`` URLs and for the
    ``gostore`` remote storage plugin."""

    def __init__(self) -> None:
        super().__init__(SCHEME)

    def can_parse(self, url: str) -> bool:
        if url.startswith(SCHEME):
            return True
        return url.startswith("plugin://") and extract_plugin_type(url[len("plugin://"):]) == PLUGIN_TYPE

    def create_connector(self, context: ConnectorContext) -> RemoteConnector:
        return GostoreConnector(context.loop, context.local_cpu_backend, context.config, context.url,
                                context.plugin_name)


def _master_of(url: str) -> Optional[str]:
    """``gostore://host:port`` -> ``host:port``; ``gostore://etcd/a;b`` ->
    ``etcd://a;b``; None for a plugin URL."""
    if not url.startswith(SCHEME):
        return None
    rest = url[len(SCHEME):].rstrip("/")
    if rest.startswith("etcd/"):
        return "etcd://" + rest[len("etcd/"):]
    return rest or None


class _Headers:
    """Registered slots for chunk headers, so that a header travels in the
    same zero-copy call as its chunk."""

    def __init__(self, store, slot: int) -> None:
        self.slot = slot
        self.buf = ctypes.create_string_buffer(slot * _HEADER_SLOTS)
        self.base = ctypes.addressof(self.buf)
        rc = store.register_buffer(self.base, len(self.buf))
        if rc != 0:
            raise RuntimeError(f"gostore: registering the chunk header slots failed: {rc}")
        self.free: "queue.SimpleQueue[int]" = queue.SimpleQueue()
        for i in range(_HEADER_SLOTS):
            self.free.put(i)

    def take(self, n: int) -> List[int]:
        return [self.free.get() for _ in range(n)]

    def give(self, slots: Sequence[int]) -> None:
        for s in slots:
            self.free.put(s)

    def addr(self, slot: int) -> int:
        return self.base + slot * self.slot


class GostoreConnector(RemoteConnector):
    """LMCache's ``RemoteConnector`` on gostore (see the module doc)."""

    def __init__(self, loop: asyncio.AbstractEventLoop, local_cpu_backend, lmcache_config, url: str = "",
                 plugin_name: Optional[str] = None) -> None:
        super().__init__(local_cpu_backend.config, local_cpu_backend.metadata)
        self.loop = loop
        self.local_cpu_backend = local_cpu_backend
        cfg = lmcache_config or local_cpu_backend.config
        extra = dict(getattr(cfg, "extra_config", None) or {})
        explicit = {k[len("mooncake_"):] if k.startswith("mooncake_") else k: v for k, v in extra.items()}
        if plugin_name:
            url = extra.get(f"remote_storage_plugin.{plugin_name}.url", url) or url
        master = _master_of(url)
        if master:
            explicit["master_server_address"] = master
        self.store = _config.open_store(_config.load(explicit, ("MOONCAKE_CONFIG_PATH",)))
        self.header_bytes = self.remote_metadata_bytes
        self.headers = _Headers(self.store, self.header_bytes)
        allocator = getattr(local_cpu_backend, "memory_allocator", None)
        pinned = getattr(getattr(allocator, "pin_allocator", None), "buffer", None)
        self.zero_copy = pinned is not None
        if self.zero_copy:
            rc = self.store.register_buffer(pinned.data_ptr(), pinned.numel() * pinned.element_size())
            if rc != 0:
                raise RuntimeError(f"gostore: registering LMCache's CPU buffer failed: {rc}")
        _log.info("gostore LMCache connector ready (master %s, zero copy %s)",
                  explicit.get("master_server_address", "from the configuration"), self.zero_copy)

    # ---- writes -------------------------------------------------------------

    def _put_many(self, keys: List[CacheEngineKey], objs: List[MemoryObj]) -> List[int]:
        slots = self.headers.take(len(keys))
        try:
            ptrs, sizes = [], []
            for slot, obj in zip(slots, objs):
                head = RemoteMetadata(obj.get_size(), obj.get_shapes(), obj.get_dtypes(), obj.get_memory_format())
                ctypes.memmove(self.headers.addr(slot), head.serialize(), self.header_bytes)
                ptrs.append([self.headers.addr(slot), obj.data_ptr])
                sizes.append([self.header_bytes, obj.get_size()])
            return self.store.batch_put_from_multi_buffers([k.to_string() for k in keys], ptrs, sizes)
        finally:
            self.headers.give(slots)

    async def put(self, key: CacheEngineKey, memory_obj: MemoryObj) -> None:
        await self.batched_put([key], [memory_obj])

    def support_batched_put(self) -> bool:
        return True

    async def batched_put(self, keys: List[CacheEngineKey], memory_objs: List[MemoryObj]) -> None:
        if not keys:
            return
        codes = await asyncio.to_thread(self._put_many, list(keys), list(memory_objs))
        bad = [(k, c) for k, c in zip(keys, codes) if c != 0]
        if bad:
            _log.warning("gostore: %d of %d chunks not stored (first: %s, code %d)", len(bad), len(keys),
                         bad[0][0].to_string(), bad[0][1])

    # ---- reads --------------------------------------------------------------

    def _get_many(self, keys: List[CacheEngineKey]) -> List[Optional[MemoryObj]]:
        objs = [self.local_cpu_backend.allocate(self.meta_shapes, self.meta_dtypes, self.meta_fmt) for _ in keys]
        want = [i for i, o in enumerate(objs) if o is not None]
        out: List[Optional[MemoryObj]] = [None] * len(keys)
        if not want:
            return out
        slots = self.headers.take(len(want))
        try:
            got = self.store.batch_get_into_multi_buffers(
                [keys[i].to_string() for i in want],
                [[self.headers.addr(s), objs[i].data_ptr] for s, i in zip(slots, want)],
                [[self.header_bytes, objs[i].get_size()] for i in want])
            for s, i, n in zip(slots, want, got):
                out[i] = self._checked(keys[i], objs[i], s, n)
        finally:
            self.headers.give(slots)
        return out

    def _checked(self, key: CacheEngineKey, obj: MemoryObj, slot: int, n: int) -> Optional[MemoryObj]:
        """obj holding the chunk just read (n bytes, header included), or
        None (and obj released) when it is missing or not this engine's."""
        if n <= self.header_bytes:
            obj.ref_count_down()
            return None
        head = RemoteMetadata.deserialize(ctypes.string_at(self.headers.addr(slot), self.header_bytes))
        length = n - self.header_bytes
        if (head.length != length or head.fmt != self.meta_fmt or list(head.dtypes) != list(self.meta_dtypes)
                or not self._same_shapes(head.shapes)
                or length % self.single_token_size or length > self.full_chunk_size_bytes):
            _log.warning("gostore: chunk %s does not match this engine's layout (%d bytes, %s, %s): a miss",
                         key.to_string(), length, head.fmt, head.dtypes)
            obj.ref_count_down()
            return None
        return self.reshape_partial_chunk(obj, length)

    def _same_shapes(self, shapes) -> bool:
        """Whether a stored chunk's shapes are this engine's, but for the
        token count (dimension 2 of [2 or 1, layers, tokens, hidden];
        dimension 0 of the layerwise forms)."""
        if len(shapes) != len(self.meta_shapes):
            return False
        for got, ours in zip(shapes, self.meta_shapes):
            if len(got) != len(ours):
                return False
            tokens = 2 if len(ours) == 4 else 0
            if any(g != o for d, (g, o) in enumerate(zip(got, ours)) if d != tokens):
                return False
        return True

    async def get(self, key: CacheEngineKey) -> Optional[MemoryObj]:
        return (await self.batched_get([key]))[0]

    def support_batched_get(self) -> bool:
        return True

    async def batched_get(self, keys: List[CacheEngineKey]) -> List[Optional[MemoryObj]]:
        if not keys:
            return []
        return await asyncio.to_thread(self._get_many, list(keys))

    # ---- lookups and the rest -----------------------------------------------

    async def exists(self, key: CacheEngineKey) -> bool:
        return self.exists_sync(key)

    def exists_sync(self, key: CacheEngineKey) -> bool:
        return self.store.is_exist(key.to_string()) == 1

    def support_batched_async_contains(self) -> bool:
        return True

    async def batched_async_contains(self, lookup_id: str, keys: List[CacheEngineKey], pin: bool = False) -> int:
        """How many leading chunks of keys the store holds (one call)."""
        codes = await asyncio.to_thread(self.store.batch_is_exist, [k.to_string() for k in keys])
        return _config.leading(c == 1 for c in codes)

    async def list(self) -> List[str]:
        return []

    async def close(self) -> None:
        self.store.close()
