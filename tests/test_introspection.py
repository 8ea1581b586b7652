"""gostore.gpu_info() and gostore.topology() (PYTHON_API.md "Introspection")
on this machine -- no GPU, no CUDA driver, no RDMA NIC -- and on a fake
sysfs tree of a small GPU server built here (the real one cannot exist on
this machine; gostore/topology's Go tests model bigger ones)."""

from __future__ import annotations

import os

import pytest

import gostore


def test_gpu_info_without_a_driver():
    info = gostore.gpu_info()
    if info["available"]:
        pytest.skip("a GPU is present: tests/gpu covers it")
    assert info["devices"] == [] and "no CUDA driver" in info["reason"]


def test_gpu_memory_without_a_driver(master, store_factory, capfd):
    """Where no GPU is, a GPU segment is refused with the driver's reason, a
    bad location with -600, a non-str with TypeError; and a device pointer
    nobody registered is refused by get_into/put_from (never dereferenced)."""
    if gostore.gpu_info()["available"]:
        pytest.skip("a GPU is present: tests/gpu covers it")
    s = gostore.MooncakeDistributedStore()
    args = ("127.0.0.1", "P2PHANDSHAKE", 16 << 20, 16 << 20, "tcp", "", master.addr)
    assert s.setup(*args, segment_location="cuda:0") == -600
    assert "no CUDA driver" in capfd.readouterr().err
    assert s.setup(*args, segment_location="tpu:1") == -600
    with pytest.raises(TypeError):
        s.setup(*args, segment_location=0)
    assert s.setup(*args, segment_location="cpu") == 0
    # an address in no registered buffer (what a device pointer is here)
    fake_device_ptr = 0x7F0000000000
    assert s.get_into("k", fake_device_ptr, 4096) == -600
    assert s.put_from("k", fake_device_ptr, 4096) == -600
    # memory handed as a CUDA tensor's without a driver: refused, never read
    from gostore._args import _config
    from gostore.tensors.codec import DeviceSpan

    span = DeviceSpan(fake_device_ptr, 4096, None)
    assert s._write_multi([b"span"], [(b"head", span)], _config(None), False) == [-600]
    assert "no CUDA driver is usable" in capfd.readouterr().err
    assert s.get_size("span") < 0
    s.close()


def _tree(root, nics, gpus, nodes=2):
    for n in range(nodes):
        os.makedirs(os.path.join(root, f"devices/system/node/node{n}"))
    os.makedirs(os.path.join(root, "class/infiniband"))
    os.makedirs(os.path.join(root, "bus/pci/devices"))

    def device(path, numa, klass, vendor):
        d = os.path.join(root, "devices", path)
        os.makedirs(d)
        for name, value in (("numa_node", numa), ("class", klass), ("vendor", vendor)):
            with open(os.path.join(d, name), "w") as f:
                f.write(f"{value}\n")
        os.symlink(d, os.path.join(root, "bus/pci/devices", os.path.basename(path)))
        return d

    for name, path, numa in nics:
        d = device(path, numa, "0x020700", "0x15b3")
        os.makedirs(os.path.join(root, "class/infiniband", name))
        os.symlink(d, os.path.join(root, "class/infiniband", name, "device"))
    for path, numa in gpus:
        device(path, numa, "0x030200", "0x10de")


def _small_server(root):
    sw0 = "pci0000:00/0000:00:01.0/0000:01:00.0"
    sw1 = "pci0000:80/0000:80:01.0/0000:81:00.0"
    _tree(root,
          nics=[("mlx5_0", sw0 + "/0000:02:00.0/0000:03:00.0", 0),
                ("mlx5_1", sw1 + "/0000:82:00.0/0000:83:00.0", 1)],
          gpus=[(sw0 + "/0000:02:08.0/0000:04:00.0", 0), (sw1 + "/0000:82:08.0/0000:84:00.0", 1)])


def test_topology_of_a_fake_server(tmp_path):
    _small_server(str(tmp_path))
    m = gostore.topology(str(tmp_path))
    assert m == {
        "cpu:0": {"preferred_hca": ["mlx5_0"], "avail_hca": ["mlx5_1"]},
        "cpu:1": {"preferred_hca": ["mlx5_1"], "avail_hca": ["mlx5_0"]},
        "cuda:0": {"preferred_hca": ["mlx5_0"], "avail_hca": ["mlx5_1"]},
        "cuda:1": {"preferred_hca": ["mlx5_1"], "avail_hca": ["mlx5_0"]},
    }


def test_rdma_devices_auto_detected_on_a_fake_server(tmp_path, master, monkeypatch):
    """setup(protocol="rdma", rdma_devices="") on the fake tree: every NIC is
    chosen and each location gets its near one; with no verbs library here
    the bytes move over TCP, said in transport_info and the log; a listed
    device that does not exist is named. Data moves either way."""
    _small_server(str(tmp_path))
    monkeypatch.setenv("GOSTORE_SYSFS_ROOT", str(tmp_path))
    s = gostore.MooncakeDistributedStore()
    assert s.transport_info() == {}
    assert s.setup("127.0.0.1", "P2PHANDSHAKE", 16 << 20, 16 << 20, "rdma", "", master.addr) == 0
    t = s.transport_info()
    assert t["requested"] == "rdma" and t["protocol"] == "tcp"
    assert t["rdma_devices"] == ["mlx5_0", "mlx5_1"] and t["unknown_devices"] == []
    assert t["nic_for"] == {"cpu:0": "mlx5_0", "cpu:1": "mlx5_1", "cuda:0": "mlx5_0", "cuda:1": "mlx5_1"}
    assert "bytes move over TCP" in t["reason"]  # no verbs transport in the UCX here (or no UCX)
    assert s.put("k", b"v" * 1000) == 0 and s.get("k") == b"v" * 1000
    s.close()

    s = gostore.MooncakeDistributedStore()
    assert s.setup("127.0.0.1", "P2PHANDSHAKE", 0, 16 << 20, "rdma", "mlx5_1,mlx5_7", master.addr) == 0
    t = s.transport_info()
    assert t["rdma_devices"] == ["mlx5_1"] and t["unknown_devices"] == ["mlx5_7"]
    assert set(t["nic_for"].values()) == {"mlx5_1"}
    s.close()

    # tcp asks nothing of the host; a topology root that is not there fails setup
    s = gostore.MooncakeDistributedStore()
    assert s.setup("127.0.0.1", "P2PHANDSHAKE", 0, 16 << 20, "tcp", "", master.addr) == 0
    assert s.transport_info()["nic_for"] == {}
    s.close()
    monkeypatch.setenv("GOSTORE_SYSFS_ROOT", str(tmp_path / "missing"))
    s = gostore.MooncakeDistributedStore()
    assert s.setup("127.0.0.1", "P2PHANDSHAKE", 0, 16 << 20, "rdma", "", master.addr) == -600


def test_topology_of_this_host_and_bad_roots(tmp_path):
    m = gostore.topology()
    assert "cpu:0" in m and set(m["cpu:0"]) == {"preferred_hca", "avail_hca"}
    with pytest.raises(ValueError):
        gostore.topology(str(tmp_path / "missing"))
    with pytest.raises(TypeError):
        gostore.topology(5)
