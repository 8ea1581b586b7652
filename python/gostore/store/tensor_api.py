"""The tensor half of ``MooncakeDistributedStore`` (PYTHON_API.md "Tensor
API"): arrays and tensors go through the store's own put/get paths as one
object each, a header (see :mod:`gostore.tensors.codec`) and the raw bytes.

Writes hand the native side two parts per object, the header and the
tensor's own memory, so nothing is copied on the way in beyond the one copy
into the store (a non-contiguous input is made contiguous first). Reads
land in one fresh numpy buffer per object and come back as a view of it of
the stored dtype and shape (a torch tensor if one was stored and torch is
installed): one copy out of the store.

Conventions follow the rest of the class: single writes return 0 or a
negative code, batch writes a list of those (all -600 when the lists differ
in length); reads return the tensor or ``None``; ``TypeError`` for what is
not a tensor (or a key that is not a str).
"""

from __future__ import annotations

import ctypes
import logging
from array import array
from typing import Any, List, Optional, Tuple

from .. import _native
from ..tensors import safetensors as _safetensors, codec as _codec
from .._args import _INVALID, _addr, _config, _int, _ints, _key, _keys, _pack_keys, _seq, _strs, _u64
from ..config import ReplicateConfig

__all__ = ["TensorAPI"]

_log = logging.getLogger("gostore")
_FILE_NOT_FOUND = -1100
_FILE_WRITE_FAIL = -1103
_NOT_FOUND = -704


def _numpy_alloc(n: int):
    import numpy as np

    arr = np.empty(n, dtype=np.uint8)
    return arr, arr.ctypes.data


# _HEADER_READ is how much of a tensor object in GPU memory is copied out to
# find its header: the fixed part and typical names and shapes, so one
# driver copy usually suffices (a longer header takes a second).
_HEADER_READ = 512


def _device_header(ptr: int, total: int) -> Optional[_codec.Header]:
    """The header of the tensor object of ``total`` bytes in GPU memory at
    ``ptr``, copied out by the driver (only the header), or None."""
    lib = _native.lib()
    head = bytearray(min(total, max(_HEADER_READ, _codec.FIXED_SIZE)))
    if len(head) < _codec.FIXED_SIZE:
        return None
    if lib.gs_device_copy(ctypes.addressof(ctypes.c_char.from_buffer(head)), ptr, len(head)) != 0:
        return None
    n = _codec.header_length(head)
    if n == 0 or n > total:
        return None
    if n > len(head):
        head = bytearray(n)
        if lib.gs_device_copy(ctypes.addressof(ctypes.c_char.from_buffer(head)), ptr, n) != 0:
            return None
    return _codec.decode_header(head[:n], total)


def _where(lib: Any, h: int, ptrs: List[int], sizes: List[int]) -> List[int]:
    """For each range, 1 inside a registered host buffer, 2 inside a
    registered GPU buffer, 0 otherwise (also for a range that cannot be
    one): one call into the library for the whole batch."""
    n = len(ptrs)
    ok = [_u64(p) and _u64(s) and s > 0 for p, s in zip(ptrs, sizes)]
    pa = array("Q", [p if good else 0 for p, good in zip(ptrs, ok)])
    sa = array("Q", [s if good else 0 for s, good in zip(sizes, ok)])
    out = array("i", bytes(4 * n))
    if n and lib.gs_buffers_registered(h, n, _addr(pa), _addr(sa), _addr(out)) != 0:
        return [0] * n
    return out.tolist()


def _tp_layouts(t: Any, size: int, dim: int) -> List[Optional[_codec.ShardLayout]]:
    """The layout each of the ``size`` TP shards of ``t`` records, so the
    parallel reads can check and rejoin them; none for an uneven split,
    which they never rejoin."""
    shape = tuple(int(n) for n in t.shape)
    d = dim + len(shape) if dim < 0 else dim
    if not 0 <= d < len(shape) or shape[d] % size:
        return [None] * size
    return [_codec.ShardLayout(shape, (_codec.Axis("tp", r, size, d),)) for r in range(size)]


