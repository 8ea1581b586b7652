"""Tests that need a GPU: run on a machine with an NVIDIA GPU, its driver and
torch (``tests/gpu/run.sh``). Elsewhere every test here is skipped with the
reason the driver gave; the same code paths run in ``make test`` against a
fake driver (gostore/gpu/testdata, gostore/client/device_test.go).

What is shown here, bytes verified each time:

* registered GPU buffers through put_from / get_into and their batch forms
  (a destination larger than the object keeps its tail);
* CUDA torch tensors through put_tensor / get_tensor, the tensor-parallel
  forms, and get_tensor_into / put_tensor_from on registered GPU memory;
* a GPU segment (``segment_location="cuda:0"``) owned by another process,
  written and read from this one over CUDA IPC and over TCP, with host and
  with GPU buffers on this side.
"""

from __future__ import annotations

import os
import shutil
import subprocess

import pytest

import gostore
from peer import pattern

INFO = gostore.gpu_info()
pytestmark = pytest.mark.skipif(not INFO["available"], reason=f"no GPU: {INFO['reason']}")

MiB = 1 << 20


def _torch():
    torch = pytest.importorskip("torch")
    if not torch.cuda.is_available():
        pytest.skip("torch sees no CUDA device")
    return torch


def _random(torch, n: int, seed: int):
    g = torch.Generator(device="cuda").manual_seed(seed)
    return torch.randint(0, 256, (n,), dtype=torch.uint8, device="cuda", generator=g)


def test_the_driver_sees_what_nvidia_smi_sees():
    if not shutil.which("nvidia-smi"):
        pytest.skip("nvidia-smi is not installed")
    out = subprocess.run(["nvidia-smi", "--query-gpu=pci.bus_id", "--format=csv,noheader"],
                         capture_output=True, text=True, check=True).stdout.split()
    assert len(INFO["devices"]) == len(out)
    ours = {d["pci_bus_id"].lower() for d in INFO["devices"]}
    theirs = {b.lower()[-12:] for b in out}
    assert ours == theirs


def test_every_gpu_has_a_topology_row():
    m = gostore.topology()
    for d in INFO["devices"]:
        assert f"cuda:{d['index']}" in m


def test_registered_gpu_buffers_round_trip(master, store_factory):
    torch = _torch()
    s = store_factory(master)
    n = 3 * MiB + 5
    src = _random(torch, n, 1)
    dst = torch.full((4 * MiB,), 0xEE, dtype=torch.uint8, device="cuda")
    for t in (src, dst):
        assert s.register_buffer(t.data_ptr(), t.numel()) == 0
    assert s.put_from("gpu-one", src.data_ptr(), n) == 0
    assert s.get_into("gpu-one", dst.data_ptr(), dst.numel()) == n
    assert torch.equal(dst[:n], src)
    assert bool((dst[n:] == 0xEE).all()), "bytes past the object were overwritten"
    # the stored bytes are the device bytes (read back to the host: the test's own check)
    assert s.get("gpu-one") == src.cpu().numpy().tobytes()

    # batch forms over slices of one registered buffer
    k, each = 8, 256 * 1024
    big = _random(torch, k * each, 2)
    out = torch.zeros(k * each, dtype=torch.uint8, device="cuda")
    for t in (big, out):
        assert s.register_buffer(t.data_ptr(), t.numel()) == 0
    keys = [f"gpu-batch-{i}" for i in range(k)]
    ptrs = [big.data_ptr() + i * each for i in range(k)]
    assert s.batch_put_from(keys, ptrs, [each] * k) == [0] * k
    got = s.batch_get_into(keys, [out.data_ptr() + i * each for i in range(k)], [each] * k)
    assert got == [each] * k
    assert torch.equal(out, big)
    # an unregistered device pointer is refused, nothing touched
    loose = torch.zeros(4096, dtype=torch.uint8, device="cuda")
    assert s.get_into("gpu-one", loose.data_ptr(), loose.numel()) < 0


