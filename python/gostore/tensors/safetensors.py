"""Read and write the safetensors file format with numpy alone (no
``safetensors`` package needed): an 8-byte little-endian header length, a
JSON header naming each tensor's dtype, shape and byte range, then the
bytes. Torch tensors are written through numpy (on the host); files are
read into numpy arrays, or torch tensors when asked. bfloat16 and the two
float8 dtypes, which numpy lacks, need torch both ways."""

from __future__ import annotations

import json
import struct
from typing import Any, Dict, Optional, Tuple

__all__ = ["save", "load"]

# safetensors dtype names <-> numpy dtype strings (little endian).
_TO_NUMPY = {
    "BOOL": "|b1", "U8": "|u1", "I8": "|i1", "U16": "<u2", "I16": "<i2", "F16": "<f2",
    "U32": "<u4", "I32": "<i4", "F32": "<f4", "U64": "<u8", "I64": "<i8", "F64": "<f8",
}
_FROM_NUMPY = {v: k for k, v in _TO_NUMPY.items()}
# Dtypes numpy lacks: safetensors name -> (torch dtype name, numpy storage).
_TORCH_ONLY = {"BF16": ("bfloat16", "<u2"), "F8_E4M3": ("float8_e4m3fn", "|u1"), "F8_E5M2": ("float8_e5m2", "|u1")}
_TORCH_ONLY_OF = {v[0]: k for k, v in _TORCH_ONLY.items()}
_MAX_HEADER = 100 << 20  # the format's own limit on the JSON header


def _as_numpy(t: Any) -> Tuple[Any, Optional[str]]:
    """(a numpy array of ``t``'s bytes, the safetensors name of a dtype
    numpy lacks, or None)."""
    import numpy as np

    if hasattr(t, "detach") and hasattr(t, "cpu"):  # torch
        t = t.detach().cpu().contiguous()
        name = str(t.dtype).rsplit(".", 1)[-1]
        if name in _TORCH_ONLY_OF:
            code = _TORCH_ONLY_OF[name]
            storage = np.dtype(_TORCH_ONLY[code][1])
            import torch

            raw = t.view(torch.int16 if storage.itemsize == 2 else torch.uint8)
            return raw.numpy().view(storage), code
        t = t.numpy()
    return np.ascontiguousarray(t), None


def save(path: str, tensors: Dict[str, Any]) -> None:
    """Write ``tensors`` (name -> numpy array or torch tensor) to ``path``."""
    arrays = {name: _as_numpy(t) for name, t in tensors.items()}
    header: Dict[str, Any] = {}
    offset = 0
    for name, (a, code) in arrays.items():
        if code is None:
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
        for a, _ in arrays.values():
            f.write(a.astype(a.dtype.newbyteorder("<"), copy=False).tobytes())


def load(path: str, as_torch: bool = False) -> Dict[str, Any]:
    """The tensors of the safetensors file at ``path``, in file order: numpy
    arrays, or torch tensors with ``as_torch``. ValueError for a malformed
    file, or for a dtype numpy lacks without ``as_torch``."""
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
            code = spec["dtype"]
            dt = np.dtype(_TORCH_ONLY[code][1] if code in _TORCH_ONLY else _TO_NUMPY[code])
            start, end = (int(x) for x in spec["data_offsets"])
            shape = tuple(int(x) for x in spec["shape"])
        except (KeyError, TypeError, ValueError) as e:
            raise ValueError(f"tensor {name!r}: bad entry {spec!r}") from e
        count = int(np.prod(shape)) if shape else 1
        if not 0 <= start <= end <= len(data) or end - start != count * dt.itemsize:
            raise ValueError(f"tensor {name!r}: bytes {start}..{end} do not match {spec['dtype']}{list(shape)}")
        arr = np.frombuffer(data[start:end], dtype=dt).reshape(shape).copy()
        if as_torch:
            import torch

            t = torch.from_numpy(arr)
            out[name] = t.view(getattr(torch, _TORCH_ONLY[code][0])) if code in _TORCH_ONLY else t
        elif code in _TORCH_ONLY:
            raise ValueError(f"tensor {name!r}: {code} needs torch to be read")
        else:
            out[name] = arr
    return out
