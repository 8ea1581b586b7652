"""Pure-Python tests of gostore: no libgostore.so, no master, no numpy needed."""

import array
import ctypes
import os
import re
import subprocess
import sys

import pytest

import gostore
from gostore import ErrorCode, MooncakeDistributedStore, ReplicateConfig
from gostore import _native
from gostore.buffers import pins as _buffers
from gostore.buffers.buffer import GostoreBuffer, _buffer_class

CONTRACT_CODES = {
    "OK": 0, "INTERNAL_ERROR": -1, "BUFFER_OVERFLOW": -10, "SEGMENT_NOT_FOUND": -101,
    "SEGMENT_ALREADY_EXISTS": -102, "CLIENT_NOT_FOUND": -103, "NO_AVAILABLE_HANDLE": -200,
    "INVALID_VERSION": -300, "INVALID_KEY": -400, "WRITE_FAIL": -500, "INVALID_PARAMS": -600,
    "ILLEGAL_CLIENT": -601, "INVALID_WRITE": -700, "INVALID_READ": -701,
    "INVALID_REPLICA": -702, "REPLICA_IS_NOT_READY": -703, "OBJECT_NOT_FOUND": -704,
    "OBJECT_ALREADY_EXISTS": -705, "OBJECT_HAS_LEASE": -706, "LEASE_EXPIRED": -707,
    "OBJECT_HAS_REPLICATION_TASK": -708, "OBJECT_NO_REPLICATION_TASK": -709,
    "REPLICA_NOT_FOUND": -710, "REPLICA_ALREADY_EXISTS": -711, "REPLICA_IS_GONE": -712,
    "OBJECT_REPLICA_BUSY": -714, "TRANSFER_FAIL": -800, "CHECKSUM_MISMATCH": -801,
    "RPC_FAIL": -900, "RPC_TIMEOUT": -901, "ETCD_OPERATION_ERROR": -1000,
    "ETCD_KEY_NOT_EXIST": -1001, "ETCD_TRANSACTION_FAIL": -1002, "FILE_NOT_FOUND": -1100,
    "FILE_OPEN_FAIL": -1101, "FILE_READ_FAIL": -1102, "FILE_WRITE_FAIL": -1103,
    "FILE_INVALID_BUFFER": -1104, "BUCKET_NOT_FOUND": -1200, "UNABLE_OFFLOAD": -1300,
    "TENANT_QUOTA_EXCEEDED": -1700, "TENANT_NOT_REGISTERED": -1701,
}


# ---- package surface ----------------------------------------------------


def test_exports():
    for name in ("MooncakeDistributedStore", "ReplicateConfig", "ErrorCode", "EmbeddedMaster"):
        assert hasattr(gostore, name)
    assert gostore.__version__ == "0.1.0"
    assert "spawn" in gostore.__doc__


def _child_env(**extra: str) -> dict:
    """The environment of a child Python: tests/ on its path first, then an
    uninstalled package's path if one was given (GPU machines run the suite
    from the tree)."""
    path = [os.path.join(os.path.dirname(__file__), ".."), os.environ.get("PYTHONPATH", "")]
    return dict(os.environ, PYTHONPATH=os.pathsep.join(p for p in path if p), **extra)


def test_import_does_not_load_library():
    code = "import gostore, gostore._native as n; gostore.MooncakeDistributedStore(); print(n.is_loaded())"
    env = _child_env()
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "False"


# Run in a child Python where ``import numpy`` fails as it does when numpy is
# not installed. GOSTORE_LIB points at nothing: loading the library fails.
_WITHOUT_NUMPY = """
import sys

class NoNumpy:
    def find_spec(self, name, path=None, target=None):
        if name == "numpy" or name.startswith("numpy."):
            raise ModuleNotFoundError(f"No module named {name!r}", name=name)
        return None

sys.meta_path.insert(0, NoNumpy())
sys.modules.pop("numpy", None)

import gostore
from gostore import ErrorCode, MooncakeDistributedStore, ReplicateConfig, _native

cfg = ReplicateConfig(replica_num=2, with_soft_pin=True)
assert cfg._to_native() == (2, 1, b"")
assert ErrorCode(-704) is ErrorCode.OBJECT_NOT_FOUND
s = MooncakeDistributedStore()
assert s.health_check() == 1
assert s.put("", b"v", cfg) == -600          # checked in Python, no native call
assert s.batch_put_from(["a", "b"], [1], [1, 2]) == [-600, -600]
try:
    s.setup("127.0.0.1", "P2PHANDSHAKE", 1, 1, "tcp", "", "127.0.0.1:1", bogus=1)
except TypeError:
    pass
else:
    raise AssertionError("unknown setup kwarg accepted")
try:
    s.put_tensor("t", [1.0, 2.0])
except ImportError as e:
    print("tensor call:", type(e).__name__, e)
else:
    raise AssertionError("put_tensor worked without numpy")
assert "numpy" not in sys.modules
print("native loaded:", _native.is_loaded())
"""


