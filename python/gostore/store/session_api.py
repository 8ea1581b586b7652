"""The ranged half of ``MooncakeDistributedStore`` (Mooncake 0.3.13's put
and get sessions, ``get_into_ranges`` and ``put_from_with_metadata``).

A put session reserves objects and keeps them invisible while the caller
writes byte ranges of them; its end publishes them. A get session looks
objects up and serves ranged reads of them until it ends (an object whose
lease ran out is looked up again). Memory is
named by address, as in the other ``*_from`` / ``*_into`` calls: it must lie
in registered buffers. Results follow the wheel's conventions: a list with
one int per key (bytes moved, or a negative code), all -600 when the lists
given differ in length.
"""

from __future__ import annotations

import json
from array import array
from typing import Any, Dict, List, Optional, Sequence, Tuple

from .. import _native
from .._args import _INVALID, _addr, _config, _int, _ints, _key, _keys, _pack_keys, _seq, _str_arg, _u64
from ..config import ReplicateConfig
from .replica import ReplicaDescriptor
from ..enums import ReplicaStatus

__all__ = ["SessionAPI"]

_INTERNAL = -1  # what a result slot reads if the library never wrote it


def _results(code: str, n: int) -> array:
    return array(code, [_INTERNAL]) * n


def _send_keys(keys: Any) -> Tuple[List[Optional[bytes]], List[int], List[bytes]]:
    """(encoded keys, indexes of the usable ones, those keys)."""
    ks = _keys(keys)
    idx = [i for i, k in enumerate(ks) if k is not None]
    return ks, idx, [ks[i] for i in idx]


def _flat_ranges(ptr_lists: Sequence[Any], size_lists: Sequence[Any], off_lists: Sequence[Any],
                 what: str) -> Optional[Tuple[array, array, array, array]]:
    """The ABI's (ptrs, sizes, offsets, nparts) for per-key lists of equal
    shape, or None when an entry can never be valid."""
    pa, sa, oa, na = array("Q"), array("Q"), array("Q"), array("I")
    for ps, ss, os_ in zip(ptr_lists, size_lists, off_lists):
        ps, ss, os_ = _ints(ps, f"{what} buffer ptrs"), _ints(ss, f"{what} sizes"), _ints(os_, f"{what} offsets")
        if not (len(ps) == len(ss) == len(os_)) or not all(_u64(v) for v in (*ps, *ss, *os_)):
            return None
        pa.extend(ps)
        sa.extend(ss)
        oa.extend(os_)
        na.append(len(ps))
    return pa, sa, oa, na


