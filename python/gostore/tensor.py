"""The stored form of tensors: a self-describing header, then the raw bytes.

``MooncakeDistributedStore.put_tensor`` and friends store an array or tensor
as one object::

    offset  size  field (little endian)
    0       4     magic b"GSTN"
    4       1     version (1)
    5       1     kind: 1 numpy array, 2 torch tensor
    6       2     ndim
    8       4     length of the dtype descriptor
    12      4     flags: bit 0, the tensor was on a CUDA device; bit 1, a
                  shard layout follows the descriptor; bits 8-15, its
                  number of axes
    16      8     data bytes
    24      8*nd  shape
    ...           dtype descriptor (UTF-8)
    ...           shard layout, when flagged: the whole tensor's shape
                  (8*nd), then 32 bytes per axis (see ``_AXIS``)
    ...           zeros up to a multiple of 64: the data starts there

The descriptor is numpy's (``numpy.lib.format.dtype_to_descr``: every dtype
but ``object``, structured ones included) or torch's dtype name
(``"bfloat16"``, ``"float8_e4m3fn"``...). The data is C-contiguous: a
non-contiguous input is copied into C order first (one copy, on the way in
only). Because the data starts on a 64-byte boundary, an array read back
into aligned memory is itself aligned.

numpy is needed for every tensor call; torch only for torch tensors. A
stored torch tensor read where torch is missing comes back as a numpy
array when numpy has its dtype.

A shard written by the parallel calls (``put_tensor_with_tp``,
``*_with_parallelism``) records its layout: the shape of the tensor it was
cut from and the axes (kind, rank, size, split dimension, expert, stage)
that name it, so a reader can check a shard is the one it asked for and
put a tensor back together from its shards.

A CUDA tensor's data is never touched by Python: it travels as a
:class:`DeviceSpan` (address and length) and the native side moves it with
the CUDA driver. It is read back onto the current CUDA device, or onto the
CPU where no GPU is.
"""

from __future__ import annotations

import ast
import struct
from typing import Any, List, NamedTuple, Optional, Tuple

__all__ = [
    "encode", "decode_header", "HEADER_ALIGN", "MAGIC", "TensorParts", "DeviceSpan", "Axis", "ShardLayout",
]

MAGIC = b"GSTN"
VERSION = 1
HEADER_ALIGN = 64
KIND_NUMPY = 1
KIND_TORCH = 2
_FIXED = struct.Struct("<4sBBHIIQ")  # magic, version, kind, ndim, descr_len, flags, data bytes
FLAG_CUDA = 1
FLAG_LAYOUT = 2
_LAYOUT_AXES_SHIFT = 8  # flags bits 8-15: how many axes the layout has
_MAX_NDIM = 64
_MAX_DESCR = 1 << 16
_MAX_AXES = 8
# One axis of a shard layout: kind code, which optional fields are set (1
# split_dim, 2 expert_id, 4 stage_id), rank, size, split_dim, expert_id,
# stage_id.
_AXIS = struct.Struct("<BBxxiiiqq")
AXIS_KINDS = ("dp", "tp", "ep", "pp")
"""Axis kinds in the order they appear in keys and layouts."""
_HAS_SPLIT, _HAS_EXPERT, _HAS_STAGE = 1, 2, 4


class Axis(NamedTuple):
    """One axis of a split, as stored: ``kind`` is one of :data:`AXIS_KINDS`."""

    kind: str
    rank: int
    size: int
    split_dim: Optional[int] = None
    expert_id: Optional[int] = None
    stage_id: Optional[int] = None


class ShardLayout(NamedTuple):
    """Where a shard belongs: the shape of the whole tensor and its axes."""

    global_shape: Tuple[int, ...]
    axes: Tuple[Axis, ...]


def _layout_bytes(layout: ShardLayout, ndim: int) -> bytes:
    if len(layout.global_shape) != ndim:
        raise ValueError("a shard layout needs the whole tensor's shape, of the shard's rank")
    if not 0 < len(layout.axes) <= _MAX_AXES:
        raise ValueError(f"a shard layout has 1 to {_MAX_AXES} axes")
    out = struct.pack(f"<{ndim}q", *layout.global_shape)
    for a in layout.axes:
        have = ((a.split_dim is not None) * _HAS_SPLIT | (a.expert_id is not None) * _HAS_EXPERT
                | (a.stage_id is not None) * _HAS_STAGE)
        out += _AXIS.pack(AXIS_KINDS.index(a.kind) + 1, have, a.rank, a.size,
                          -1 if a.split_dim is None else a.split_dim,
                          a.expert_id or 0, a.stage_id or 0)
    return out