def test_import_and_non_tensor_calls_work_without_numpy(tmp_path):
    """numpy is an extra (``gostore[tensors]``): without it the package
    imports, configs, error codes and the store's argument checks work, and
    a tensor call raises an ImportError that names numpy, before any native
    call."""
    env = _child_env(GOSTORE_LIB=str(tmp_path / "no-such-lib.so"))
    out = subprocess.run([sys.executable, "-c", _WITHOUT_NUMPY], env=env,
                         capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stdout + out.stderr
    lines = out.stdout.splitlines()
    assert lines[-1] == "native loaded: False", out.stdout
    assert lines[0].startswith("tensor call: ModuleNotFoundError"), out.stdout
    assert "pip install 'gostore[tensors]'" in lines[0], out.stdout


def test_missing_library_message(monkeypatch, tmp_path):
    monkeypatch.setenv("GOSTORE_LIB", str(tmp_path / "nope.so"))
    monkeypatch.setattr(_native, "_lib", None)
    assert _native.library_path() == str(tmp_path / "nope.so")
    with pytest.raises(OSError, match="GOSTORE_LIB"):
        _native.lib()


def test_library_path_default(monkeypatch):
    monkeypatch.delenv("GOSTORE_LIB", raising=False)
    assert _native.library_path() == os.path.join(os.path.dirname(gostore.__file__), "libgostore.so")


def test_master_binary_path(monkeypatch):
    monkeypatch.delenv("GOSTORE_MASTER_BIN", raising=False)
    p = gostore.master_binary_path()
    assert p == os.path.join(os.path.dirname(gostore.__file__), "bin", "gostore-master")


def test_master_flag_lines():
    from gostore.tools.master import _flag_lines

    assert _flag_lines({"rpc_port": 0, "client_ttl": 2, "enable_offload": True}) == (
        b"--rpc_port=0\n--client_ttl=2\n--enable_offload=true"
    )
    with pytest.raises(ValueError):
        _flag_lines({"cluster_id": "a\nb"})


def test_every_abi_function_declared():
    abi = open(os.path.join(os.path.dirname(__file__), "..", "..", "bindings", "ABI.md")).read()
    import re

    names = set(re.findall(r"\b(gs_[a-z_]+)\(", abi))
    assert names, "no functions found in ABI.md"
    assert names <= set(_native.PROTOTYPES), names - set(_native.PROTOTYPES)


# ---- ErrorCode ------------------------------------------------------------


def test_error_codes_match_contract():
    assert {c.name: int(c) for c in ErrorCode} == CONTRACT_CODES
    assert ErrorCode.OBJECT_NOT_FOUND == -704
    assert ErrorCode(-600) is ErrorCode.INVALID_PARAMS
    assert ErrorCode.name_of(-704) == "OBJECT_NOT_FOUND"
    assert ErrorCode.name_of(-12345) == "UNKNOWN(-12345)"


def test_error_codes_match_the_go_table():
    """One table: gostore.ErrorCode is the Go code table (gostore/wire/codes.go,
    names from codeNames), number for number and name for name."""
    src = open(os.path.join(os.path.dirname(__file__), "..", "..", "gostore", "wire", "codes.go")).read()
    numbers = {name: int(n) for name, n in re.findall(r"^\s*(OK|Err\w+)\s+Code = (-?\d+)$", src, re.M)}
    names = dict(re.findall(r"\b(OK|Err\w+): \"([A-Z_]+)\"", src))
    assert numbers and set(numbers) == set(names), (set(numbers) ^ set(names))
    go = {names[c]: numbers[c] for c in numbers}
    assert {c.name: int(c) for c in ErrorCode} == go


# ---- ReplicateConfig --------------------------------------------------------


def test_replicate_config_defaults():
    c = ReplicateConfig()
    assert c.replica_num == 1
    assert c.with_soft_pin is False
    assert c.with_hard_pin is False
    assert c.preferred_segment == ""
    assert c.preferred_segments == []
    assert c.prefer_alloc_in_same_node is False
    assert c._to_native() == (1, 0, b"")


def test_replicate_config_kwargs_and_assignment():
    c = ReplicateConfig(replica_num=2, with_soft_pin=True, preferred_segment="h:1")
    assert (c.replica_num, c.with_soft_pin, c.preferred_segment) == (2, True, "h:1")
    c.with_hard_pin = True
    c.prefer_alloc_in_same_node = True
    c.preferred_segments = ["h:2", "h:1", "h:3"]
    assert c._to_native() == (2, 1 | 2 | 4, b"h:1\nh:2\nh:3")
    assert "replica_num=2" in repr(c)
    with pytest.raises(AttributeError):
        c.replica_nums = 3  # typo: no silent new attribute
    with pytest.raises(TypeError):
        ReplicateConfig(bogus=1)


def test_replicate_config_independent_lists():
    a, b = ReplicateConfig(), ReplicateConfig()
    a.preferred_segments = ["x:1"]
    assert b.preferred_segments == []
    assert a.preferred_segments is not b.preferred_segments


def test_replicate_config_type_validation():
    # Wrong types fail when assigned, as in Mooncake's compiled class.
    for bad in (
        dict(replica_num="2"),
        dict(replica_num=1.5),
        dict(replica_num=-1),  # unsigned
        dict(with_soft_pin="yes"),
        dict(preferred_segment=3),
        dict(preferred_segments="h:1"),
        dict(preferred_segments=[1]),
    ):
        with pytest.raises(TypeError):
            ReplicateConfig(**bad)
    # Right types that this store cannot honour: None (the call returns -600).
    assert ReplicateConfig(replica_num=0)._to_native() is None
    assert ReplicateConfig(replica_num=2**40)._to_native() is None


# ---- _buffers -------------------------------------------------------------


def _bytes_addr(b):
    return ctypes.cast(ctypes.c_char_p(b), ctypes.c_void_p).value


def test_pin_bytes():
    b = b"hello world"
    with _buffers.pin_buffer(b) as (addr, n):
        assert n == len(b)
        assert addr == _bytes_addr(b)
        assert ctypes.string_at(addr, n) == b


def test_pin_bytearray_memoryview_array():
    ba = bytearray(b"0123456789")
    ba_addr = ctypes.addressof((ctypes.c_char * len(ba)).from_buffer(ba))
    with _buffers.pin_buffer(ba) as (addr, n):
        assert (addr, n) == (ba_addr, 10)
        with pytest.raises(BufferError):
            ba.append(1)  # pinned: the exporter cannot resize
    ba.append(1)  # released (the bytearray may have moved)
    ba_addr = ctypes.addressof((ctypes.c_char * len(ba)).from_buffer(ba))

    mv = memoryview(ba)[2:7]
    with _buffers.pin_buffer(mv) as (addr, n):
        assert (addr, n) == (ba_addr + 2, 5)
        assert ctypes.string_at(addr, n) == b"23456"
    mv.release()

    arr = array.array("d", [1.0, 2.0, 3.0])
    with _buffers.pin_buffer(arr) as (addr, n):
        assert (addr, n) == (arr.buffer_info()[0], 24)

    mv2d = memoryview(bytearray(range(12))).cast("B", (3, 4))
    with _buffers.pin_buffer(mv2d) as (addr, n):
        assert n == 12
        assert ctypes.string_at(addr, n) == bytes(range(12))


def test_pin_non_contiguous_copies():
    base = bytearray(range(20))
    mv = memoryview(base)[::2]
    with _buffers.pin_buffer(mv) as (addr, n):
        assert n == 10
        assert ctypes.string_at(addr, n) == bytes(range(0, 20, 2))
        assert addr != ctypes.addressof((ctypes.c_char * 20).from_buffer(base))


def test_pin_rejects_non_buffers():
    for bad in ("text", 5, None, [1, 2], 1.5, object()):
        with pytest.raises(TypeError):
            with _buffers.pin_buffer(bad):
                pass


def test_pin_writable():
    with pytest.raises(TypeError):
        with _buffers.pin_buffer(b"ro", writable=True):
            pass
    ba = bytearray(4)
    with _buffers.pin_buffer(ba, writable=True) as (addr, n):
        ctypes.memmove(addr, b"abcd", 4)
    assert ba == b"abcd"


def test_many_pins_released():
    ba = bytearray(b"xyz")
    with _buffers.BufferPins() as pins:
        for _ in range(3):
            pins.pin(ba)
        with pytest.raises(BufferError):
            ba.extend(b"!")
    ba.extend(b"!")


def test_new_bytes():
    b, addr = _buffers.new_bytes(16)
    assert type(b) is bytes and len(b) == 16
    assert addr == _bytes_addr(b)
    ctypes.memmove(addr, b"A" * 16, 16)
    assert b == b"A" * 16
    with pytest.raises(ValueError):
        _buffers.new_bytes(0)


# ---- GostoreBuffer (over Python-owned memory, with a fake free) -----------------


def test_gostore_buffer_protocol():
    import gc

    from gostore.buffers.buffer import wrap

    src = ctypes.create_string_buffer(b"payload!", 8)
    freed = []

    class FakeLib:
        def gs_free_buffer(self, h, ptr):
            freed.append((h, ptr))

    class Owner:
        h = 7

    buf = wrap(FakeLib(), Owner(), ctypes.addressof(src), 8)
    assert isinstance(buf, GostoreBuffer)
    assert bytes(buf) == b"payload!"
    assert memoryview(buf).tobytes() == b"payload!"
    assert len(buf) == buf.size() == 8
    assert buf.ptr() == ctypes.addressof(src)
    assert type(buf) is _buffer_class(8)  # cached per size
    mv = memoryview(buf)
    del buf
    gc.collect()
    assert freed == []  # the memoryview keeps it alive
    mv.release()
    del mv
    gc.collect()
    assert freed == [(7, ctypes.addressof(src))]


# ---- MooncakeDistributedStore argument validation (no native library) ----------


SETUP_ARGS = ("127.0.0.1", "P2PHANDSHAKE", 16 << 20, 16 << 20, "tcp", "", "127.0.0.1:50051")


def test_setup_unknown_kwarg_raises_before_native(no_lib):
    s = MooncakeDistributedStore()
    with pytest.raises(TypeError, match="unexpected keyword"):
        s.setup(*SETUP_ARGS, bogus_option=1)


def test_setup_wrong_types_raise_before_native(no_lib):
    s = MooncakeDistributedStore()
    bad = [
        (1,) + SETUP_ARGS[1:],
        SETUP_ARGS[:2] + (1.5,) + SETUP_ARGS[3:],
        SETUP_ARGS[:3] + (None,) + SETUP_ARGS[4:],
        SETUP_ARGS[:4] + (3,) + SETUP_ARGS[5:],
        SETUP_ARGS[:6] + (50051,),
    ]
    for args in bad:
        with pytest.raises(TypeError):
            s.setup(*args)
    with pytest.raises(TypeError):
        s.setup(*SETUP_ARGS, enable_ssd_offload=True, ssd_offload_path=5)
    with pytest.raises(TypeError, match="missing"):
        s.setup(*SETUP_ARGS[:6])
    with pytest.raises(TypeError):
        s.setup(*SETUP_ARGS, None, "extra")
    with pytest.raises(TypeError):
        s.setup(*SETUP_ARGS, local_hostname="again")
    with pytest.raises(TypeError):
        s.setup({"global_segment_size": 1.5})


def test_setup_params():
    from gostore.store.distributed_store import _setup_params

    p = _setup_params(SETUP_ARGS, {})
    assert p == {
        "local_hostname": "127.0.0.1", "metadata_server": "P2PHANDSHAKE",
        "global_segment_size": 16 << 20, "local_buffer_size": 16 << 20,
        "protocol": "tcp", "rdma_devices": "", "master_server_addr": "127.0.0.1:50051",
    }
    names = ("local_hostname", "metadata_server", "global_segment_size",
             "local_buffer_size", "protocol", "rdma_devices", "master_server_addr")
    assert _setup_params((), dict(zip(names, SETUP_ARGS), engine=object())) == p
    p2 = _setup_params(SETUP_ARGS, {"enable_ssd_offload": True, "ssd_offload_path": "/tmp/x"})
    assert p2["enable_ssd_offload"] is True and p2["ssd_offload_path"] == "/tmp/x"
    d = _setup_params(({"global_segment_size": "4gb", "device_name": "mlx5_0",
                        "master_server_address": "h:1", "unrelated": 1},), {})
    assert d == {
        "local_hostname": "127.0.0.1", "metadata_server": "P2PHANDSHAKE",
        "global_segment_size": "4gb", "local_buffer_size": 16 << 20,
        "protocol": "tcp", "rdma_devices": "mlx5_0", "master_server_addr": "h:1",
    }
    assert _setup_params((), {"config": {}})["master_server_addr"] == "127.0.0.1:50051"


def test_store_unset_state(no_lib):
    s = MooncakeDistributedStore()
    assert s.health_check() == 1
    assert s.close() == 0
    assert s.get_hostname() == ""
    with s:
        pass


def test_store_type_errors_before_native(no_lib):
    s = MooncakeDistributedStore()
    cfg = ReplicateConfig()
    calls = [
        lambda: s.put(1, b"v"),
        lambda: s.put("k", "str value"),
        lambda: s.put("k", None),
        lambda: s.put("k", b"v", config={"replica_num": 1}),
        lambda: s.put("k", b"v", ReplicateConfig(replica_num="1")),
        lambda: s.put_parts("k", b"a", 3),
        lambda: s.put_batch("k", [b"v"]),
        lambda: s.put_batch(["k"], b"v"),
        lambda: s.put_batch([b"k"], [b"v"]),
        lambda: s.get(b"k"),
        lambda: s.get_batch("abc"),
        lambda: s.get_buffer(None),
        lambda: s.batch_get_buffer([1]),
        lambda: s.is_exist(3),
        lambda: s.batch_is_exist(["a", 2]),
        lambda: s.get_size(b"k"),
        lambda: s.remove(1),
        lambda: s.remove("k", force="yes"),
        lambda: s.remove_by_regex(b"x"),
        lambda: s.batch_remove("k"),
        lambda: s.register_buffer("0x10", 5),
        lambda: s.register_buffer(16, 5.0),
        lambda: s.unregister_buffer(None),
        lambda: s.put_from("k", 1.0, 4),
        lambda: s.put_from("k", 16, 4, config={"replica_num": 1}),
        lambda: s.get_into("k", "p", 4),
        lambda: s.batch_put_from(["k"], [1.0], [4]),
        lambda: s.batch_put_from(["k"], 16, [4]),
        lambda: s.batch_get_into(["k"], [16], ["4"]),
        lambda: s.batch_put_from_multi_buffers(["k"], [16], [[4]]),
        lambda: s.batch_get_into_multi_buffers(["k"], [[16]], [[None]]),
    ]
    for i, call in enumerate(calls):
        with pytest.raises(TypeError):
            call()
            pytest.fail(f"call #{i} did not raise")


def test_store_invalid_values_give_minus_600_without_native(no_lib):
    s = MooncakeDistributedStore()
    INVALID = -600
    assert s.put("", b"v") == INVALID
    assert s.put("k", b"") == INVALID
    assert s.put("k", bytearray()) == INVALID
    assert s.put("\ud800", b"v") == INVALID  # not encodable as UTF-8
    assert s.put("k", b"v", ReplicateConfig(replica_num=0)) == INVALID
    assert s.put_parts("k") == INVALID
    assert s.put_parts("k", b"", b"") == INVALID
    assert s.put_parts("", b"a") == INVALID
    assert s.put_batch(["a", "b"], [b"1"]) == INVALID
    assert s.put_batch([], []) == 0
    assert s.get("") == b""
    assert s.get_batch([]) == []
    assert s.get_batch(["", ""]) == [b"", b""]
    assert s.get_buffer("") is None
    assert s.batch_get_buffer([""]) == [None]
    assert s.is_exist("") == INVALID
    assert s.batch_is_exist([""]) == [INVALID]
    assert s.get_size("") == INVALID
    assert s.remove("") == INVALID
    assert s.batch_remove(["", ""]) == [INVALID, INVALID]
    assert s.register_buffer(-1, 10) == INVALID
    assert s.register_buffer(16, 2**64) == INVALID
    assert s.unregister_buffer(-5) == INVALID
    assert s.put_from("k", -1, 4) == INVALID
    assert s.put_from("k", 16, -4) == INVALID
    assert s.put_from("k", 2**64, 4) == INVALID
    assert s.put_from("", 16, 4) == INVALID
    assert s.get_into("k", -1, 4) == INVALID
    assert s.get_into("k", 16, 2**70) == INVALID
    assert s.batch_put_from(["a", "b", "c"], [1, 2], [3, 4, 5]) == [INVALID] * 3
    assert s.batch_put_from(["a"], [1, 2], [3]) == [INVALID]
    assert s.batch_put_from([], [], []) == []
    assert s.batch_put_from(["", "b"], [-1, 2**64], [1, 1]) == [INVALID, INVALID]
    assert s.batch_get_into(["a", "b"], [1], [1, 2]) == [INVALID, INVALID]
    assert s.batch_get_into([], [], []) == []
    assert s.batch_put_from_multi_buffers(["a", "b"], [[1]], [[1], [2]]) == [INVALID] * 2
    assert s.batch_put_from_multi_buffers(["a"], [[1, 2]], [[1]]) == [INVALID]
    assert s.batch_put_from_multi_buffers(["a"], [[]], [[]]) == [INVALID]
    assert s.batch_get_into_multi_buffers(["a"], [[-1]], [[1]]) == [INVALID]
    assert s.batch_get_into_multi_buffers([], [], []) == []
    assert s.setup(*SETUP_ARGS[:2], -1, *SETUP_ARGS[3:]) == INVALID


def test_master_cli_missing_binary(monkeypatch, tmp_path, capsys):
    from gostore.tools import master_cli as _master_cli

    monkeypatch.setenv("GOSTORE_MASTER_BIN", str(tmp_path / "missing"))
    assert _master_cli.main(["--rpc_port=1"]) == 127
    assert "missing" in capsys.readouterr().err


def test_master_cli_execs(tmp_path):
    script = tmp_path / "fake-master"
    script.write_text("#!/bin/sh\necho \"args:$*\"\n")
    script.chmod(0o755)
    env = _child_env(GOSTORE_MASTER_BIN=str(script))
    out = subprocess.run(
        [sys.executable, "-c", "import sys; from gostore.tools.master_cli import main; sys.exit(main())",
         "--rpc_port=5", "--client_ttl=2"],
        env=env, capture_output=True, text=True,
    )
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "args:--rpc_port=5 --client_ttl=2"


def test_flat_batch_fast_path_agrees_with_the_checked_one():
    """The fast path of the one-buffer-per-key batches answers exactly as
    the checking path, or leaves the call to it."""
    from gostore.store.distributed_store import _flat_batch_checked, _flat_batch_fast

    np = pytest.importorskip("numpy")
    keys = [f"k{i}" for i in range(4)]
    ptrs = [4096 * (i + 1) for i in range(4)]
    sizes = [4096] * 4
    cases = [
        (keys, ptrs, sizes),
        (keys, [True] + ptrs[1:], sizes),
        (keys, [np.uint64(8192)] + ptrs[1:], sizes),
        (keys, [-1] + ptrs[1:], sizes),
        (keys, [2**64] + ptrs[1:], sizes),
        (keys, ptrs, [2**64 - 1] + sizes[1:]),
        ([""] + keys[1:], ptrs, sizes),
        (["\ud800"] + keys[1:], ptrs, sizes),
        (keys[:3], ptrs, sizes),
        (tuple(keys), ptrs, sizes),
        ([], [], []),
    ]
    fast_taken = 0
    for case in cases:
        fast = _flat_batch_fast(*case)
        checked = _flat_batch_checked(*case)
        if fast is None:
            continue
        fast_taken += 1
        n, idx, send, pa, sa = fast
        assert (n, list(idx), send, pa.tolist(), sa.tolist()) == (
            checked[0], list(checked[1]), checked[2], checked[3].tolist(), checked[4].tolist()), case
    assert fast_taken >= 4  # the common forms do take the fast path
    for bad in [(keys, [1.5] + ptrs[1:], sizes), ([b"k"] + keys[1:], ptrs, sizes), (keys, ptrs, ["4096"] * 4)]:
        assert _flat_batch_fast(*bad) is None
        with pytest.raises(TypeError):
            _flat_batch_checked(*bad)
