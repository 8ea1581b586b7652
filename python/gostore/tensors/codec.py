"""The stored form of tensors: a self-describing header, then the raw bytes.

``MooncakeDistributedStore.put_tensor`` and friends store an array or tensor
as one object, in one of two forms.

**Mooncake's form**, used whenever it can describe the tensor (a dtype of
its table, at most 8 dimensions, a shard of at most 4 axes): the object is
byte for byte what Mooncake 0.3.13 writes, so tools that read or patch
those headers (its structured-object store, ``_serialize_tensor``) work on
ours. A 304-byte header, then the data::

    offset  size  field (little endian)
    0       4     magic 0x4D4F4F4E ("NOOM" on disk)
    4       2     version (1)
    6       2     header size (304)
    8       4     dtype: index into ``MC_DTYPES``
    12      4     ndim (0..8)
    16      4     layout kind: 0 whole tensor, 1 shard
    20      4     flags (Mooncake writes 0; ours: bit 0 the tensor was on a
                  CUDA device, bit 1 it was a numpy array)
    24      8     where the data starts (304)
    32      8     data bytes
    40      64    the whole tensor's shape, -1 past ndim
    104     64    this object's shape, -1 past ndim
    168     4     number of axes (0..4), then 4 bytes of zeros
    176     128   4 axes of 32 bytes: kind (0 dp, 1 tp, 2 ep, 3 pp), index,
                  rank, size, split_dim (-1 none), expert id (ep) or stage
                  id (pp), the shard's extent along split_dim (i64)

**gostore's own form**, for what Mooncake's cannot hold (numpy dtypes
outside its table, structured dtypes, more dimensions)::

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

Its descriptor is numpy's (``numpy.lib.format.dtype_to_descr``: every dtype
but ``object``, structured ones included) or torch's dtype name
(``"bfloat16"``, ``"float8_e4m3fn"``...). The data is C-contiguous: a
non-contiguous input is copied into C order first (one copy, on the way in
only). In gostore's form the data starts on a 64-byte boundary; in
Mooncake's, 16 bytes past one (offset 304), aligned for every dtype.

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
import functools
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


# Mooncake's form (see the module's docstring).
MC_MAGIC = 0x4D4F4F4E
MC_VERSION = 1
MC_HEADER_SIZE = 304
_MC_FIXED = struct.Struct("<IHHiiIIQQ")  # magic, version, header size, dtype, ndim, layout, flags, offset, bytes
_MC_DIMS, _MC_AXES = 8, 4
_MC_SHAPES = struct.Struct("<8q8qII")  # whole shape, own shape, axis count, zeros
_MC_AXIS = struct.Struct("<iiiiiiq")  # kind, index, rank, size, split_dim, expert/stage id, split extent
assert _MC_FIXED.size + _MC_SHAPES.size + _MC_AXES * _MC_AXIS.size == MC_HEADER_SIZE
MC_DTYPES = (
    "float32", "float64", "int8", "uint8", "int16", "uint16", "int32", "uint32", "int64", "uint64",
    "bool", "float16", "bfloat16", "float8_e4m3fn", "float8_e5m2",
)
"""Mooncake's dtype numbers: a dtype's index here, named as torch names it."""
_MC_ITEMSIZE = (4, 8, 1, 1, 2, 2, 4, 4, 8, 8, 1, 2, 2, 1, 1)
# numpy descriptors of the dtypes Mooncake's table holds.
_MC_OF_NUMPY = {
    "<f4": "float32", "<f8": "float64", "|i1": "int8", "|u1": "uint8", "<i2": "int16", "<u2": "uint16",
    "<i4": "int32", "<u4": "uint32", "<i8": "int64", "<u8": "uint64", "|b1": "bool", "<f2": "float16",
}
_NUMPY_OF_MC = {v: k for k, v in _MC_OF_NUMPY.items()}
_MC_FLAG_CUDA, _MC_FLAG_NUMPY = 1, 2
_I32_MIN, _I32_MAX = -(1 << 31), (1 << 31) - 1
_MC_SHARD = 1


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


def torch_available() -> bool:
    return _torch() is not None


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


def _mc_header(kind: int, descr: str, shape: Tuple[int, ...], nbytes: int, flags: int,
               layout: Optional[ShardLayout]) -> Optional[bytes]:
    """The header in Mooncake's form, or None when that form cannot hold
    this tensor."""
    name = descr if kind == KIND_TORCH else _MC_OF_NUMPY.get(descr)
    if name not in MC_DTYPES or len(shape) > _MC_DIMS:
        return None
    axes = b""
    whole = shape
    if layout is not None:
        if len(layout.axes) > _MC_AXES or len(layout.global_shape) != len(shape):
            return None
        whole = layout.global_shape
        for i, a in enumerate(layout.axes):
            # Mooncake keeps an expert id only on an ep axis, a stage only on pp.
            if (a.expert_id is not None) != (a.kind == "ep") or (a.stage_id is not None) != (a.kind == "pp"):
                return None
            split = -1 if a.split_dim is None else a.split_dim
            extent = shape[split] if 0 <= split < len(shape) else 0
            ident = a.expert_id if a.kind == "ep" else a.stage_id if a.kind == "pp" else 0
            if not all(_I32_MIN <= v <= _I32_MAX for v in (a.rank, a.size, split, ident)):
                return None  # Mooncake's axis fields are 32-bit
            axes += _MC_AXIS.pack(AXIS_KINDS.index(a.kind), i, a.rank, a.size, split, ident, extent)
    pad = (-1,) * (_MC_DIMS - len(shape))
    mc_flags = (_MC_FLAG_CUDA if flags & FLAG_CUDA else 0) | (_MC_FLAG_NUMPY if kind == KIND_NUMPY else 0)
    head = _MC_FIXED.pack(MC_MAGIC, MC_VERSION, MC_HEADER_SIZE, MC_DTYPES.index(name), len(shape),
                          _MC_SHARD if layout is not None else 0, mc_flags, MC_HEADER_SIZE, nbytes)
    head += _MC_SHAPES.pack(*whole, *pad, *shape, *pad, len(layout.axes) if layout else 0, 0)
    return head + axes + bytes(MC_HEADER_SIZE - len(head) - len(axes))


# The dimension slots past a tensor's ndim, as Mooncake fills them (-1).
_MC_UNUSED = [(-1,) * (_MC_DIMS - ndim) for ndim in range(_MC_DIMS + 1)]


def _mc_decode(mv: memoryview, total: int) -> Optional[Header]:
    """The Mooncake-form header at the start of ``mv``, checked as
    Mooncake checks it, or None."""
    if len(mv) < MC_HEADER_SIZE:
        return None
    _, version, size, dtype, ndim, kind, flags, offset, nbytes = _MC_FIXED.unpack_from(mv, 0)
    fields = _MC_SHAPES.unpack_from(mv, _MC_FIXED.size)
    whole, shape, naxes = fields[:ndim], fields[_MC_DIMS:_MC_DIMS + ndim], fields[2 * _MC_DIMS]
    if (version != MC_VERSION or size != MC_HEADER_SIZE or not 0 <= dtype < len(MC_DTYPES)
            or not 0 <= ndim <= _MC_DIMS or naxes > _MC_AXES or kind > _MC_SHARD
            or not MC_HEADER_SIZE <= offset <= total or nbytes != total - offset
            or (ndim and min(min(whole), min(shape)) < 0)
            or fields[ndim:_MC_DIMS] != _MC_UNUSED[ndim] or fields[_MC_DIMS + ndim:2 * _MC_DIMS] != _MC_UNUSED[ndim]):
        return None
    count = 1
    for n in shape:
        count *= n
    if nbytes != count * _MC_ITEMSIZE[dtype]:
        return None
    axes = []
    for i in range(naxes):
        code, _, rank, parts, split, ident, _ = _MC_AXIS.unpack_from(mv, _MC_FIXED.size + _MC_SHAPES.size
                                                                     + i * _MC_AXIS.size)
        if not 0 <= code < len(AXIS_KINDS) or not 0 <= rank < parts or not -1 <= split < ndim:
            return None  # (Mooncake's "reserved" axis kind, 4, names nothing gostore writes)
        k = AXIS_KINDS[code]
        axes.append(Axis(k, rank, parts, None if split < 0 else split,
                         ident if k == "ep" else None, ident if k == "pp" else None))
    layout = ShardLayout(tuple(whole), tuple(axes)) if kind == _MC_SHARD else None
    name = MC_DTYPES[dtype]
    if flags & _MC_FLAG_NUMPY and name in _NUMPY_OF_MC:
        return Header(KIND_NUMPY, _NUMPY_OF_MC[name], tuple(shape), nbytes, offset,
                      FLAG_CUDA if flags & _MC_FLAG_CUDA else 0, layout)
    return Header(KIND_TORCH, name, tuple(shape), nbytes, offset, FLAG_CUDA if flags & _MC_FLAG_CUDA else 0, layout)


def _header(kind: int, descr: str, shape: Tuple[int, ...], nbytes: int, flags: int = 0,
            layout: Optional[ShardLayout] = None) -> bytes:
    mc = _mc_header(kind, descr, shape, nbytes, flags, layout)
    if mc is not None:
        return mc
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


def _is_mc(mv: memoryview) -> bool:
    return len(mv) >= 4 and struct.unpack_from("<I", mv)[0] == MC_MAGIC


def header_length(prefix: Any) -> int:
    """How many bytes the header whose first ``FIXED_SIZE`` bytes are
    ``prefix`` takes (the data starts there); 0 when they are no header."""
    mv = memoryview(prefix).cast("B")
    if len(mv) < FIXED_SIZE:
        return 0
    if _is_mc(mv):
        _, version, size, _, _, _, _, offset, _ = _MC_FIXED.unpack_from(mv, 0)
        ok = version == MC_VERSION and size == MC_HEADER_SIZE and MC_HEADER_SIZE <= offset <= _MAX_MC_OFFSET
        return offset if ok else 0
    magic, version, _, ndim, dlen, flags, _ = _FIXED.unpack_from(mv, 0)
    if magic != MAGIC or version != VERSION or ndim > _MAX_NDIM or dlen > _MAX_DESCR:
        return 0
    end = _body_length(ndim, dlen, flags)
    return end + (-end % HEADER_ALIGN)


FIXED_SIZE = max(_FIXED.size, _MC_FIXED.size)
"""Bytes of an object's start that tell how long its header is."""
_MAX_MC_OFFSET = 1 << 20  # Mooncake writes 304; a longer gap is read only up to this


