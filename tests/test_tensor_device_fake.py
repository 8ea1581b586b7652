"""put_tensor_from of tensors in GPU memory, with the FAKE CUDA driver of
gostore/gpu/testdata (no GPU exists where this runs: its "device memory" is
host memory it tracks). The store reads each object's header through the
driver before it stores it; tests/gpu runs the same calls on a real GPU."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys

import pytest

HERE = os.path.dirname(os.path.abspath(__file__))
FAKE_SRC = os.path.join(HERE, "..", "gostore", "gpu", "testdata", "fakecuda.c")

CHILD = r'''
import ctypes, os, sys
import numpy as np
from gostore import MooncakeDistributedStore
from gostore.tensors import codec

cuda = ctypes.CDLL(os.environ["GOSTORE_LIBCUDA"])
ctx = ctypes.c_void_p()
assert cuda.cuDevicePrimaryCtxRetain(ctypes.byref(ctx), 0) == 0
assert cuda.cuCtxSetCurrent(ctx) == 0

def on_device(blob):
    ptr = ctypes.c_uint64()
    assert cuda.cuMemAlloc_v2(ctypes.byref(ptr), len(blob)) == 0
    assert cuda.cuMemcpyHtoD_v2(ptr, blob, len(blob)) == 0
    return ptr.value

st = MooncakeDistributedStore()
assert st.setup("127.0.0.1", "P2PHANDSHAKE", 32 << 20, 16 << 20, "tcp", "", sys.argv[1]) == 0
long_names = np.dtype([("field_" + "x" * 60 + str(i), "<f4") for i in range(8)])
arrays = [
    np.arange(1000, dtype=np.float32),
    np.arange(24, dtype=np.int64).reshape(2, 3, 4),
    np.zeros(5, dtype=long_names),  # a header longer than the first read
]
assert codec.header_length(codec.encode(arrays[2]).header) > 512
keys, ptrs, sizes = [], [], []
for i, a in enumerate(arrays):
    parts = codec.encode(a)
    blob = bytes(parts.header) + parts.data.tobytes()
    p = on_device(blob)
    assert st.register_buffer(p, len(blob)) == 0
    keys.append(f"dev-{i}"); ptrs.append(p); sizes.append(len(blob))
garbage = on_device(b"\x07" * 4096)  # device memory that holds no tensor
assert st.register_buffer(garbage, 4096) == 0
res = st.batch_put_tensor_from(keys + ["garbage"], ptrs + [garbage], sizes + [4096])
assert res == [0, 0, 0, -600], res
for k, a in zip(keys, arrays):
    got = st.get_tensor(k)
    assert got is not None and got.dtype == a.dtype and got.shape == a.shape and got.tobytes() == a.tobytes(), k
assert st.is_exist("garbage") == 0
assert st.put_tensor_from("one", ptrs[0], sizes[0]) == 0
assert st.get_tensor("one").tobytes() == arrays[0].tobytes()
st.close()
print("child: ok")
'''


def test_put_tensor_from_device_memory(master, tmp_path):
    if not shutil.which("gcc"):
        pytest.skip("gcc is needed to build the fake CUDA driver")
    lib = tmp_path / "libcuda-fake.so"
    subprocess.run(["gcc", "-shared", "-fPIC", "-o", str(lib), FAKE_SRC], check=True)
    env = dict(os.environ, GOSTORE_LIBCUDA=str(lib))
    proc = subprocess.run([sys.executable, "-c", CHILD, master.addr], env=env, text=True,
                          stdout=subprocess.PIPE, stderr=subprocess.STDOUT, timeout=120)
    assert proc.returncode == 0 and "child: ok" in proc.stdout, proc.stdout[-4000:]
