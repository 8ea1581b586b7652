"""Mooncake 0.3.13's tensor calls on registered memory and files:
``*_with_tp_from`` (a whole tensor object in memory, stored as shards),
``*_with_tp_into`` (a shard read into memory), and the safetensors pair.
numpy arrays here (torch is not installed by default); bytes compared."""

from __future__ import annotations

import ctypes

import numpy as np
import pytest

from gostore.tensors import safetensors as _safetensors

INVALID, FILE_NOT_FOUND = -600, -1100


@pytest.fixture
def reg(store):
    buf = np.zeros(1 << 20, dtype=np.uint8)
    assert store.register_buffer(buf.ctypes.data, buf.nbytes) == 0
    yield buf
    store.unregister_buffer(buf.ctypes.data)


def test_tp_from_and_into_registered_memory(store, reg, uniq):
    a = np.arange(6 * 5, dtype=np.float32).reshape(6, 5)
    key = f"{uniq}/w"
    assert store.put_tensor(key, a) == 0
    # Bring the whole object into registered memory, then store it in shards.
    obj = store.get_tensor_into(key, reg.ctypes.data, 4096)
    assert np.array_equal(obj, a)
    size = store.get_size(key)
    assert store.put_tensor_with_tp_from(f"{uniq}/s", reg.ctypes.data, size, tp_size=3, split_dim=1) == 0
    for r, want in enumerate(np.array_split(a, 3, axis=1)):
        assert np.array_equal(store.get_tensor(f"{uniq}/s_tp_{r}"), want)
        got = store.get_tensor_with_tp_into(f"{uniq}/s", reg.ctypes.data + 8192, 4096, tp_rank=r, tp_size=3)
        assert np.array_equal(got, want)
    assert store.get_tensor_with_tp_into(f"{uniq}/s", reg.ctypes.data + 8192, 4096, tp_rank=3, tp_size=3) == INVALID
    res = store.batch_get_tensor_with_tp_into([f"{uniq}/s", f"{uniq}/none"], [reg.ctypes.data + 8192,
                                              reg.ctypes.data + 16384], [4096, 4096], tp_rank=1, tp_size=3)
    assert np.array_equal(res[0], np.array_split(a, 3, axis=1)[1]) and res[1] == -704
    # Memory that holds no tensor, and a bad split dimension.
    reg[65536:65536 + 100] = 7
    assert store.batch_put_tensor_with_tp_from([f"{uniq}/x", f"{uniq}/y"], [reg.ctypes.data + 65536, reg.ctypes.data],
                                               [100, size], tp_size=2, split_dim=5) == [INVALID, INVALID]
    assert store.is_exist(f"{uniq}/x_tp_0") == 0


def test_safetensors_round_trip(store, tmp_path, uniq):
    a = np.arange(24, dtype=np.int64).reshape(2, 3, 4)
    key = f"{uniq}/t"
    assert store.put_tensor(key, a) == 0
    path = str(tmp_path / "t.safetensors")
    assert store.save_tensor_to_safetensor(key, path) == 0
    assert np.array_equal(_safetensors.load(path)[key], a)
    assert store.save_tensor_to_safetensor(f"{uniq}/missing", str(tmp_path / "m")) == FILE_NOT_FOUND
    got = store.load_tensor_from_safetensor(key=f"{uniq}/back", file_name=path)  # not in the file: its first
    assert np.array_equal(got, a) and np.array_equal(store.get_tensor(f"{uniq}/back"), a)
    assert store.load_tensor_from_safetensor(key=f"{uniq}/z", file_name=str(tmp_path / "absent")) is None
    (tmp_path / "bad").write_bytes(b"\xff" * 16)
    assert store.load_tensor_from_safetensor(key=f"{uniq}/z", file_name=str(tmp_path / "bad")) is None
    assert store.is_exist(f"{uniq}/z") == 0


def test_safetensors_files_match_the_reference_package(tmp_path):
    st = pytest.importorskip("safetensors.numpy", reason="the safetensors package is not installed")
    arrays = {"f": np.linspace(0, 1, 7, dtype=np.float32), "i": np.arange(6, dtype=np.int16).reshape(2, 3)}
    _safetensors.save(str(tmp_path / "ours"), arrays)
    theirs = st.load_file(str(tmp_path / "ours"))
    assert all(np.array_equal(theirs[k], v) and theirs[k].dtype == v.dtype for k, v in arrays.items())
    st.save_file(arrays, str(tmp_path / "theirs"))
    ours = _safetensors.load(str(tmp_path / "theirs"))
    assert all(np.array_equal(ours[k], v) and ours[k].dtype == v.dtype for k, v in arrays.items())


def test_safetensors_carry_torch_dtypes(store, tmp_path, uniq):
    """bfloat16 (which numpy lacks) goes to a file and back as a torch
    tensor, as Mooncake hands it back; the file is what the safetensors
    package writes and reads."""
    torch = pytest.importorskip("torch", reason="torch is not installed here (kept out of the default install)")
    t = (torch.arange(12, dtype=torch.float32) / 3).reshape(3, 4).to(torch.bfloat16)
    key = f"{uniq}/bf"
    assert store.put_tensor(key, t) == 0
    path = str(tmp_path / "bf.safetensors")
    assert store.save_tensor_to_safetensor(key, path) == 0
    loaded = store.load_tensor_from_safetensor(key=f"{uniq}/bf2", file_name=path)
    assert isinstance(loaded, torch.Tensor) and loaded.dtype == torch.bfloat16 and torch.equal(loaded, t)
    assert torch.equal(store.get_tensor(f"{uniq}/bf2"), t)
    with pytest.raises(ValueError, match="needs torch"):
        _safetensors.load(path)  # numpy alone cannot hold bfloat16
    try:
        import safetensors.torch as st
    except ImportError:
        return
    assert torch.equal(st.load_file(path)[key], t)
    st.save_file({"w": t}, str(tmp_path / "theirs"))
    assert torch.equal(_safetensors.load(str(tmp_path / "theirs"), as_torch=True)["w"], t)
