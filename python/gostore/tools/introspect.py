"""Host introspection: GPUs (through the CUDA driver, opened at run time)
and the topology matrix of RDMA NICs (PYTHON_API.md "Introspection").
Both answer cleanly on hosts without a GPU, a driver or an RDMA NIC."""

from __future__ import annotations

import json
from typing import Any, Dict, Optional

from .. import _native
from ..errors import ErrorCode

__all__ = ["gpu_info", "topology"]


def _json_call(call, what: str) -> Any:
    n, raw = _native.call_growing(call, cap=1 << 16)
    if n < 0:
        raise ValueError(f"{what} failed: {ErrorCode.name_of(n)} ({n})")
    return json.loads(raw)


def gpu_info() -> Dict[str, Any]:
    """``{"available": bool, "devices": [...], "reason": str, ...}``; never
    raises for want of a driver."""
    return _json_call(lambda out, cap: _native.lib().gs_gpu_info(out, cap), "gpu_info")


def topology(sysfs_root: Optional[str] = None) -> Dict[str, Dict[str, list]]:
    """Mooncake's topology matrix: for each location (``"cpu:N"``,
    ``"cuda:N"``) ``{"preferred_hca": [...], "avail_hca": [...]}``.
    ``sysfs_root`` reads another tree than ``/sys`` (tests; NVML is then
    not asked). ValueError for a root that is not a directory."""
    if sysfs_root is not None and not isinstance(sysfs_root, str):
        raise TypeError(f"sysfs_root must be str or None, not {type(sysfs_root).__name__}")
    root = (sysfs_root or "").encode("utf-8")
    return _json_call(lambda out, cap: _native.lib().gs_topology(root, len(root), out, cap), "topology")