def test_cuda_tensors_round_trip(master, store_factory):
    torch = _torch()
    s = store_factory(master)
    t = torch.randn(128, 1024, device="cuda").to(torch.bfloat16)
    assert s.put_tensor("tensor-bf16", t) == 0
    back = s.get_tensor("tensor-bf16")
    assert back.is_cuda and back.dtype == torch.bfloat16 and back.shape == t.shape
    assert torch.equal(back, t)

    cpu = torch.arange(1000, dtype=torch.int64)
    odd = torch.randn(64, 64, device="cuda").t()  # not contiguous
    assert s.batch_put_tensor(["tensor-cpu", "tensor-odd"], [cpu, odd]) == [0, 0]
    a, b = s.batch_get_tensor(["tensor-cpu", "tensor-odd"])
    assert not a.is_cuda and torch.equal(a, cpu)
    assert b.is_cuda and torch.equal(b, odd)

    whole = torch.randn(8, 4096, device="cuda")
    assert s.put_tensor_with_tp("tensor-tp", whole, tp_size=4, split_dim=1) == 0
    shard = s.get_tensor_with_tp("tensor-tp", tp_rank=2, tp_size=4, split_dim=1)
    assert shard.is_cuda and torch.equal(shard, whole[:, 2048:3072])


def test_tensor_into_and_from_registered_gpu_memory(master, store_factory):
    torch = _torch()
    s = store_factory(master)
    t = torch.randn(32, 333, device="cuda")
    assert s.put_tensor("into-src", t) == 0
    size = s.get_size("into-src")
    assert size > t.numel() * 4
    buf = torch.zeros(size + 4096, dtype=torch.uint8, device="cuda")
    assert s.register_buffer(buf.data_ptr(), buf.numel()) == 0
    view = s.get_tensor_into("into-src", buf.data_ptr(), buf.numel())
    assert view.is_cuda and torch.equal(view, t)
    assert buf.data_ptr() < view.data_ptr() < buf.data_ptr() + 4096, "not a view of the buffer"
    assert s.put_tensor_from("into-copy", buf.data_ptr(), size) == 0
    assert torch.equal(s.get_tensor("into-copy"), t)
    # memory that holds no tensor object is refused
    junk = buf[size:].zero_()
    assert s.put_tensor_from("into-junk", junk.data_ptr(), 4096) == -600


@pytest.mark.parametrize("transport", ["ipc", "tcp"])
def test_gpu_segment_of_another_process(master, peer_factory, store_factory, monkeypatch, capfd,
                                        transport):
    torch = _torch()
    owner = peer_factory(master, segment="64MB", env={"GOSTORE_SEGMENT_LOCATION": "cuda:0"},
                         transport="tcp" if transport == "tcp" else None)
    if transport == "tcp":
        monkeypatch.setenv("GOSTORE_TRANSPORT", "tcp")
    s = store_factory(master, segment=0)  # everything lands on the owner's GPU
    sizes = [1, 4096, 3 * MiB + 7]
    # the owner writes into its own GPU segment; this process reads
    for i, n in enumerate(sizes):
        assert owner.call("put_pattern", key=f"own-{i}", size=n, seed=i)["rc"] == 0
        assert s.get(f"own-{i}") == pattern(i, n)
    # this process writes host bytes and GPU bytes; the owner reads them
    for i, n in enumerate(sizes):
        assert s.put(f"host-{i}", pattern(100 + i, n)) == 0
        assert owner.call("check_pattern", key=f"host-{i}", size=n, seed=100 + i)["ok"]
    src = _random(torch, 2 * MiB, 7)
    dst = torch.zeros(2 * MiB, dtype=torch.uint8, device="cuda")
    for t in (src, dst):
        assert s.register_buffer(t.data_ptr(), t.numel()) == 0
    assert s.put_from("gpu-to-gpu", src.data_ptr(), src.numel()) == 0
    assert s.get_into("gpu-to-gpu", dst.data_ptr(), dst.numel()) == dst.numel()
    assert torch.equal(dst, src)
    if transport == "ipc":  # the IPC mapping was used, not the TCP fallback
        assert "cannot open a same-host device segment" not in capfd.readouterr().err


def test_gpu_segment_refused_with_ssd_tier(master, tmp_path):
    s = gostore.MooncakeDistributedStore()
    rc = s.setup("127.0.0.1", "P2PHANDSHAKE", 16 * MiB, 16 * MiB, "tcp", "", master.addr,
                 segment_location="cuda:0", ssd_offload_path=str(tmp_path))
    assert rc == -600
