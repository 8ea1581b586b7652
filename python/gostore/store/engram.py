"""Engram embedding tables on the store: Mooncake's ``EngramStore``.

One layer of an Engram model keeps one float32 table per head, ``[N_h, D]``,
stored under the key ``engram:l{layer_id}:h{head}``. The caller computes
the row ids (``[B, L, H]``: batch, position, head); :meth:`EngramStore.lookup`
returns the rows ``[B, L, H, D]`` with one ranged read of all heads'
tables (``get_into_ranges``), straight into the output array.

Errors are raised as Mooncake raises them: ``ValueError`` for a bad
:class:`EngramStoreConfig`, ``RuntimeError`` for a failed populate,
lookup or removal (each logged with its cause).
"""

from __future__ import annotations

import logging
from typing import Any, List, Optional

from ..errors import ErrorCode

__all__ = ["EngramStore", "EngramStoreConfig"]

_log = logging.getLogger("gostore.engram")
_ROW_ITEM = 4  # float32


class EngramStoreConfig:
    """The physical layout of one layer: rows per head's table and the row
    width ``D``."""

    def __init__(self) -> None:
        self.table_vocab_sizes: List[int] = []
        self.embedding_dim: int = 0

    def __repr__(self) -> str:
        return f"EngramStoreConfig(table_vocab_sizes={self.table_vocab_sizes!r}, embedding_dim={self.embedding_dim})"


def _np() -> Any:
    from ..tensors.codec import _np as numpy

    return numpy()