def _layout_from(mv: memoryview, at: int, ndim: int, naxes: int) -> Optional[ShardLayout]:
    shape = struct.unpack_from(f"<{ndim}q", mv, at)
    at += 8 * ndim
    axes = []
    for _ in range(naxes):
        code, have, rank, size, split, expert, stage = _AXIS.unpack_from(mv, at)
        at += _AXIS.size
        if not 1 <= code <= len(AXIS_KINDS):
            return None
        axes.append(Axis(AXIS_KINDS[code - 1], rank, size,
                         split if have & _HAS_SPLIT else None,
                         expert if have & _HAS_EXPERT else None,
                         stage if have & _HAS_STAGE else None))
    return ShardLayout(shape, tuple(axes))


def _body_length(ndim: int, dlen: int, flags: int) -> int:
    """Bytes from the start of a header to the end of what it describes
    (before the padding)."""
    end = _FIXED.size + 8 * ndim + dlen
    if flags & FLAG_LAYOUT:
        end += 8 * ndim + _AXIS.size * ((flags >> _LAYOUT_AXES_SHIFT) & 0xFF)
    return end


def _np():
    try:
        import numpy
    except ImportError as e:
        raise ModuleNotFoundError(
            "gostore's tensor calls need numpy: pip install 'gostore[tensors]' (or numpy)",
            name="numpy",
        ) from e
    return numpy


def _torch():
    try:
        import torch
    except ImportError:
        return None
    return torch


def is_torch_tensor(x: Any) -> bool:
    t = type(x)
    return t.__module__.startswith("torch") and t.__name__ in ("Tensor", "Parameter")


class DeviceSpan:
    """GPU memory handed to the native side by address: Python never reads
    it. ``keep`` holds the tensor that owns it alive."""

    __slots__ = ("ptr", "nbytes", "keep")

    def __init__(self, ptr: int, nbytes: int, keep: Any) -> None:
        self.ptr, self.nbytes, self.keep = ptr, nbytes, keep


class TensorParts:
    """A tensor ready to store: its header and a byte view of its data (no
    copy of a C-contiguous input)."""

    __slots__ = ("header", "data", "keep")

    def __init__(self, header: bytes, data: Any, keep: Any) -> None:
        self.header = header
        self.data = data  # a 1-d uint8 numpy array over the tensor's memory, or a DeviceSpan
        self.keep = keep  # the contiguous source, alive while data is used


def _header(kind: int, descr: str, shape: Tuple[int, ...], nbytes: int, flags: int = 0,
            layout: Optional[ShardLayout] = None) -> bytes:
    d = descr.encode("utf-8")
    if len(shape) > _MAX_NDIM:
        raise ValueError(f"tensors of more than {_MAX_NDIM} dimensions are not supported")
    if len(d) > _MAX_DESCR:
        raise ValueError("dtype descriptor too long")
    tail = b""
    if layout is not None:
        tail = _layout_bytes(layout, len(shape))
        flags |= FLAG_LAYOUT | len(layout.axes) << _LAYOUT_AXES_SHIFT
    head = _FIXED.pack(MAGIC, VERSION, kind, len(shape), len(d), flags, nbytes)
    head += struct.pack(f"<{len(shape)}q", *shape) + d + tail
    return head + bytes(-len(head) % HEADER_ALIGN)


def encode(tensor: Any, layout: Optional[ShardLayout] = None) -> TensorParts:
    """The header and data of a numpy array or torch tensor; ``layout``
    marks it as a shard of a larger tensor.

    Raises TypeError for anything else, for object arrays and for tensors
    neither in host memory nor on a CUDA device."""
    np = _np()
    if isinstance(tensor, np.ndarray):
        if tensor.dtype.hasobject:
            raise TypeError("arrays of Python objects cannot be stored as tensors")
        # (not ascontiguousarray: it turns a 0-d array into a 1-d one)
        arr = tensor if tensor.flags.c_contiguous else tensor.copy(order="C")
        descr = np.lib.format.dtype_to_descr(arr.dtype)
        if not isinstance(descr, str):
            descr = repr(descr)
        data = arr.reshape(-1).view(np.uint8) if arr.size else np.empty(0, np.uint8)
        return TensorParts(_header(KIND_NUMPY, descr, arr.shape, arr.nbytes, 0, layout), data, arr)
    if is_torch_tensor(tensor):
        if tensor.device.type not in ("cpu", "cuda"):
            raise TypeError(f"tensors on {tensor.device} are not supported (CPU and CUDA only)")
        t = tensor.detach().contiguous()
        name = str(t.dtype).rsplit(".", 1)[-1]
        nbytes = t.numel() * t.element_size()
        if t.device.type == "cuda":
            # The store copies on the device's legacy stream; work still
            # queued on another stream (the producer's, or contiguous()'s)
            # must be done first, as .cpu() would wait for it.
            _torch().cuda.current_stream(t.device).synchronize()
            head = _header(KIND_TORCH, name, tuple(t.shape), nbytes, FLAG_CUDA, layout)
            return TensorParts(head, DeviceSpan(t.data_ptr(), nbytes, t), t)
        if nbytes:
            data = t.reshape(-1).view(_torch().uint8).numpy()
        else:
            data = np.empty(0, np.uint8)
        return TensorParts(_header(KIND_TORCH, name, tuple(t.shape), nbytes, 0, layout), data, t)
    raise TypeError(f"expected a numpy array or a torch tensor, not {type(tensor).__name__}")