class SessionAPI:
    """Mixin: the ranged calls. Needs ``self._h()`` (the native handle)."""

    _h: Any

    # -- put sessions ---------------------------------------------------

    def batch_put_session_start(
        self, keys: List[str], sizes: List[int], config: Optional[ReplicateConfig] = None
    ) -> List[int]:
        """Reserve each key's object of ``sizes[i]`` bytes, invisible until
        :meth:`batch_put_session_end`. 0, -705 (exists), -600 (empty key or
        size, or a session already open for the key), or another code."""
        cfg = _config(config)
        ks, idx, send = _send_keys(keys)
        ss = _ints(sizes, "sizes")
        out = [_INVALID] * len(ks)
        if len(ss) != len(ks) or cfg is None:
            return out
        idx = [i for i in idx if _u64(ss[i])]
        if not idx:
            return out
        send = [ks[i] for i in idx]
        blob, lens = _pack_keys(send)
        sa = array("Q", [ss[i] for i in idx])
        res = _results("i", len(send))
        replica_num, flags, preferred = cfg
        self._lib().gs_put_session_start(
            self._h(), len(send), blob, _addr(lens), _addr(sa), replica_num, flags, preferred,
            len(preferred), _addr(res),
        )
        for i, r in zip(idx, res):
            out[i] = r
        return out

    def batch_put_from_multi_buffer_ranges(
        self, keys: List[str], all_buffer_ptrs: List[List[int]], all_sizes: List[List[int]],
        all_dst_offsets: List[List[int]],
    ) -> List[int]:
        """Write ranges into objects of open put sessions: for key i, buffer
        ``all_buffer_ptrs[i][j]`` of ``all_sizes[i][j]`` bytes lands at
        offset ``all_dst_offsets[i][j]``. Bytes written per key, or -600 (no
        open session, a range outside the object, lists of other lengths)."""
        return self._ranged("gs_put_session_write", keys, all_buffer_ptrs, all_sizes, all_dst_offsets)

    def batch_put_session_end(self, keys: List[str]) -> List[int]:
        """Publish the objects of the keys' put sessions; -600 without one."""
        return self._end_puts(keys, 0)

    def batch_put_session_revoke(self, keys: List[str]) -> List[int]:
        """Drop the objects of the keys' put sessions; -600 without one."""
        return self._end_puts(keys, 1)

    def _end_puts(self, keys: Any, revoke: int) -> List[int]:
        ks, idx, send = _send_keys(keys)
        out = [_INVALID] * len(ks)
        if send:
            blob, lens = _pack_keys(send)
            res = _results("i", len(send))
            self._lib().gs_put_session_end(self._h(), len(send), blob, _addr(lens), revoke, _addr(res))
            for i, r in zip(idx, res):
                out[i] = r
        return out

    # -- get sessions ---------------------------------------------------

    def batch_get_session_start(self, keys: List[str]) -> List[int]:
        """Look the keys up for ranged reads: 0, or -704 (missing)."""
        ks = _keys(keys)
        out = [-704] * len(ks)  # an empty key finds nothing, as on the wheel
        idx = [i for i, k in enumerate(ks) if k is not None]
        if idx:
            send = [ks[i] for i in idx]
            blob, lens = _pack_keys(send)
            res = _results("i", len(send))
            self._lib().gs_get_session_start(self._h(), len(send), blob, _addr(lens), _addr(res))
            for i, r in zip(idx, res):
                out[i] = r
        return out

    def batch_get_into_multi_buffer_ranges(
        self, keys: List[str], all_buffer_ptrs: List[List[int]], all_sizes: List[List[int]],
        all_src_offsets: List[List[int]],
    ) -> List[int]:
        """Read ranges of objects of open get sessions: ``all_sizes[i][j]``
        bytes from offset ``all_src_offsets[i][j]`` of key i into buffer
        ``all_buffer_ptrs[i][j]``. Bytes read per key, or -600 (no open
        session, a range outside the object). A key whose lease ran out is
        looked up and read again: -704 if it is gone, -707 when every read
        again ended after its lease."""
        return self._ranged("gs_get_session_read", keys, all_buffer_ptrs, all_sizes, all_src_offsets)

    def batch_get_session_end(self, keys: List[str]) -> int:
        """End the keys' get sessions (keys without one are ignored); 0."""
        _, _, send = _send_keys(keys)
        if not send:
            return 0
        blob, lens = _pack_keys(send)
        return self._lib().gs_get_session_end(self._h(), len(send), blob, _addr(lens))

    def _ranged(self, fn: str, keys: Any, ptr_lists: Any, size_lists: Any, off_lists: Any) -> List[int]:
        ks = _keys(keys)
        pls, sls, ols = _seq(ptr_lists, "all_buffer_ptrs"), _seq(size_lists, "all_sizes"), _seq(off_lists, "offsets")
        out = [_INVALID] * len(ks)
        if not (len(ks) == len(pls) == len(sls) == len(ols)):
            return out
        idx = [i for i, k in enumerate(ks) if k is not None]
        flat = [(i, _flat_ranges([pls[i]], [sls[i]], [ols[i]], "range")) for i in idx]
        idx = [i for i, f in flat if f is not None]
        if not idx:
            return out
        good = dict(flat)
        pa, sa, oa, na = array("Q"), array("Q"), array("Q"), array("I")
        for i in idx:
            p, s, o, n = good[i]
            pa.extend(p)
            sa.extend(s)
            oa.extend(o)
            na.extend(n)
        send = [ks[i] for i in idx]
        blob, lens = _pack_keys(send)
        res = _results("q", len(send))
        getattr(self._lib(), fn)(
            self._h(), len(send), blob, _addr(lens), _addr(pa), _addr(sa), _addr(oa), _addr(na), 1, _addr(res)
        )
        for i, r in zip(idx, res):
            out[i] = r
        return out

    # -- without a session ----------------------------------------------

    def get_into_ranges(
        self, buffer_ptrs: List[int], all_keys: List[List[str]], all_dst_offsets: List[List[List[int]]],
        all_src_offsets: List[List[List[int]]], all_sizes: List[List[List[int]]],
    ) -> List[List[List[int]]]:
        """Read byte ranges of objects into buffers: for buffer i and its key
        j, range k copies ``all_sizes[i][j][k]`` bytes from offset
        ``all_src_offsets[i][j][k]`` of the object to ``buffer_ptrs[i] +
        all_dst_offsets[i][j][k]``. One result per range: bytes read, -704
        (missing key), -600 (a range outside the object, or lists of other
        lengths: every range of that key), -707 (read past the lease)."""
        bufs = _ints(buffer_ptrs, "buffer_ptrs")
        key_lists = _seq(all_keys, "all_keys")
        dsts, srcs, sizes = (_seq(x, n) for x, n in ((all_dst_offsets, "all_dst_offsets"),
                                                     (all_src_offsets, "all_src_offsets"),
                                                     (all_sizes, "all_sizes")))
        if not (len(bufs) == len(key_lists) == len(dsts) == len(srcs) == len(sizes)):
            return [[[_INVALID]] for _ in key_lists]
        out: List[List[List[int]]] = []
        send: List[bytes] = []
        where: List[Tuple[int, int]] = []  # (buffer, key) of each sent key
        pa, sa, oa, na = array("Q"), array("Q"), array("Q"), array("I")
        for b, (base, keys) in enumerate(zip(bufs, key_lists)):
            keys = _seq(keys, "all_keys[i]")
            d, s, z = _seq(dsts[b], "dst"), _seq(srcs[b], "src"), _seq(sizes[b], "sizes")
            row: List[List[int]] = []
            for j, key in enumerate(keys):
                k = _key(key)
                ranges = None
                if j < len(d) and j < len(s) and j < len(z):
                    dj, sj, zj = _ints(d[j], "dst"), _ints(s[j], "src"), _ints(z[j], "sizes")
                    if len(dj) == len(sj) == len(zj) and all(_u64(base + v) for v in dj):
                        ranges = _flat_ranges([[base + v for v in dj]], [zj], [sj], "range")
                # A key whose lists disagree gets one -600 per destination
                # offset, as the wheel answers.
                n = max(len(_seq(d[j], "dst")) if j < len(d) else 1, 1)
                if k is None or ranges is None:
                    row.append([_INVALID] * n)
                    continue
                row.append([])
                send.append(k)
                where.append((b, j))
                p, sz, o, c = ranges
                pa.extend(p)
                sa.extend(sz)
                oa.extend(o)
                na.extend(c)
            out.append(row)
        if send:
            blob, lens = _pack_keys(send)
            res = _results("q", sum(na))
            self._lib().gs_get_ranges(
                self._h(), len(send), blob, _addr(lens), _addr(pa), _addr(sa), _addr(oa), _addr(na), 1,
                _addr(res),
            )
            at = 0
            for (b, j), count in zip(where, na):
                out[b][j] = res[at:at + count].tolist()
                at += count
        return out

    def batch_replica_clear(self, keys: List[str], segment_name: str = "") -> List[str]:
        """Drop replicas of objects this client wrote: each whole, or only
        those on the segment named ``segment_name``; the keys cleared.
        Objects whose lease is running, still being written, or written by
        another client are left as they are (and missing keys ignored)."""
        ks, idx, send = _send_keys(keys)
        seg = _str_arg(segment_name, "segment_name").encode("utf-8")
        if not send:
            return []
        blob, lens = _pack_keys(send)
        cleared = _results("i", len(send))
        n = self._lib().gs_replica_clear(self._h(), len(send), blob, _addr(lens), seg, len(seg), _addr(cleared))
        if n < 0:
            return []
        return [k.decode("utf-8") for k, flag in zip(send, cleared) if flag == 1]

    def get_offload_rpc_read_count(self) -> int:
        """How many batches of objects this client has read from SSD tiers
        (its own or another client's): one per holder per get call."""
        return self._lib().gs_disk_read_count(self._h())

    # -- replica descriptors ----------------------------------------------

    def get_replica_desc(self, key: str) -> List[ReplicaDescriptor]:
        """The key's replicas (memory ones first, then a copy on a client's
        SSD tier); ``[]`` when the key is missing. Looking them up grants a
        lease, as a get does."""
        return self.batch_get_replica_desc([key]).get(key, [])

    def batch_get_replica_desc(self, keys: List[str]) -> Dict[str, List[ReplicaDescriptor]]:
        """``{key: replicas}`` for the keys found (missing keys are left out)."""
        ks, idx, send = _send_keys(keys)
        if not send:
            return {}
        blob, lens = _pack_keys(send)
        h = self._h()
        n, raw = _native.call_growing(
            lambda out, cap: self._lib().gs_replica_descs(h, len(send), blob, _addr(lens), out, cap))
        if n < 0:
            return {}
        out: Dict[str, List[ReplicaDescriptor]] = {}
        for i, entry in zip(idx, json.loads(raw)):
            if entry["code"] != 0:
                continue
            reps = []
            for r in entry["replicas"] or []:
                if r["disk"]:
                    reps.append(ReplicaDescriptor._for_local_disk(ReplicaStatus.COMPLETE))
                else:
                    reps.append(ReplicaDescriptor._for_memory(
                        ReplicaStatus.COMPLETE, r["address"], r["size"], r["endpoint"]))
            out[keys[i]] = reps
        return out

    def put_from_with_metadata(
        self, key: str, buffer_ptr: int, metadata_buffer_ptr: int, size: int, metadata_size: int,
        config: Optional[ReplicateConfig] = None,
    ) -> int:
        """Store ``metadata_size`` bytes at ``metadata_buffer_ptr`` followed by
        ``size`` bytes at ``buffer_ptr`` as one object (both registered
        memory): the object reads back metadata first."""
        k = _key(key)
        p, m = _int(buffer_ptr, "buffer_ptr"), _int(metadata_buffer_ptr, "metadata_buffer_ptr")
        s, ms = _int(size, "size"), _int(metadata_size, "metadata_size")
        cfg = _config(config)
        if k is None or cfg is None or not all(_u64(v) for v in (p, m, s, ms)):
            return _INVALID
        return self._write([k], array("Q", [m, p]), array("Q", [ms, s]), array("I", [2]), 1, cfg)[0]