def _onto_cuda(t: Any) -> Any:
    """A copy of host tensor ``t`` on the current CUDA device, made by the
    store's driver copy (a stored CUDA tensor read back)."""
    import torch

    dst = torch.empty_like(t, device="cuda")
    n = t.numel() * t.element_size()
    if _native.lib().gs_device_copy(dst.data_ptr(), t.data_ptr(), n) != 0:
        raise RuntimeError("copying a tensor onto the GPU failed (see the log)")
    return dst


class _Destination:
    """A torch tensor that :meth:`TensorAPI.get_tensor_into_cuda` reads
    into: where its memory is and what it can hold."""

    __slots__ = ("ptr", "nbytes", "dtype", "shape", "on_cuda", "header_length")

    @classmethod
    def of(cls, t: Any) -> Optional["_Destination"]:
        """None for a tensor that cannot be read into (not contiguous,
        neither on the CPU nor on a CUDA device); TypeError for what is
        not a torch tensor."""
        if not _codec.is_torch_tensor(t):
            raise TypeError(f"expected a torch tensor, not {type(t).__name__}")
        if not t.is_contiguous() or t.device.type not in ("cpu", "cuda"):
            return None
        d = cls()
        d.ptr = int(t.data_ptr())
        d.nbytes = int(t.numel()) * int(t.element_size())
        d.dtype = str(t.dtype).rsplit(".", 1)[-1]
        d.shape = tuple(int(n) for n in t.shape)
        d.on_cuda = t.device.type == "cuda"
        d.header_length = _codec.torch_header_length(d.dtype, d.shape, d.nbytes)
        if d.nbytes and not d.ptr:
            return None
        return d

    def fits(self, hdr: _codec.Header) -> bool:
        return hdr.shape == self.shape and hdr.nbytes == self.nbytes and _codec.holds_dtype(hdr, self.dtype)


def _view_object(ptr: int, total: int, where: int) -> Optional[Tuple[Any, _codec.Header]]:
    """(tensor, header) of the tensor object of ``total`` bytes at ``ptr``,
    viewing it there (``where`` 2: GPU memory, else host memory); None when
    it holds no tensor object."""
    if where == 2:
        hdr = _device_header(ptr, total)
        return None if hdr is None else (_codec.cuda_view(ptr, hdr), hdr)
    import numpy as np

    view = (ctypes.c_uint8 * total).from_address(ptr)
    hdr = _codec.decode_header(view)
    return None if hdr is None else (_codec.materialize(np.ctypeslib.as_array(view), hdr), hdr)


