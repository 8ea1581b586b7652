"""The tensor API (PYTHON_API.md "Tensor API") against the real master and
an in-process client: every numpy dtype and several shapes round-trip with
their bytes, dtype and shape; TP shards split and reassemble; batch forms
report misses as None; the zero-copy forms read into and store from
registered memory and refuse what is not a whole tensor object.
"""

from __future__ import annotations

import ctypes
import struct

import numpy as np
import pytest

from conftest import MiB
from gostore import ErrorCode, ReplicateConfig
from gostore.tensors import codec

INVALID = int(ErrorCode.INVALID_PARAMS)

DTYPES = [
    np.bool_, np.int8, np.uint8, np.int16, np.uint16, np.int32, np.uint32, np.int64,
    np.uint64, np.float16, np.float32, np.float64, np.longdouble, np.complex64,
    np.complex128, np.clongdouble, "M8[ns]", "m8[s]", "S5", "U3", ">i4", "<f8",
    [("a", "<i4"), ("b", "S3"), ("c", "<f8", (2,))],
]
SHAPES = [(), (0,), (7,), (3, 5), (2, 0, 4), (2, 3, 4, 5)]


def sample(dtype, shape, seed=0) -> np.ndarray:
    """A deterministic array of dtype and shape with varied values."""
    dt = np.dtype(dtype)
    n = int(np.prod(shape, dtype=np.int64))
    raw = np.random.default_rng(seed).integers(0, 256, size=n * dt.itemsize, dtype=np.uint8)
    arr = raw.view(dt) if n else np.empty(0, dt)
    if dt.kind == "b":
        arr = raw[:n].astype(bool)
    elif dt.kind in "f" or dt.kind == "c":
        arr = np.nan_to_num(arr)  # comparable with ==
    return arr.reshape(shape)


def same(a, b) -> bool:
    return (type(a) is type(b) and a.dtype == b.dtype and a.shape == b.shape
            and a.tobytes() == b.tobytes())


@pytest.fixture
def store(master_factory, store_factory):
    return store_factory(master_factory(), segment=64 * MiB)


@pytest.mark.parametrize("dtype", DTYPES, ids=lambda d: np.dtype(d).str if not isinstance(d, list) else "struct")
def test_every_dtype_round_trips(store, dtype):
    for i, shape in enumerate(SHAPES):
        a = sample(dtype, shape, seed=i)
        key = f"dt/{np.dtype(dtype).str}/{i}"
        assert store.put_tensor(key, a) == 0
        got = store.get_tensor(key)
        assert same(got, a), (shape, got, a)
        assert got.flags.writeable and got.flags.c_contiguous


def test_non_contiguous_input_is_stored_contiguous(store):
    base = sample(np.float32, (6, 8), seed=3)
    for i, view in enumerate([base.T, base[::2, 1::3], np.asfortranarray(base), base[:, ::-1]]):
        assert not view.flags.c_contiguous
        assert store.put_tensor(f"nc/{i}", view) == 0
        got = store.get_tensor(f"nc/{i}")
        assert got.flags.c_contiguous and got.shape == view.shape
        assert np.array_equal(got, view)


def test_what_is_not_a_tensor(store):
    with pytest.raises(TypeError):
        store.put_tensor("x", b"bytes")
    with pytest.raises(TypeError):
        store.put_tensor("x", np.array([object(), 1], dtype=object))
    with pytest.raises(TypeError):
        store.put_tensor(5, np.zeros(3))
    assert store.put_tensor("", np.zeros(3)) == INVALID
    # A plain value is not a tensor object: no tensor comes back.
    assert store.put("plain", b"GSTN but not a header") == 0
    assert store.get_tensor("plain") is None
    assert store.get_tensor("missing") is None


def test_batches_report_misses_and_mismatches(store):
    arrays = [sample(np.int32, (4, i + 1), seed=i) for i in range(5)]
    keys = [f"b/{i}" for i in range(5)]
    assert store.batch_put_tensor(keys, arrays) == [0] * 5
    got = store.batch_get_tensor(keys[:2] + ["b/missing"] + keys[2:])
    assert got[2] is None
    for a, g in zip(arrays, got[:2] + got[3:]):
        assert same(g, a)
    assert store.batch_put_tensor(keys, arrays[:4]) == [INVALID] * 5
    assert store.batch_put_tensor([], []) == []
    cfg = ReplicateConfig(replica_num=1, with_hard_pin=True)
    assert store.batch_pub_tensor(["p/0", "p/1"], arrays[:2], cfg) == [0, 0]
    assert store.pub_tensor("p/2", arrays[2], cfg) == 0
    assert same(store.get_tensor("p/2"), arrays[2])


