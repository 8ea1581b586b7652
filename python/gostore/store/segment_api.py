"""Segments mounted at run time and ``init_all``: Mooncake 0.3.13's
``mount_segment``, ``allocate_and_mount_segment``, ``unmount_segment``,
``unmount_and_free_segment``, ``unmount_local_disk_segment`` and
``init_all``.

Besides the segment ``setup`` contributes, a client may mount a file's pages
(``mount_segment``) or memory allocated for the purpose
(``allocate_and_mount_segment``); each call returns the ids of the segments
it mounted, which the matching unmount takes back. Results follow the
wheel's conventions: a dict ``{"ret": 0 or a negative code, "segment_ids":
[...]}`` (plus ``"allocated_size"``) for the mounts, an int for the rest.
Arguments of the wrong type raise ``TypeError``, as the wheel's binding
does: ints must be integers in 0..2**64-1, texts ``str`` (or ``bytes``),
id lists a list or tuple of them.
"""

from __future__ import annotations

import ctypes
import json
import os
from typing import Any, Dict, List, Tuple

from .._args import _tname, _u64_int

__all__ = ["SegmentAPI"]

_FAILED = -1  # what the wheel answers for every failure of a mount
_IDS_CAP = 4096  # a call mounts one segment: its id is ~40 bytes


def _text(x: Any, what: str) -> bytes:
    """UTF-8 of a str (bytes as they are): what a text parameter sends."""
    if isinstance(x, str):
        return x.encode("utf-8", "surrogateescape")
    if isinstance(x, bytes):
        return x
    raise TypeError(f"{what} must be str, not {_tname(x)}")


def _path(x: Any) -> bytes:
    if isinstance(x, str):
        return os.fsencode(x)
    if isinstance(x, bytes):
        return x
    raise TypeError(f"path must be str, not {_tname(x)}")


def _id_list(ids: Any, what: str) -> bytes:
    """The ids as the JSON list the library takes. A list, a tuple or
    another sequence (not a str, bytes, set or iterator) of str or bytes."""
    if isinstance(ids, (str, bytes, bytearray, dict)) or not (
        hasattr(type(ids), "__getitem__") and hasattr(type(ids), "__len__")
    ):
        raise TypeError(f"{what} must be a list of str, not {_tname(ids)}")
    out: List[str] = []
    for x in ids:
        if isinstance(x, bytes):
            x = x.decode("utf-8", "replace")
        elif not isinstance(x, str):
            raise TypeError(f"{what} must contain only str, found {_tname(x)}")
        out.append(str(x))
    return json.dumps(out).encode("utf-8")


def _ids_from(n: int, out: Any) -> Tuple[int, List[str]]:
    """(ret, segment ids) of a mount call that answered n."""
    if n < 0:
        return n, []
    return 0, json.loads(out.raw[:n].decode("utf-8"))


class SegmentAPI:
    """Mixin: run-time segments and init_all. Needs ``self._h()`` (the
    native handle) and ``self._hobj`` (None before the first native call)."""

    _h: Any
    _hobj: Any

    def mount_segment(self, path: str, size: int, offset: int = 0, protocol: str = "tcp",
                      location: str = "") -> Dict[str, Any]:
        """Mount ``size`` bytes of the file at ``path``, from ``offset`` (a
        multiple of the page size), as a segment of this client: objects
        placed there live in the file's pages. ``{"ret": 0, "segment_ids":
        [id]}`` (no id for size 0), or ``{"ret": -1, "segment_ids": []}``
        when it cannot be mounted (no such file, the range past its end, an
        unaligned offset, no setup; the log says which). ``protocol`` and
        ``location`` are accepted and change nothing."""
        p = _path(path)
        sz, off = _u64_int(size, "size"), _u64_int(offset, "offset")
        proto, loc = _text(protocol, "protocol"), _text(location, "location")
        out = ctypes.create_string_buffer(_IDS_CAP)
        n = self._lib().gs_mount_segment(self._h(), p, len(p), off, sz, proto, len(proto), loc, len(loc),
                                           out, _IDS_CAP)
        ret, ids = _ids_from(n, out)
        return {"ret": ret, "segment_ids": ids}

    def allocate_and_mount_segment(self, size: int, protocol: str = "tcp",
                                   location: str = "") -> Dict[str, Any]:
        """Allocate ``size`` bytes of host memory, rounded up to 16 MiB, and
        mount them as a segment of this client. ``{"ret": 0, "segment_ids":
        [id], "allocated_size": bytes}``, or ``ret`` -1 with no ids and
        ``allocated_size`` 0 (size 0, more than the host has available, no
        setup). ``protocol`` and ``location`` are accepted and change
        nothing."""
        sz = _u64_int(size, "size")
        proto, loc = _text(protocol, "protocol"), _text(location, "location")
        out = ctypes.create_string_buffer(_IDS_CAP)
        allocated = ctypes.c_uint64(0)
        n = self._lib().gs_allocate_segment(self._h(), sz, proto, len(proto), loc, len(loc),
                                              ctypes.addressof(allocated), out, _IDS_CAP)
        ret, ids = _ids_from(n, out)
        return {"ret": ret, "segment_ids": ids, "allocated_size": allocated.value if ret == 0 else 0}

    def _unmount(self, segment_ids: Any, grace_period_seconds: Any, allocated: int) -> int:
        ids = _id_list(segment_ids, "segment_ids")
        grace = _u64_int(grace_period_seconds, "grace_period_seconds")
        return self._lib().gs_unmount_segments(self._h(), ids, len(ids), grace, allocated)

    def unmount_segment(self, segment_ids: List[str], grace_period_seconds: int = 0) -> int:
        """Unmount segments ``mount_segment`` returned. With a grace period
        (seconds) nothing new is placed on them while their objects stay
        readable; then they go, their objects with them (the call returns at
        once). 0, or the first failure: -1 for an id this client's
        ``mount_segment`` did not return, -600 for one already being
        unmounted, or the master's code."""
        return self._unmount(segment_ids, grace_period_seconds, 0)

    def unmount_and_free_segment(self, segment_ids: List[str], grace_period_seconds: int = 0) -> int:
        """:meth:`unmount_segment` for the ids ``allocate_and_mount_segment``
        returned; their memory is freed once they are gone."""
        return self._unmount(segment_ids, grace_period_seconds, 1)

    def unmount_local_disk_segment(self, grace_period_seconds: int = 0) -> int:
        """Take this client's SSD tier out of the pool: the master forgets
        its disk copies (objects that lived only there disappear) and hands
        it no more offloads. Waits ``grace_period_seconds``, during which
        readers already sent to its copies are served. 0 (also without an
        SSD tier), -1 before setup, or the master's code."""
        grace = _u64_int(grace_period_seconds, "grace_period_seconds")
        return self._lib().gs_unmount_local_disk(self._h(), grace)

    def init_all(self, protocol: str, device_name: str, mount_segment_size: int, /) -> int:
        """Set the store up as Mooncake's ``init_all`` does: local hostname
        ``localhost:12345``, a segment of ``mount_segment_size`` bytes, a
        1 GiB local buffer, ``device_name`` as the RDMA devices, the master
        at ``127.0.0.1:50051``. 0, -600 when the store is already set up,
        or setup's code."""
        proto, dev = _text(protocol, "protocol"), _text(device_name, "device_name")
        size = _u64_int(mount_segment_size, "mount_segment_size")
        return self._lib().gs_init_all(self._h(), proto, len(proto), dev, len(dev), size)