class EngramStore:
    """One layer's head tables in ``store`` (a
    :class:`~gostore.MooncakeDistributedStore`, or None for the layout and
    key names alone)."""

    def __init__(self, layer_id: int, config: EngramStoreConfig, store: Any = None) -> None:
        if isinstance(layer_id, bool) or not isinstance(layer_id, int):
            raise TypeError(f"layer_id must be an int, not {type(layer_id).__name__}")
        if not isinstance(config, EngramStoreConfig):
            raise TypeError(f"config must be an EngramStoreConfig, not {type(config).__name__}")
        sizes = [int(n) for n in config.table_vocab_sizes]
        dim = int(config.embedding_dim)
        if not sizes:
            raise ValueError("EngramStoreConfig.table_vocab_sizes must not be empty")
        if dim <= 0:
            raise ValueError("EngramStoreConfig.embedding_dim must be positive")
        if any(n <= 0 for n in sizes):
            raise ValueError("EngramStoreConfig.table_vocab_sizes must contain only positive values")
        if store is not None and not hasattr(store, "get_into_ranges"):
            raise RuntimeError("EngramStore store parameter must be a MooncakeDistributedStore")
        self._store = store
        self._sizes = sizes
        self._dim = dim
        self._keys = [f"engram:l{layer_id}:h{h}" for h in range(len(sizes))]

    def get_table_vocab_sizes(self) -> List[int]:
        return list(self._sizes)

    def get_store_keys(self) -> List[str]:
        return list(self._keys)

    def get_num_heads(self) -> int:
        return len(self._sizes)

    def get_embedding_dim(self) -> int:
        return self._dim

    # ---- writing ------------------------------------------------------------

    def populate(self, embedding_buffers: list) -> None:
        """Store one float32 ``[N_h, D]`` numpy table per head. The layer's
        keys must not exist yet (remove them first to reuse a layer); when
        any table fails to go in, those that did are removed again."""
        np = _np()
        if not isinstance(embedding_buffers, list):
            raise TypeError(f"embedding_buffers must be a list, not {type(embedding_buffers).__name__}")
        if len(embedding_buffers) != len(self._keys):
            raise RuntimeError("embedding_buffers size must match num_heads")
        tables = []
        for buf, rows in zip(embedding_buffers, self._sizes):
            if not isinstance(buf, np.ndarray):
                raise RuntimeError("embedding_buffers must be NumPy arrays")
            try:
                t = np.ascontiguousarray(buf, dtype=np.float32)
            except (TypeError, ValueError):
                raise RuntimeError("embedding_buffers must be float32 arrays") from None
            if t.ndim != 2:
                raise RuntimeError("each embedding buffer must be 2D [N_h, D]")
            if t.shape != (rows, self._dim):
                raise RuntimeError("embedding buffer shape does not match get_table_vocab_sizes()/get_embedding_dim()")
            tables.append(t)
        if self._store is None:
            raise RuntimeError("populate failed: this EngramStore has no store")
        exists = self._store.batch_is_exist(self._keys)
        for key, e in zip(self._keys, exists):
            if e != 0:
                why = f"rc={e}" if e < 0 else "it exists: remove the layer first"
                _log.error("EngramStore populate: key %r: %s", key, why)
                raise RuntimeError("populate failed")
        results = self._store.batch_put_from(
            self._keys, [t.ctypes.data for t in tables], [t.nbytes for t in tables])
        if any(r != 0 for r in results):
            for key, r in zip(self._keys, results):
                if r == 0:
                    rc = self._store.remove(key, True)
                    if rc not in (0, int(ErrorCode.OBJECT_NOT_FOUND)):
                        _log.error("EngramStore populate: rolling back %r failed, rc=%d", key, rc)
            _log.error("EngramStore populate: put results %s", results)
            raise RuntimeError("populate failed")

    def remove_from_store(self, force: bool = False) -> int:
        """Remove the layer's tables; the number removed (missing ones are
        skipped). RuntimeError with the first other failure's code."""
        if self._store is None:
            raise RuntimeError(f"remove_from_store failed, rc={int(ErrorCode.INVALID_PARAMS)}")
        removed, first_error = 0, 0
        for key in self._keys:
            rc = self._store.remove(key, force)
            if rc == 0:
                removed += 1
            elif rc != int(ErrorCode.OBJECT_NOT_FOUND) and first_error == 0:
                first_error = rc
        if first_error:
            raise RuntimeError(f"remove_from_store failed, rc={first_error}")
        return removed

    # ---- reading ------------------------------------------------------------

    def lookup(self, row_ids: Any) -> Any:
        """The rows ``row_ids[b, l, h]`` of head ``h``'s table, as a float32
        numpy array ``[B, L, H, D]``. ``row_ids``: a numpy array (cast to
        int64) or nested lists of shape ``[B, L, H]``."""
        np = _np()
        heads = len(self._keys)
        if isinstance(row_ids, np.ndarray):
            try:
                ids = np.ascontiguousarray(row_ids, dtype=np.int64)
            except (TypeError, ValueError):
                raise RuntimeError("row_ids array must be convertible to int64") from None
            if ids.ndim != 3:
                raise RuntimeError("row_ids array must have shape [B, L, H]")
            if ids.shape[2] != heads:
                raise RuntimeError("row_ids last dimension must match num_heads")
        else:
            ids = self._ids_of_lists(row_ids, np)
        batch, length = ids.shape[0], ids.shape[1]
        out = np.zeros((batch, length, heads, self._dim), dtype=np.float32)
        if batch <= 0 or length <= 0 or self._store is None:
            raise RuntimeError("EngramStore lookup failed")
        rows = ids.reshape(-1, heads)
        if (rows < 0).any() or (rows >= np.asarray(self._sizes, dtype=np.int64)).any():
            _log.error("EngramStore lookup: a row id is outside its head's table")
            raise RuntimeError("EngramStore lookup failed")
        row_bytes = self._dim * _ROW_ITEM
        token_slots = np.arange(rows.shape[0], dtype=np.int64) * heads
        dst = [((token_slots + h) * row_bytes).tolist() for h in range(heads)]
        src = [(rows[:, h] * row_bytes).tolist() for h in range(heads)]
        sizes = [[row_bytes] * rows.shape[0] for _ in range(heads)]
        got = self._store.get_into_ranges([out.ctypes.data], [self._keys], [dst], [src], [sizes])
        if len(got) != 1 or len(got[0]) != heads or any(
                len(r) != rows.shape[0] or any(n != row_bytes for n in r) for r in got[0]):
            out.fill(0)
            _log.error("EngramStore lookup: ranged read answered %s", [sorted(set(r))[:3] for r in got[0]])
            raise RuntimeError("EngramStore lookup failed")
        return out

    def _ids_of_lists(self, row_ids: Any, np: Any) -> Any:
        """Nested lists ``[B][L][H]`` as an int64 array, checked as Mooncake
        checks them."""
        try:
            nested = [[[int(v) for v in tok] for tok in item] for item in row_ids]
        except TypeError:
            raise TypeError("row_ids must be a numpy array or nested lists [B, L, H]") from None
        if not nested or not nested[0]:
            raise RuntimeError("row_ids must not be empty")
        length, heads = len(nested[0]), len(self._keys)
        if any(len(item) != length or any(len(tok) != heads for tok in item) for item in nested):
            raise RuntimeError("EngramStore lookup failed")
        return np.asarray(nested, dtype=np.int64).reshape(len(nested), length, heads)