@pytest.mark.parametrize("tp_size,split_dim", [(1, 0), (3, 0), (4, 1), (5, 2)])
def test_tp_shards_split_and_reassemble(store, tp_size, split_dim):
    a = sample(np.float16, (7, 9, 5), seed=tp_size)
    key = f"tp/{tp_size}/{split_dim}"
    assert store.put_tensor_with_tp(key, a, tp_rank=0, tp_size=tp_size, split_dim=split_dim) == 0
    shards = [store.get_tensor_with_tp(key, tp_rank=r, tp_size=tp_size, split_dim=split_dim)
              for r in range(tp_size)]
    for r, s in enumerate(shards):
        assert same(s, store.get_tensor(f"{key}_tp_{r}"))
    assert np.array_equal(np.concatenate(shards, axis=split_dim), a)
    sizes = [s.shape[split_dim] for s in shards]
    assert max(sizes) - min(sizes) <= 1
    assert store.get_tensor_with_tp(key, tp_rank=tp_size, tp_size=tp_size) is None


def test_tp_batches_and_bad_dims(store):
    arrays = [sample(np.int64, (4, 6), seed=s) for s in range(3)]
    keys = ["tpb/0", "tpb/1", "tpb/2"]
    assert store.batch_put_tensor_with_tp(keys, arrays, tp_size=2, split_dim=1) == [0, 0, 0]
    got = store.batch_get_tensor_with_tp(keys + ["tpb/none"], tp_rank=1, tp_size=2)
    assert got[3] is None
    for a, g in zip(arrays, got):
        assert np.array_equal(g, a[:, 3:])
    assert store.put_tensor_with_tp("tpb/bad", arrays[0], tp_size=2, split_dim=5) == INVALID
    assert store.put_tensor_with_tp("tpb/bad", arrays[0], tp_size=0) == INVALID
    assert store.is_exist("tpb/bad_tp_0") == 0


def _registered(store, n: int):
    buf = (ctypes.c_uint8 * n)()
    addr = ctypes.addressof(buf)
    assert store.register_buffer(addr, n) == 0
    return buf, addr


def test_get_tensor_into_views_registered_memory(store):
    a = sample(np.float64, (16, 16), seed=9)
    assert store.put_tensor("into/a", a) == 0
    buf, addr = _registered(store, 1 * MiB)
    got = store.get_tensor_into("into/a", addr, 1 * MiB)
    assert same(got, a)
    assert got.ctypes.data == addr + codec.MC_HEADER_SIZE  # the data, in place after Mooncake's header
    got[0, 0] = 42.0  # a view of the registered memory, not a copy
    assert store.get_tensor_into("into/a", addr, 1 * MiB)[0, 0] == a[0, 0]
    size = store.get_size("into/a")
    assert store.get_tensor_into("into/a", addr, size - 1) == INVALID  # too small
    assert store.get_tensor_into("into/missing", addr, 1 * MiB) == int(ErrorCode.OBJECT_NOT_FOUND)
    plain = (ctypes.c_uint8 * 4096)()  # never registered: the caller's own memory
    got = store.get_tensor_into("into/a", ctypes.addressof(plain), 4096)
    assert same(got, a) and got.ctypes.data >= ctypes.addressof(plain)
    assert store.put("into/plain", b"x" * 100) == 0
    assert store.get_tensor_into("into/plain", addr, 1 * MiB) == INVALID  # not a tensor
    res = store.batch_get_tensor_into(["into/a", "into/missing"], [addr, addr + 512 * 1024],
                                      [512 * 1024, 512 * 1024])
    assert same(res[0], a) and res[1] == int(ErrorCode.OBJECT_NOT_FOUND)
    assert store.batch_get_tensor_into(["into/a"], [addr, addr], [1, 1]) == [INVALID]
    store.unregister_buffer(addr)


def test_put_tensor_from_stores_a_prepared_object(store):
    a = sample(np.int16, (33, 3), seed=4)
    assert store.put_tensor("from/src", a) == 0
    buf, addr = _registered(store, 1 * MiB)
    size = store.get_size("from/src")
    assert same(store.get_tensor_into("from/src", addr, size), a)
    assert store.put_tensor_from("from/copy", addr, size) == 0
    assert same(store.get_tensor("from/copy"), a)
    # Not a whole tensor object: refused, nothing stored.
    assert store.put_tensor_from("from/short", addr, size - 1) == INVALID
    ctypes.memset(addr, 0, 64)
    assert store.put_tensor_from("from/garbage", addr, size) == INVALID
    assert store.is_exist("from/short") == 0 and store.is_exist("from/garbage") == 0
    # Memory never registered is not even read.
    plain = (ctypes.c_uint8 * 4096)()
    assert store.put_tensor_from("from/plain", ctypes.addressof(plain), 4096) == INVALID
    assert store.put_tensor_from("from/null", 0, 4096) == INVALID
    assert store.batch_put_tensor_from(["a", "b"], [addr], [size]) == [INVALID, INVALID]
    store.unregister_buffer(addr)


