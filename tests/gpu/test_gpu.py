"""Tests that need a GPU: run on a machine with an NVIDIA GPU and driver
(``python -m pytest tests/gpu``). Elsewhere every test here is skipped
with the reason the driver gave."""

from __future__ import annotations

import shutil
import subprocess

import pytest

import gostore

INFO = gostore.gpu_info()
pytestmark = pytest.mark.skipif(not INFO["available"], reason=f"no GPU: {INFO['reason']}")


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