class Header:
    """A parsed header: what the data is and where it starts."""

    __slots__ = ("kind", "descr", "shape", "nbytes", "offset", "flags", "layout")

    def __init__(
        self, kind: int, descr: str, shape: Tuple[int, ...], nbytes: int, offset: int, flags: int = 0,
        layout: Optional[ShardLayout] = None,
    ):
        self.kind, self.descr, self.shape, self.nbytes, self.offset = kind, descr, shape, nbytes, offset
        self.flags = flags
        self.layout = layout  # set for a shard written by the parallel calls

    @property
    def on_cuda(self) -> bool:
        return bool(self.flags & FLAG_CUDA)


def header_length(prefix: Any) -> int:
    """How many bytes the header whose first ``FIXED_SIZE`` bytes are
    ``prefix`` takes (the data starts there); 0 when they are no header."""
    mv = memoryview(prefix).cast("B")
    if len(mv) < _FIXED.size:
        return 0
    magic, version, _, ndim, dlen, flags, _ = _FIXED.unpack_from(mv, 0)
    if magic != MAGIC or version != VERSION or ndim > _MAX_NDIM or dlen > _MAX_DESCR:
        return 0
    end = _body_length(ndim, dlen, flags)
    return end + (-end % HEADER_ALIGN)


FIXED_SIZE = _FIXED.size


def decode_prefix(prefix: Any) -> Optional[Header]:
    """The header at the start of ``prefix``, which holds at least the
    whole header (and maybe no data): the object's length is taken from
    the header itself."""
    n = header_length(prefix)
    mv = memoryview(prefix).cast("B")
    if n == 0 or len(mv) < n:
        return None
    nbytes = _FIXED.unpack_from(mv, 0)[-1]
    return decode_header(mv[:n], n + nbytes)


def torch_header_length(dtype_name: str, shape: Tuple[int, ...], nbytes: int) -> int:
    """How long the header of a stored torch tensor of this dtype and
    shape is (a shard's is longer)."""
    return len(_header(KIND_TORCH, dtype_name, shape, nbytes))


def holds_dtype(hdr: Header, torch_name: str) -> bool:
    """Whether the object ``hdr`` describes holds elements of the torch
    dtype named ``torch_name`` (a numpy array of the same dtype counts)."""
    if hdr.kind == KIND_TORCH:
        return hdr.descr == torch_name
    np = _np()
    try:
        return _numpy_dtype(hdr.descr) == np.dtype(torch_name)
    except (TypeError, ValueError, SyntaxError):
        return False


def decode_header(buf: Any, total: Optional[int] = None) -> Optional[Header]:
    """The header at the start of ``buf`` (any buffer), or None when it is not
    a whole, well-formed tensor object of exactly that length (``total``
    when ``buf`` holds only the header of an object elsewhere)."""
    mv = memoryview(buf).cast("B")
    if len(mv) < _FIXED.size:
        return None
    total = len(mv) if total is None else total
    magic, version, kind, ndim, dlen, flags, nbytes = _FIXED.unpack_from(mv, 0)
    if magic != MAGIC or version != VERSION or kind not in (KIND_NUMPY, KIND_TORCH):
        return None
    naxes = (flags >> _LAYOUT_AXES_SHIFT) & 0xFF if flags & FLAG_LAYOUT else 0
    if ndim > _MAX_NDIM or dlen > _MAX_DESCR or naxes > _MAX_AXES or (flags & FLAG_LAYOUT and not naxes):
        return None
    end = _body_length(ndim, dlen, flags)
    offset = end + (-end % HEADER_ALIGN)
    if len(mv) < offset or total - offset != nbytes:
        return None
    shape = struct.unpack_from(f"<{ndim}q", mv, _FIXED.size)
    if any(n < 0 for n in shape):
        return None
    descr_end = _FIXED.size + 8 * ndim + dlen
    try:
        descr = bytes(mv[_FIXED.size + 8 * ndim:descr_end]).decode("utf-8")
    except UnicodeDecodeError:
        return None
    layout = None
    if naxes:
        layout = _layout_from(mv, descr_end, ndim, naxes)
        if layout is None or any(n < 0 for n in layout.global_shape):
            return None
    return Header(kind, descr, shape, nbytes, offset, flags, layout)


