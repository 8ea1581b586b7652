"""Read and write the safetensors file format with numpy alone (no
``safetensors`` package needed): an 8-byte little-endian header length, a
JSON header naming each tensor's dtype, shape and byte range, then the
bytes. Torch tensors are written through numpy (on the host); files are
read into numpy arrays."""

from __future__ import annotations

import json
import struct
from typing import Any, Dict

__all__ = ["save", "load"]

# safetensors dtype names <-> numpy dtype strings (little endian).
_TO_NUMPY = {
    "BOOL": "|b1", "U8": "|u1", "I8": "|i1", "U16": "<u2", "I16": "<i2", "F16": "<f2",
    "U32": "<u4", "I32": "<i4", "F32": "<f4", "U64": "<u8", "I64": "<i8", "F64": "<f8",
}
_FROM_NUMPY = {v: k for k, v in _TO_NUMPY.items()}
_MAX_HEADER = 100 << 20  # the format's own limit on the JSON header


def _as_numpy(t: Any) -> Any:
    import numpy as np

    if hasattr(t, "detach") and hasattr(t, "cpu"):  # torch
        t = t.detach().cpu()
        if str(t.dtype) == "torch.bfloat16":
            raise ValueError("bfloat16 tensors cannot be written without torch's safetensors support")
        t = t.numpy()
    return np.ascontiguousarray(t)


def save(path: str, tensors: Dict[str, Any]) -> None:
    """Write ``tensors`` (name -> numpy array or torch tensor) to ``path``."""
    arrays = {name: _as_numpy(t) for name, t in tensors.items()}
    header: Dict[str, Any] = {}
    offset = 0
    for name, a in arrays.items():
        code = _FROM_NUMPY.get(a.dtype.newbyteorder("<").str if a.dtype.byteorder == ">" else a.dtype.str)
        if code is None:
            raise ValueError(f"tensor {name!r}: dtype {a.dtype} has no safetensors name")
        header[name] = {"dtype": code, "shape": list(a.shape), "data_offsets": [offset, offset + a.nbytes]}
        offset += a.nbytes
    blob = json.dumps(header, separators=(",", ":")).encode("utf-8")
    blob += b" " * (-len(blob) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(blob)))
        f.write(blob)
        for a in arrays.values():
            f.write(a.astype(a.dtype.newbyteorder("<"), copy=False).tobytes())


def load(path: str) -> Dict[str, Any]:
    """The tensors of the safetensors file at ``path``, as numpy arrays, in
    file order; ValueError for a malformed file."""
    import numpy as np

    with open(path, "rb") as f:
        raw = f.read()
    if len(raw) < 8:
        raise ValueError("shorter than a safetensors header")
    (n,) = struct.unpack_from("<Q", raw)
    if n > _MAX_HEADER or 8 + n > len(raw):
        raise ValueError(f"header length {n} does not fit the file")
    try:
        header = json.loads(raw[8:8 + n])
    except (UnicodeDecodeError, json.JSONDecodeError) as e:
        raise ValueError(f"header is not JSON: {e}") from None
    data = memoryview(raw)[8 + n:]
    out: Dict[str, Any] = {}
    for name, spec in header.items():
        if name == "__metadata__":
            continue
        try:
            dt = np.dtype(_TO_NUMPY[spec["dtype"]])
            start, end = (int(x) for x in spec["data_offsets"])
            shape = tuple(int(x) for x in spec["shape"])
        except (KeyError, TypeError, ValueError) as e:
            raise ValueError(f"tensor {name!r}: bad entry {spec!r}") from e
        count = int(np.prod(shape)) if shape else 1
        if not 0 <= start <= end <= len(data) or end - start != count * dt.itemsize:
            raise ValueError(f"tensor {name!r}: bytes {start}..{end} do not match {spec['dtype']}{list(shape)}")
        out[name] = np.frombuffer(data[start:end], dtype=dt).reshape(shape).copy()
    return out
