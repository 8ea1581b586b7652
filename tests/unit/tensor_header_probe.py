"""Print, as one JSON line, what ``MODULE._serialize_tensor`` and
``_deserialize_tensor`` make of a fixed set of torch tensors: each header
in hex and whether the round trip gives the tensor back, then how bad
inputs fail. Run by test_mooncake_parity.py under the wheel's Python, once
for mooncake.store and once for gostore."""

import ctypes
import importlib
import json
import sys

import torch

mod = importlib.import_module(sys.argv[1])
out = []
cases = [
    ("f32 2x3", torch.arange(6, dtype=torch.float32).reshape(2, 3)),
    ("0-d", torch.tensor(7, dtype=torch.int64)),
    ("empty", torch.empty(0, 4, dtype=torch.float16)),
    ("8 dims", torch.ones((1, 2, 1, 2, 1, 2, 1, 2), dtype=torch.uint8)),
    ("transposed", torch.arange(12, dtype=torch.int32).reshape(3, 4).t()),
]
for name in ("float64", "int8", "int16", "uint16", "uint32", "uint64", "bool", "bfloat16",
             "float8_e4m3fn", "float8_e5m2"):
    dt = getattr(torch, name, None)
    if dt is not None:
        cases.append((name, torch.zeros(3, 5).to(dt)))
for label, t in cases:
    head, ptr, n, _keep = mod._serialize_tensor(t)
    back = mod._deserialize_tensor(bytes(head) + ctypes.string_at(ptr, n))
    raw = lambda x: bytes(x.contiguous().reshape(-1).view(torch.uint8).numpy())  # noqa: E731
    same = back.dtype == t.dtype and back.shape == t.shape and raw(back) == raw(t)
    out.append([label, bytes(head).hex(), n, bool(same)])
out.append(["metadata size", mod._tensor_metadata_size()])
for label, bad in (("numpy", lambda: mod._serialize_tensor(__import__("numpy").zeros(3))),
                   ("garbage", lambda: mod._deserialize_tensor(b"abc")),
                   ("bytearray", lambda: mod._deserialize_tensor(bytearray(400))),
                   ("9 dims", lambda: mod._serialize_tensor(torch.ones((1,) * 9)))):
    try:
        bad()
        out.append([label, "no error"])
    except Exception as e:  # the type is what must match
        out.append([label, type(e).__name__])
print(json.dumps(out))