def _numpy_dtype(descr: str) -> Any:
    np = _np()
    spec: Any = ast.literal_eval(descr) if descr.startswith("[") else descr
    return np.lib.format.descr_to_dtype(spec)


def materialize(raw: Any, hdr: Header) -> Any:
    """The array or tensor ``hdr`` describes, viewing ``raw`` (a uint8
    numpy array holding the whole object) without copying it."""
    np = _np()
    data = raw[hdr.offset:hdr.offset + hdr.nbytes]
    if hdr.kind == KIND_TORCH:
        torch = _torch()
        if torch is not None:
            dtype = getattr(torch, hdr.descr, None)
            if not isinstance(dtype, torch.dtype):
                raise TypeError(f"stored torch dtype {hdr.descr!r} is unknown to this torch")
            t = torch.from_numpy(data) if hdr.nbytes else torch.empty(0, dtype=torch.uint8)
            return t.view(dtype).reshape(hdr.shape)
        try:
            dt = np.dtype(hdr.descr)
        except TypeError:
            raise TypeError(f"a torch {hdr.descr} tensor needs torch to be read back") from None
    else:
        dt = _numpy_dtype(hdr.descr)
    if hdr.nbytes == 0:
        return np.empty(hdr.shape, dtype=dt)
    return data.view(dt).reshape(hdr.shape)


class _CudaMemory:
    """``__cuda_array_interface__`` over raw device bytes, so torch can view
    them without a copy."""

    def __init__(self, ptr: int, nbytes: int) -> None:
        self.__cuda_array_interface__ = {
            "shape": (nbytes,), "typestr": "|u1", "data": (ptr, False), "version": 3, "strides": None,
        }


def cuda_view(ptr: int, hdr: Header) -> Any:
    """The torch tensor ``hdr`` describes, viewing the device memory of the
    whole object at ``ptr`` (header included) without copying it."""
    torch = _torch()
    if torch is None:
        raise TypeError("a tensor in device memory needs torch")
    dtype = getattr(torch, hdr.descr, None)
    if not isinstance(dtype, torch.dtype):
        raise TypeError(f"stored torch dtype {hdr.descr!r} is unknown to this torch")
    if hdr.nbytes == 0:
        return torch.empty(hdr.shape, dtype=dtype, device="cuda")
    raw = torch.as_tensor(_CudaMemory(ptr + hdr.offset, hdr.nbytes), device="cuda")
    return raw.view(dtype).reshape(hdr.shape)


def cuda_available() -> bool:
    torch = _torch()
    return torch is not None and torch.cuda.is_available()


def narrow(tensor: Any, dim: int, start: int, length: int) -> Any:
    """The slice ``[start, start + length)`` of ``tensor`` along ``dim``, a
    view where the library gives one."""
    if is_torch_tensor(tensor):
        return tensor.narrow(dim, start, length)
    return tensor[(slice(None),) * dim + (slice(start, start + length),)]


def concat(pieces: List[Any], dim: int) -> Any:
    """``pieces`` joined along ``dim`` into a new tensor (all torch tensors,
    or all numpy arrays)."""
    if is_torch_tensor(pieces[0]):
        return _torch().cat(pieces, dim)
    return _np().concatenate(pieces, axis=dim)


def split(tensor: Any, parts: int, dim: int) -> List[Any]:
    """``tensor`` cut into ``parts`` pieces along ``dim``, sizes differing by
    at most one (numpy.array_split / torch.tensor_split)."""
    if is_torch_tensor(tensor):
        return list(_torch().tensor_split(tensor, parts, dim))
    return _np().array_split(tensor, parts, axis=dim)


def tp_key(key: str, rank: int) -> str:
    """The key of a tensor-parallel shard."""
    return f"{key}_tp_{rank}"