class TensorAPI:
    """Mixed into :class:`~gostore.MooncakeDistributedStore`; relies on its
    ``_write_multi``, ``_get_fresh``, ``_h``, ``batch_get_into`` and
    ``batch_put_from``/``batch_upsert_from``."""

    # ---- writing ----------------------------------------------------------

    def _put_tensors(
        self, keys: Any, tensors: Any, config: Any, upsert: bool,
        layouts: Optional[List[Optional[_codec.ShardLayout]]] = None,
    ) -> List[int]:
        """Store each tensor as one object (``layouts[i]``, when given,
        marks tensor i as a shard)."""
        ks = _keys(keys)
        ts = _seq(tensors, "tensors")
        cfg = _config(config)
        if len(ks) != len(ts) or cfg is None:
            return [_INVALID] * len(ks)
        marks = layouts if layouts is not None else [None] * len(ts)
        parts = [_codec.encode(t, lay) for t, lay in zip(ts, marks)]  # TypeError before anything is stored
        return self._write_multi(ks, [(p.header, p.data) for p in parts], cfg, upsert)

    def put_tensor(self, key: str, tensor: Any) -> int:
        """Store a numpy array or torch tensor; 0 or negative (an existing key
        is kept, as by :meth:`put`)."""
        return self._put_tensors([key], [tensor], None, False)[0]

    def pub_tensor(self, key: str, tensor: Any, config: Optional[ReplicateConfig] = None) -> int:
        """:meth:`put_tensor` with a replication config."""
        return self._put_tensors([key], [tensor], config, False)[0]

    def batch_put_tensor(self, keys: List[str], tensors_list: List[Any]) -> List[int]:
        """One :meth:`put_tensor` result per key."""
        return self._put_tensors(keys, tensors_list, None, False)

    def batch_pub_tensor(
        self, keys: List[str], tensors_list: List[Any], config: Optional[ReplicateConfig] = None
    ) -> List[int]:
        """One :meth:`pub_tensor` result per key."""
        return self._put_tensors(keys, tensors_list, config, False)

    def upsert_tensor(self, key: str, tensor: Any) -> int:
        """Insert or replace ``key`` with a tensor (see :meth:`upsert`)."""
        return self._put_tensors([key], [tensor], None, True)[0]

    def upsert_pub_tensor(
        self, key: str, tensor: Any, config: Optional[ReplicateConfig] = None
    ) -> int:
        """:meth:`upsert_tensor` with a replication config."""
        return self._put_tensors([key], [tensor], config, True)[0]

    def batch_upsert_tensor(self, keys: List[str], tensors_list: List[Any]) -> List[int]:
        """One :meth:`upsert_tensor` result per key."""
        return self._put_tensors(keys, tensors_list, None, True)

    def batch_upsert_pub_tensor(
        self, keys: List[str], tensors_list: List[Any], config: Optional[ReplicateConfig] = None
    ) -> List[int]:
        """One :meth:`upsert_pub_tensor` result per key."""
        return self._put_tensors(keys, tensors_list, config, True)

    # ---- tensor parallelism ---------------------------------------------------

    def _put_tp(
        self, keys: Any, tensors: Any, config: Any, tp_size: Any, split_dim: Any, upsert: bool
    ) -> List[int]:
        ks = _strs(keys, "base_keys")
        ts = _seq(tensors, "tensors_list")
        size = _int(tp_size, "tp_size")
        dim = _int(split_dim, "split_dim")
        if len(ks) != len(ts) or size < 1:
            return [_INVALID] * len(ks)
        shard_keys: List[str] = []
        shards: List[Any] = []
        layouts: List[Optional[_codec.ShardLayout]] = []
        for k, t in zip(ks, ts):
            try:
                pieces = _codec.split(t, size, dim)
            except (IndexError, ValueError, RuntimeError):
                return [_INVALID] * len(ks)  # no such dimension
            shard_keys += [_codec.tp_key(k, r) for r in range(size)]
            shards += pieces
            layouts += _tp_layouts(t, size, dim)
        codes = self._put_tensors(shard_keys, shards, config, upsert, layouts)
        out = []
        for j in range(len(ks)):
            mine = codes[j * size:(j + 1) * size]
            out.append(next((c for c in mine if c != 0), 0))
        return out

    def put_tensor_with_tp(
        self, key: str, tensor: Any, tp_rank: int = 0, tp_size: int = 1, split_dim: int = 0
    ) -> int:
        """Store ``tensor`` cut into ``tp_size`` shards along ``split_dim``,
        shard *r* under ``f"{key}_tp_{r}"``; 0 or the first error.
        (``tp_rank`` is accepted for Mooncake's signature: every shard is
        stored.)"""
        return self._put_tp([key], [tensor], None, tp_size, split_dim, False)[0]

    def pub_tensor_with_tp(
        self,
        key: str,
        tensor: Any,
        config: Optional[ReplicateConfig] = None,
        tp_rank: int = 0,
        tp_size: int = 1,
        split_dim: int = 0,
    ) -> int:
        """:meth:`put_tensor_with_tp` with a replication config."""
        return self._put_tp([key], [tensor], config, tp_size, split_dim, False)[0]

    def batch_put_tensor_with_tp(
        self,
        base_keys: List[str],
        tensors_list: List[Any],
        tp_rank: int = 0,
        tp_size: int = 1,
        split_dim: int = 0,
    ) -> List[int]:
        """One :meth:`put_tensor_with_tp` result per base key."""
        return self._put_tp(base_keys, tensors_list, None, tp_size, split_dim, False)

    def batch_pub_tensor_with_tp(
        self,
        base_keys: List[str],
        tensors_list: List[Any],
        config: Optional[ReplicateConfig] = None,
        tp_rank: int = 0,
        tp_size: int = 1,
        split_dim: int = 0,
    ) -> List[int]:
        """One :meth:`pub_tensor_with_tp` result per base key."""
        return self._put_tp(base_keys, tensors_list, config, tp_size, split_dim, False)

    def get_tensor_with_tp(
        self, key: str, tp_rank: int = 0, tp_size: int = 1, split_dim: int = 0
    ) -> Any:
        """Shard ``tp_rank`` of a tensor stored by :meth:`put_tensor_with_tp`,
        or None."""
        return self.batch_get_tensor_with_tp([key], tp_rank, tp_size, split_dim)[0]

    def batch_get_tensor_with_tp(
        self, base_keys: List[str], tp_rank: int = 0, tp_size: int = 1, split_dim: int = 0
    ) -> List[Any]:
        """One :meth:`get_tensor_with_tp` result per base key."""
        ks = _strs(base_keys, "base_keys")
        rank, size = _int(tp_rank, "tp_rank"), _int(tp_size, "tp_size")
        _int(split_dim, "split_dim")
        if not 0 <= rank < size:
            return [None] * len(ks)
        return self.batch_get_tensor([_codec.tp_key(k, rank) for k in ks])

    def put_tensor_with_tp_from(
        self, key: str, buffer_ptr: int, size: int, tp_rank: int = 0, tp_size: int = 1, split_dim: int = 0
    ) -> int:
        """:meth:`put_tensor_with_tp` of the whole tensor object (header and
        data, as :meth:`get_tensor_into` leaves it) in registered memory at
        ``buffer_ptr``: its ``tp_size`` shards are stored under
        ``f"{key}_tp_{r}"``; 0 or the first error, -600 when the memory
        holds no tensor."""
        return self.batch_put_tensor_with_tp_from([key], [buffer_ptr], [size], tp_rank, tp_size, split_dim)[0]

    def batch_put_tensor_with_tp_from(
        self, base_keys: List[str], buffer_ptrs: List[int], sizes: List[int], tp_rank: int = 0,
        tp_size: int = 1, split_dim: int = 0,
    ) -> List[int]:
        """One :meth:`put_tensor_with_tp_from` result per base key."""
        ks = _strs(base_keys, "base_keys")
        ps, ss = _ints(buffer_ptrs, "buffer_ptrs"), _ints(sizes, "sizes")
        _int(tp_rank, "tp_rank")
        if not (len(ks) == len(ps) == len(ss)):
            return [_INVALID] * len(ks)
        tensors = [self._tensor_at(p, s, w) for p, s, w in zip(ps, ss, _where(self._lib(), self._h(), ps, ss))]
        out = [_INVALID] * len(ks)
        idx = [i for i, t in enumerate(tensors) if t is not None]
        if idx:
            codes = self._put_tp([ks[i] for i in idx], [tensors[i] for i in idx], None, tp_size, split_dim, False)
            for i, c in zip(idx, codes):
                out[i] = c
        return out

    def _tensor_at(self, ptr: int, size: int, where: int) -> Any:
        """The tensor of the object at ``ptr`` (``where``: 1 registered host
        memory, 2 registered GPU memory), viewing it; None when it holds
        no tensor object or is not registered."""
        if size <= 0 or where not in (1, 2):
            return None
        found = _view_object(ptr, size, where)
        return None if found is None else found[0]

    def get_tensor_with_tp_into(
        self, key: str, buffer_ptr: int, size: int, tp_rank: int = 0, tp_size: int = 1, split_dim: int = 0
    ) -> Any:
        """:meth:`get_tensor_into` of shard ``tp_rank`` of a tensor stored by
        :meth:`put_tensor_with_tp`; -600 for a rank outside ``tp_size``."""
        _int(split_dim, "split_dim")
        return self.batch_get_tensor_with_tp_into([key], [buffer_ptr], [size], tp_rank, tp_size)[0]

    def batch_get_tensor_with_tp_into(
        self, base_keys: List[str], buffer_ptrs: List[int], sizes: List[int], tp_rank: int = 0, tp_size: int = 1
    ) -> List[Any]:
        """One :meth:`get_tensor_with_tp_into` result per base key."""
        ks = _strs(base_keys, "base_keys")
        rank, n = _int(tp_rank, "tp_rank"), _int(tp_size, "tp_size")
        if not 0 <= rank < n:
            return [_INVALID] * len(ks)
        return self.batch_get_tensor_into([_codec.tp_key(k, rank) for k in ks], buffer_ptrs, sizes)

    # ---- safetensors files --------------------------------------------------

    def save_tensor_to_safetensor(self, key: str, file_name: Optional[str] = None) -> int:
        """Write the tensor stored under ``key`` to a safetensors file
        (``file_name``, else the key), named ``key`` in it; 0, or -1100
        when the key holds no tensor (Mooncake's answer), -1103 when the
        file cannot be written."""
        k = _strs([key], "key")[0]
        path = k if file_name is None else _strs([file_name], "file_name")[0]
        t = self.get_tensor(k)
        if t is None:
            return _FILE_NOT_FOUND
        try:
            _safetensors.save(path, {k: t})
        except (OSError, ValueError) as e:
            _log.warning("save_tensor_to_safetensor %r to %s: %s", k, path, e)
            return _FILE_WRITE_FAIL
        return 0

    def load_tensor_from_safetensor(self, key: Optional[str] = None, file_name: str = "") -> Any:
        """Read a tensor from a safetensors file and store it under ``key``
        (else ``file_name``); the tensor named ``key`` in the file, or its
        first one (logged) when there is none of that name. Returns the
        tensor stored, or None when the file cannot be read or the put
        failed (logged)."""
        path = _strs([file_name], "file_name")[0]
        k = path if key is None else _strs([key], "key")[0]
        try:
            # Mooncake hands back a torch tensor; without torch, a numpy array.
            tensors = _safetensors.load(path, as_torch=_codec.torch_available())
        except (OSError, ValueError) as e:
            _log.warning("load_tensor_from_safetensor %s: %s", path, e)
            return None
        if not tensors:
            _log.warning("load_tensor_from_safetensor %s: the file holds no tensor", path)
            return None
        if k not in tensors:
            first = next(iter(tensors))
            _log.warning("load_tensor_from_safetensor %s: no tensor named %r; storing %r", path, k, first)
            t = tensors[first]
        else:
            t = tensors[k]
        rc = self.put_tensor(k, t)
        if rc != 0:
            _log.warning("load_tensor_from_safetensor %s: put of %r returned %d", path, k, rc)
            return None
        return t

    # ---- reading ------------------------------------------------------------

    def get_tensor(self, key: str) -> Any:
        """The stored array or tensor, or None (a miss, an error, or an
        object that is not a tensor)."""
        return self.batch_get_tensor([key])[0]

    def batch_get_tensor(self, keys: List[str]) -> List[Any]:
        """One :meth:`get_tensor` result per key."""
        return [None if got is None else got[0] for got in self._get_tensors(keys)]

    def _get_tensors(self, keys: Any) -> List[Optional[Tuple[Any, _codec.Header]]]:
        """(tensor, header) of each key's object: None for a miss, an error,
        or an object that is not a tensor."""
        ks = _keys(keys)
        out: List[Optional[Tuple[Any, _codec.Header]]] = [None] * len(ks)
        idx = [i for i, k in enumerate(ks) if k is not None]
        if not idx:
            return out
        # In standalone mode the library lends arrays the server can write
        # at memcpy speed (shared memory) for the reads it finishes; what
        # this process copies itself (a small batch) stays its own memory.
        lib = self._lib()
        lend = lib.lend_array if hasattr(type(lib), "lend_array") else None
        raws = self._get_fresh([ks[i] for i in idx], _numpy_alloc, lend)
        for i, raw in zip(idx, raws):
            if raw is None:
                continue
            hdr = _codec.decode_header(raw)
            if hdr is not None:
                t = _codec.materialize(raw, hdr)
                if hdr.on_cuda and hdr.nbytes and _codec.cuda_available():
                    t = _onto_cuda(t)
                out[i] = (t, hdr)
        return out

    def get_tensor_into(self, key: str, buffer_ptr: int, size: int) -> Any:
        """Read a stored tensor object (header and data) into registered
        memory at ``buffer_ptr`` and return the tensor viewing it there (no
        further copy); a negative code on failure (-600 when the buffer is
        too small or the object is not a tensor)."""
        return self.batch_get_tensor_into([key], [buffer_ptr], [size])[0]

    def batch_get_tensor_into(
        self, keys: List[str], buffer_ptrs: List[int], sizes: List[int]
    ) -> List[Any]:
        """One :meth:`get_tensor_into` result per key; all -600 when the lists
        differ in length."""
        return [got if isinstance(got, int) else got[0] for got in self._tensors_into(keys, buffer_ptrs, sizes)]

    def _tensors_into(self, keys: Any, buffer_ptrs: Any, sizes: Any) -> List[Any]:
        """:meth:`batch_get_tensor_into` giving (tensor, header) where it
        gives a tensor."""
        ks = _seq(keys, "keys")
        ps = _ints(buffer_ptrs, "buffer_ptrs")
        ss = _ints(sizes, "sizes")
        if not (len(ks) == len(ps) == len(ss)):
            return [_INVALID] * len(ks)
        got = self.batch_get_into(list(ks), ps, ss)
        where = _where(self._lib(), self._h(), ps, [max(r, 0) for r in got])
        out: List[Any] = []
        for r, p, w in zip(got, ps, where):
            if r < 0:
                out.append(r)
                continue
            found = _view_object(p, r, w)
            out.append(_INVALID if found is None else found)
        return out

    def get_tensor_into_cuda(self, key: str, tensor: Any) -> int:
        """Read the data of the tensor stored under ``key`` straight into
        ``tensor``, a contiguous torch tensor of the same dtype and shape
        (on a CUDA device; a CPU one works too). The bytes read, or -600
        when the key holds no such tensor (a miss included, as in
        Mooncake) or ``tensor`` does not fit it."""
        return self.batch_get_tensor_into_cuda([key], [tensor])[0]

    def batch_get_tensor_into_cuda(self, keys: List[str], tensors_list: List[Any]) -> List[int]:
        """One :meth:`get_tensor_into_cuda` result per key; all -600 when
        the lists differ in length."""
        ks = _keys(keys)
        if not isinstance(tensors_list, list):
            raise TypeError(f"tensors_list must be a list, not {type(tensors_list).__name__}")
        if len(ks) != len(tensors_list):
            return [_INVALID] * len(ks)
        dests = [_Destination.of(t) for t in tensors_list]  # TypeError for what is not a torch tensor
        out = [_INVALID] * len(ks)
        idx = [i for i, (k, d) in enumerate(zip(ks, dests)) if k is not None and d is not None]
        # First the headers, into host memory: the tensor's memory is
        # written only once its object is known to fit it.
        heads = self._stored_headers([ks[i] for i in idx], [dests[i].header_length for i in idx])
        reads = []
        for i, hdr in zip(idx, heads):
            if hdr is None or not dests[i].fits(hdr):
                continue
            if hdr.nbytes == 0:
                out[i] = 0
            else:
                reads.append((i, hdr))
        for on_device in (False, True):  # the driver is asked about CUDA memory only
            batch = [(i, hdr) for i, hdr in reads if dests[i].on_cuda == on_device]
            if not batch:
                continue
            scratch = [bytearray(hdr.offset) for _, hdr in batch]
            ptrs = array("Q")
            sizes = array("Q")
            for (i, hdr), head in zip(batch, scratch):
                ptrs.extend((ctypes.addressof(ctypes.c_char.from_buffer(head)), dests[i].ptr))
                sizes.extend((hdr.offset, hdr.nbytes))
            got = self._get_into([ks[i] for i, _ in batch], ptrs, sizes, array("I", [2]) * len(batch),
                                 _native.MAY_BE_DEVICE if on_device else 0)
            for (i, hdr), head, r in zip(batch, scratch, got):
                # The object may have been replaced between the two reads.
                again = _codec.decode_header(head, hdr.offset + hdr.nbytes)
                if r < 0:
                    out[i] = r if r != _NOT_FOUND else _INVALID
                elif again is not None and dests[i].fits(again):
                    out[i] = hdr.nbytes
        return out

    def _stored_headers(self, keys: List[bytes], guesses: List[int]) -> List[Optional[_codec.Header]]:
        """The header of each key's object, read by ranged reads of
        ``guesses[i]`` bytes (then of its real length when longer); None
        for a miss or an object that is not a tensor."""
        out: List[Optional[_codec.Header]] = [None] * len(keys)
        want = list(guesses)
        todo = list(range(len(keys)))
        for _ in range(2):
            if not todo:
                break
            heads = {i: bytearray(want[i]) for i in todo}
            ptrs = array("Q", [ctypes.addressof(ctypes.c_char.from_buffer(heads[i])) for i in todo])
            sizes = array("Q", [want[i] for i in todo])
            offsets = array("Q", bytes(8 * len(todo)))  # every header starts its object
            nparts = array("I", [1]) * len(todo)
            res = array("q", bytes(8 * len(todo)))
            blob, lens = _pack_keys([keys[i] for i in todo])
            self._lib().gs_get_ranges(self._h(), len(todo), blob, _addr(lens), _addr(ptrs), _addr(sizes),
                                        _addr(offsets), _addr(nparts), 0, _addr(res))
            retry = []
            for i, r in zip(todo, res):
                if r != want[i]:
                    continue  # a miss, or an object shorter than a header
                n = _codec.header_length(heads[i])
                if n > want[i]:
                    want[i] = n
                    retry.append(i)
                elif n:
                    out[i] = _codec.decode_prefix(heads[i])
            todo = retry
        return out

    def put_tensor_from(self, key: str, buffer_ptr: int, size: int) -> int:
        """Store registered memory that already holds a whole tensor object
        (header and data, as :meth:`get_tensor_into` leaves it) without
        copying it; -600 when it does not."""
        return self._tensor_from([key], [buffer_ptr], [size], False)[0]

    def batch_put_tensor_from(
        self, keys: List[str], buffer_ptrs: List[int], sizes: List[int]
    ) -> List[int]:
        """One :meth:`put_tensor_from` result per key."""
        return self._tensor_from(keys, buffer_ptrs, sizes, False)

    def upsert_tensor_from(self, key: str, buffer_ptr: int, size: int) -> int:
        """:meth:`put_tensor_from` that inserts or replaces."""
        return self._tensor_from([key], [buffer_ptr], [size], True)[0]

    def batch_upsert_tensor_from(
        self, keys: List[str], buffer_ptrs: List[int], sizes: List[int]
    ) -> List[int]:
        """One :meth:`upsert_tensor_from` result per key."""
        return self._tensor_from(keys, buffer_ptrs, sizes, True)

    def _tensor_from(self, keys: Any, ptrs: Any, sizes: Any, upsert: bool, config: Any = None) -> List[int]:
        ks = _seq(keys, "keys")
        ps = _ints(ptrs, "buffer_ptrs")
        ss = _ints(sizes, "sizes")
        if not (len(ks) == len(ps) == len(ss)):
            return [_INVALID] * len(ks)
        for k in ks:
            _key(k)  # TypeError for a non-str key
        # The header is read only where the store may read anyway: a
        # registered range (never an arbitrary address).
        valid = []
        for p, s, where in zip(ps, ss, _where(self._lib(), self._h(), ps, ss)):
            if where == 1:
                valid.append(_codec.decode_header((ctypes.c_uint8 * s).from_address(p)) is not None)
            else:
                valid.append(where == 2 and _device_header(p, s) is not None)
        out = [_INVALID] * len(ks)
        idx = [i for i, ok in enumerate(valid) if ok]
        if idx:
            write = self.batch_upsert_from if upsert else self.batch_put_from
            for i, r in zip(idx, write([ks[i] for i in idx], [ps[i] for i in idx],
                                       [ss[i] for i in idx], config)):
                out[i] = r
        return out