def test_tensor_upserts(store):
    a, b, c = (sample(np.float32, (8, 8), seed=s) for s in (1, 2, 3))
    assert store.put_tensor("up/k", a) == 0
    assert store.put_tensor("up/k", b) == 0 and same(store.get_tensor("up/k"), a)  # put keeps
    assert store.upsert_tensor("up/k", b) == 0 and same(store.get_tensor("up/k"), b)  # in place
    bigger = sample(np.float64, (9, 9), seed=5)
    assert store.upsert_pub_tensor("up/k", bigger, ReplicateConfig()) == 0  # other size
    assert same(store.get_tensor("up/k"), bigger)
    assert store.batch_upsert_tensor(["up/k", "up/n"], [c, a]) == [0, 0]
    assert same(store.get_tensor("up/k"), c) and same(store.get_tensor("up/n"), a)
    assert store.batch_upsert_pub_tensor(["up/n"], [b], ReplicateConfig()) == [0]
    assert same(store.get_tensor("up/n"), b)
    buf, addr = _registered(store, 1 * MiB)
    size = store.get_size("up/n")
    store.get_tensor_into("up/n", addr, size)
    assert store.upsert_tensor_from("up/k", addr, size) == 0
    assert same(store.get_tensor("up/k"), b)
    assert store.batch_upsert_tensor_from(["up/m"], [addr], [size]) == [0]
    assert same(store.get_tensor("up/m"), b)
    store.unregister_buffer(addr)


def test_header_codec_refuses_malformed_objects():
    parts = codec.encode(sample(np.int32, (2, 3)))
    whole = parts.header + parts.data.tobytes()
    assert codec.decode_header(whole).shape == (2, 3)
    for bad in (whole[:-1], whole + b"\0", b"XXXX" + whole[4:], whole[:10], b""):
        assert codec.decode_header(bad) is None
    # gostore's own form, for what Mooncake's cannot hold: the same checks
    parts = codec.encode(sample(np.complex64, (2, 3)))
    whole = parts.header + parts.data.tobytes()
    assert whole[:4] == b"GSTN" and len(parts.header) % codec.HEADER_ALIGN == 0
    assert codec.decode_header(whole).shape == (2, 3)
    for bad in (whole[:-1], whole + b"\0", b"XXXX" + whole[4:], whole[:10], b""):
        assert codec.decode_header(bad) is None


def _mc_header(dtype: int, shape, nbytes: int, flags: int = 0) -> bytes:
    """Mooncake's 304-byte tensor header for a whole tensor, assembled
    field by field from its layout (not through the codec under test)."""
    pad = [-1] * (8 - len(shape))
    head = struct.pack("<IHHiiIIQQ", 0x4D4F4F4E, 1, 304, dtype, len(shape), 0, flags, 304, nbytes)
    head += struct.pack("<8q8qII", *shape, *pad, *shape, *pad, 0, 0)
    return head + bytes(304 - len(head))


def test_tensor_objects_take_mooncakes_form():
    """A tensor Mooncake's form can hold is stored byte for byte as
    Mooncake writes it (so its tools read our objects); a numpy array is
    marked as one (flag bit 1) and comes back as a numpy array."""
    a = sample(np.int32, (2, 3))
    parts = codec.encode(a)
    assert parts.header == _mc_header(6, (2, 3), 24, flags=2)
    hdr = codec.decode_header(parts.header + parts.data.tobytes())
    assert (hdr.kind, hdr.descr, hdr.shape, hdr.nbytes, hdr.offset) == (codec.KIND_NUMPY, "<i4", (2, 3), 24, 304)
    # An object Mooncake wrote (flags 0) is a torch tensor of its dtype:
    # bfloat16, 4x5.
    hdr = codec.decode_header(_mc_header(12, (4, 5), 40) + bytes(40))
    assert (hdr.kind, hdr.descr, hdr.shape, hdr.layout) == (codec.KIND_TORCH, "bfloat16", (4, 5), None)
    assert codec.header_length(_mc_header(12, (4, 5), 40)[:codec.FIXED_SIZE]) == 304
    # Mooncake's form cannot hold these: gostore's own form takes them.
    for odd in (np.zeros((1,) * 9, np.float32), np.zeros(3, ">f4"), np.zeros(2, [("x", "<i4")])):
        assert codec.encode(odd).header[:4] == b"GSTN"