def decode_prefix(prefix: Any) -> Optional[Header]:
    """The header at the start of ``prefix``, which holds at least the
    whole header (and maybe no data): the object's length is taken from
    the header itself."""
    n = header_length(prefix)
    mv = memoryview(prefix).cast("B")
    if n == 0 or len(mv) < n:
        return None
    nbytes = _MC_FIXED.unpack_from(mv, 0)[-1] if _is_mc(mv) else _FIXED.unpack_from(mv, 0)[-1]
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
    if _is_mc(mv):
        return _mc_decode(mv, total)
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


@functools.lru_cache(maxsize=256)
def _numpy_dtype(descr: str) -> Any:
    """The numpy dtype a header's ``descr`` names (cached: a batch of
    tensors names a few dtypes many times)."""
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


def serialize(tensor: Any) -> Tuple[bytes, int, int, Any]:
    """Mooncake's ``_serialize_tensor``: a torch tensor's header in
    Mooncake's form, the address and length of its data, and the
    contiguous tensor that holds the data (keep it alive while the address
    is used). ValueError for anything Mooncake's form cannot hold."""
    if not is_torch_tensor(tensor):
        raise ValueError("unsupported tensor for Mooncake tensor serialization")
    parts = encode(tensor)
    if not _is_mc(memoryview(parts.header)):
        raise ValueError("unsupported tensor for Mooncake tensor serialization")
    t = parts.keep
    nbytes = t.numel() * t.element_size()
    return parts.header, t.data_ptr() if nbytes else 0, nbytes, t


def deserialize(payload: bytes) -> Any:
    """Mooncake's ``_deserialize_tensor``: the torch tensor (on the host)
    of a whole object in Mooncake's form; ValueError when ``payload`` is
    not one."""
    if not isinstance(payload, bytes):
        raise TypeError(f"payload must be bytes, not {type(payload).__name__}")
    hdr = decode_header(payload) if _is_mc(memoryview(payload)) else None
    if hdr is None:
        raise ValueError("invalid serialized Mooncake tensor payload")
    torch = _torch()
    if torch is None:
        raise ModuleNotFoundError("deserializing a tensor needs torch", name="torch")
    np = _np()
    out = materialize(np.frombuffer(bytearray(payload), np.uint8), hdr)
    return torch.from_numpy(out) if hdr.kind == KIND_NUMPY else out


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