def test_mooncake_form_checks_every_field():
    good = _mc_header(6, (2, 3), 24) + bytes(24)
    assert codec.decode_header(good) is not None

    def patched(at: int, fmt: str, value: int) -> bytes:
        b = bytearray(good)
        struct.pack_into(fmt, b, at, value)
        return bytes(b)

    for bad in (
        patched(4, "<H", 2),  # version
        patched(6, "<H", 300),  # header size
        patched(8, "<i", 15), patched(8, "<i", -1),  # dtype outside the table
        patched(12, "<i", 9),  # ndim
        patched(16, "<I", 2),  # layout kind
        patched(24, "<Q", 303),  # data before the header's end
        patched(32, "<Q", 23),  # data bytes
        patched(104, "<q", 3),  # own shape no longer matches the bytes
        patched(40 + 2 * 8, "<q", 0),  # a dimension past ndim that is not -1
        patched(168, "<I", 5),  # axes
        good[:-1], good[:300],
    ):
        assert codec.decode_header(bad) is None
    # One shard axis with a rank outside its size
    b = bytearray(good)
    struct.pack_into("<I", b, 16, 1)
    struct.pack_into("<I", b, 168, 1)
    struct.pack_into("<iiiiiiq", b, 176, 1, 0, 2, 2, 0, 0, 2)
    assert codec.decode_header(bytes(b)) is None
    struct.pack_into("<iiiiiiq", b, 176, 1, 0, 1, 2, 0, 0, 2)
    hdr = codec.decode_header(bytes(b))
    assert hdr.layout == codec.ShardLayout((2, 3), (codec.Axis("tp", 1, 2, 0),))


def test_shard_layouts_survive_mooncakes_form():
    """A shard's layout, ep expert and pp stage included, reads back as it
    was written; one Mooncake's form cannot hold (an expert id on a dp
    axis) goes to gostore's form, whole."""
    a = sample(np.float32, (4, 6))
    layout = codec.ShardLayout((8, 6), (codec.Axis("tp", 1, 2, 0), codec.Axis("ep", 0, 4, None, 3),
                                        codec.Axis("pp", 1, 2, None, None, 5)))
    parts = codec.encode(a, layout)
    assert len(parts.header) == 304
    # Mooncake's fields: the shard's extent along split_dim, the expert id
    assert struct.unpack_from("<iiiiiiq", parts.header, 176) == (1, 0, 1, 2, 0, 0, 4)
    assert struct.unpack_from("<iiiiiiq", parts.header, 208) == (2, 1, 0, 4, -1, 3, 0)
    assert codec.decode_header(parts.header + parts.data.tobytes()).layout == layout
    odd = codec.ShardLayout((4, 6), (codec.Axis("dp", 0, 2, None, 7),))
    parts = codec.encode(a, odd)
    assert parts.header[:4] == b"GSTN"
    assert codec.decode_header(parts.header + parts.data.tobytes()).layout == odd


try:
    import torch
except ImportError:  # pragma: no cover - torch is optional
    torch = None


@pytest.mark.skipif(torch is None, reason="torch is not installed here (a 1+ GB download); "
                    "the numpy tests cover the codec, torch adds its own dtypes")
def test_torch_tensors_round_trip(store):
    for dt in (torch.float32, torch.bfloat16, torch.float16, torch.int64, torch.bool):
        t = (torch.arange(24) % 7).to(dt).reshape(2, 3, 4)
        assert store.put_tensor(f"torch/{dt}", t) == 0
        got = store.get_tensor(f"torch/{dt}")
        assert isinstance(got, torch.Tensor) and got.dtype == dt and torch.equal(got, t)
    for name in ("float8_e4m3fn", "float8_e5m2"):
        if hasattr(torch, name):
            t = torch.ones(5, 5).to(getattr(torch, name))
            assert store.put_tensor(f"torch/{name}", t) == 0
            assert store.get_tensor(f"torch/{name}").view(torch.uint8).equal(t.view(torch.uint8))
    t = torch.arange(30.0).reshape(5, 6).t()  # non-contiguous
    assert store.put_tensor("torch/nc", t) == 0 and torch.equal(store.get_tensor("torch/nc"), t)
