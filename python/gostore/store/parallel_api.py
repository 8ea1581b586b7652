"""The ``*_with_parallelism`` half of the tensor API: tensors written as the
shard a :class:`~gostore.TensorParallelism` or a ``writer_partition``
names, and read back as stored, as one shard, or whole (a
:class:`~gostore.ReadTarget`). Which objects each request writes and reads
is spelled out in :mod:`gostore.tensors.parallel_plan`.

Writes:

* no ``parallelism`` and no ``writer_partition``: the tensor as
  :meth:`put_tensor` stores it;
* a ``writer_partition`` (rank, size, split_dim): the tensor is the whole
  one; its even slice ``rank`` of ``size`` is stored, with a manifest;
* a TP axis alone: the tensor already is shard ``rank``, stored where
  ``put_tensor_with_tp`` puts it, with a manifest;
* a TP axis with others: the tensor is the whole one; the slice the TP
  axis names is stored, with a manifest;
* no TP axis: the tensor is stored as it is, under the axes' name.

The ``*_from`` forms read the tensor from a tensor object in registered
memory, and where a TP axis is asked for they store every TP shard of it
(no manifest), as the wheel does. Each shard records its layout (see
:mod:`gostore.tensors.codec`); reads check it and put tensors back together from
it, in host memory.

Conventions are the wheel's: writes return 0 or a negative code (-600 for
a request that cannot be served), batches one per key (all -600 when the
lists differ in length or ``parallelisms`` and ``writer_partitions`` are
both given); reads return the tensor or ``None``. As in the rest of
gostore's tensor API, ``TypeError`` is raised for a tensor argument that
is not a numpy array or a torch tensor.
"""

from __future__ import annotations

import ctypes
from typing import Any, Callable, List, NamedTuple, Optional, Sequence, Tuple, Union

from .. import _native
from ..tensors import codec as _codec
from ..tensors import parallel_plan as plan
from .._args import _INVALID, _config, _int, _ints, _seq, _strs
from .tensor_api import _view_object, _where
from ..config import ReplicateConfig

__all__ = ["ParallelTensorAPI"]

_Source = Union[Any, Tuple[int, int]]  # a tensor, or (ptr, size) of a tensor object


class _Shard(NamedTuple):
    key: str
    tensor: Any
    layout: Optional[_codec.ShardLayout]


class _WritePlan(NamedTuple):
    """What one parallel write stores: tensors, then (when all of them
    are stored) a manifest; or the caller's buffer as it is."""

    shards: List[_Shard]
    manifest: Optional[Tuple[str, bytes]] = None
    raw: Optional[Tuple[str, int, int]] = None  # (key, ptr, size): stored as put_tensor_from would


def _shape(t: Any) -> Tuple[int, ...]:
    if not hasattr(t, "shape"):
        raise TypeError(f"expected a numpy array or a torch tensor, not {type(t).__name__}")
    return tuple(int(n) for n in t.shape)


def _slice(t: Any, split_dim: int, rank: int, count: int) -> Any:
    start, length = plan.shard_range(int(t.shape[split_dim]), rank, count)
    return _codec.narrow(t, split_dim, start, length)


def _manifest(key: str, suffix: str, shape: Tuple[int, ...], split_dim: int, shards: int) -> Tuple[str, bytes]:
    return key + suffix, plan.encode_manifest(plan.Manifest(shape, split_dim, shards))


def _plan_tensor(key: str, t: Any, axes: Optional[Tuple[_codec.Axis, ...]],
                 wp: Optional[plan.WriterPartition], every_tp_rank: bool) -> Union[int, _WritePlan]:
    """What to store for ``t`` under base ``key``; -600 when it cannot be
    cut as asked. ``every_tp_rank``: store all TP shards of ``t`` (the
    ``*_from`` forms) rather than the one the TP axis names."""
    # (What only looks like a tensor is refused by the encoder, before
    # anything is stored.)
    shape = _shape(t)
    if wp is not None:
        if not plan.splits_evenly(shape, wp.split_dim, wp.size):
            return _INVALID
        layout = _codec.ShardLayout(shape, (_codec.Axis("tp", wp.rank, wp.size, wp.split_dim),))
        return _WritePlan([_Shard(plan.writer_key(key, wp), _slice(t, wp.split_dim, wp.rank, wp.size), layout)],
                          _manifest(key, plan.WRITER_MANIFEST, shape, wp.split_dim, wp.size))
    if axes is None:
        return _WritePlan([_Shard(key, t, None)])
    tp = plan.tp_axis(axes)
    if tp is None:  # dp / ep / pp only: a tag on the tensor, which is not cut
        return _WritePlan([_Shard(plan.shard_key(key, axes), t, _codec.ShardLayout(shape, axes))])
    sd = tp.split_dim
    if every_tp_rank:
        if not plan.splits_evenly(shape, sd, tp.size):
            return _INVALID
        ranks = [plan.with_tp_rank(axes, r) for r in range(tp.size)]
        return _WritePlan([_Shard(plan.shard_key(key, a), _slice(t, sd, r, tp.size), _codec.ShardLayout(shape, a))
                           for r, a in enumerate(ranks)])
    if len(axes) == 1:  # ``t`` is this rank's shard already
        if not 0 <= sd < len(shape):
            return _INVALID
        whole = shape[:sd] + (shape[sd] * tp.size,) + shape[sd + 1:]
        return _WritePlan([_Shard(plan.shard_key(key, axes), t, _codec.ShardLayout(whole, axes))],
                          _manifest(key, plan.PARALLELISM_MANIFEST, whole, sd, tp.size))
    if not plan.splits_evenly(shape, sd, tp.size):
        return _INVALID
    return _WritePlan([_Shard(plan.shard_key(key, axes), _slice(t, sd, tp.rank, tp.size),
                              _codec.ShardLayout(shape, axes))],
                      _manifest(key, plan.PARALLELISM_MANIFEST, shape, sd, tp.size))


def _request(parallelism: Any, writer_partition: Any):
    """(axes, writer partition) of one write request; raises
    plan.Invalid."""
    if parallelism is not None and writer_partition is not None:
        raise plan.Invalid("writer_partition cannot be combined with parallelism")
    if writer_partition is not None:
        return None, plan.writer_of(writer_partition)
    return (None if parallelism is None else plan.axes_of(parallelism)), None


def _batch_requests(n: int, parallelisms: Any, writer_partitions: Any) -> Optional[List[Tuple[Any, Any]]]:
    """Each key's (parallelism, writer_partition); None when the lists
    cannot be used (both given, not lists, or of other lengths)."""
    if parallelisms is not None and writer_partitions is not None:
        return None
    for given in (parallelisms, writer_partitions):
        if given is not None and (not isinstance(given, list) or len(given) != n):
            return None
    return [(None if parallelisms is None else parallelisms[i],
             None if writer_partitions is None else writer_partitions[i]) for i in range(n)]


def _same_axes(hdr: _codec.Header, axes: Sequence[_codec.Axis]) -> bool:
    """Whether the object ``hdr`` describes is the shard ``axes`` names."""
    if hdr.layout is None:
        return False
    stored = tuple(sorted(hdr.layout.axes, key=lambda a: _codec.AXIS_KINDS.index(a.kind)))
    return stored == tuple(axes)


class ParallelTensorAPI:
    """Mixed into :class:`~gostore.MooncakeDistributedStore`; relies on
    :class:`~gostore.store.tensor_api.TensorAPI` (``_put_tensors``,
    ``_tensor_from``, ``_tensor_at``, ``_get_tensors``, ``_tensors_into``)
    and the store's ``_write_multi``, ``_get_bytes``, ``_h``."""

    # ---- writing ------------------------------------------------------------

    def _write_parallel(self, keys: Sequence[str], sources: Sequence[_Source], requests: Sequence[Tuple[Any, Any]],
                        config: Any, upsert: bool, from_memory: bool) -> List[int]:
        """Store each source as its request asks: all tensors in one native
        call, then the manifests of the keys whose tensors all went in."""
        _config(config)  # TypeError for a config of the wrong type, whatever the requests
        out = [_INVALID] * len(keys)
        plans: List[Tuple[int, _WritePlan]] = []
        where = _where(self._lib(), self._h(), [p for p, _ in sources], [s for _, s in sources]) if from_memory else None
        for i, (key, src, (par, wp)) in enumerate(zip(keys, sources, requests)):
            try:
                axes, writer = _request(par, wp)
            except plan.Invalid:
                continue
            if not key:
                continue  # no base key (its shards' names would not be empty)
            if from_memory:
                ptr, size = src
                if axes is None and writer is None:
                    plans.append((i, _WritePlan([], None, (key, ptr, size))))
                    continue
                src = self._tensor_at(ptr, size, where[i])
                if src is None:
                    continue
            p = _plan_tensor(key, src, axes, writer, from_memory)
            if isinstance(p, _WritePlan):
                plans.append((i, p))
        shards = [s for _, p in plans for s in p.shards]
        codes = iter(self._put_tensors([s.key for s in shards], [s.tensor for s in shards], config, upsert,
                                       [s.layout for s in shards]) if shards else [])
        raws = [(i, p.raw) for i, p in plans if p.raw is not None]
        if raws:
            got = self._tensor_from([r[0] for _, r in raws], [r[1] for _, r in raws], [r[2] for _, r in raws],
                                    upsert, config)
            for (i, _), code in zip(raws, got):
                out[i] = code
        manifests = []
        for i, p in plans:
            if p.raw is not None:
                continue
            mine = [next(codes) for _ in p.shards]
            out[i] = next((c for c in mine if c != 0), 0)
            if out[i] == 0 and p.manifest is not None:
                manifests.append((i, p.manifest))
        if manifests:
            got = self._write_multi([m[0].encode("utf-8") for _, m in manifests], [(m[1],) for _, m in manifests],
                                    _config(config), upsert)
            for (i, _), code in zip(manifests, got):
                out[i] = code
        return out

    def _write_one(self, key: Any, source: _Source, parallelism: Any, writer_partition: Any, config: Any,
                   upsert: bool, from_memory: bool) -> int:
        k = _strs([key], "key")[0]
        return self._write_parallel([k], [source], [(parallelism, writer_partition)], config, upsert,
                                    from_memory)[0]

    def _write_batch_parallel(self, keys: Any, sources: List[_Source], parallelisms: Any, writer_partitions: Any,
                              config: Any, upsert: bool, from_memory: bool) -> List[int]:
        ks = _strs(keys, "keys")
        requests = _batch_requests(len(ks), parallelisms, writer_partitions)
        if requests is None or len(sources) != len(ks):
            return [_INVALID] * len(ks)
        return self._write_parallel(ks, sources, requests, config, upsert, from_memory)

    @staticmethod
    def _memory(buffer_ptrs: Any, sizes: Any) -> List[Tuple[int, int]]:
        ps, ss = _ints(buffer_ptrs, "buffer_ptrs"), _ints(sizes, "sizes")
        if len(ps) != len(ss):
            return []
        return list(zip(ps, ss))

    def put_tensor_with_parallelism(
        self, key: str, tensor: Any, parallelism: Any = None, config: Optional[ReplicateConfig] = None,
        writer_partition: Any = None,
    ) -> int:
        """Store ``tensor`` as the shard ``parallelism`` (a
        :class:`~gostore.TensorParallelism`) or ``writer_partition`` (any
        object with ``rank``, ``size``, ``split_dim``) names, or whole when
        neither is given (module docstring: what is stored where). 0, or
        -600 for a request that cannot be served, or the store's code."""
        return self._write_one(key, tensor, parallelism, writer_partition, config, False, False)

    def upsert_tensor_with_parallelism(
        self, key: str, tensor: Any, parallelism: Any = None, config: Optional[ReplicateConfig] = None,
        writer_partition: Any = None,
    ) -> int:
        """:meth:`put_tensor_with_parallelism` that replaces what is there."""
        return self._write_one(key, tensor, parallelism, writer_partition, config, True, False)

    def batch_put_tensor_with_parallelism(
        self, keys: List[str], tensors_list: List[Any], parallelisms: Any = None,
        config: Optional[ReplicateConfig] = None, writer_partitions: Any = None,
    ) -> List[int]:
        """One :meth:`put_tensor_with_parallelism` result per key;
        ``parallelisms`` / ``writer_partitions`` are lists with one entry
        (or None) per key, not both."""
        ts = list(_seq(tensors_list, "tensors_list"))
        return self._write_batch_parallel(keys, ts, parallelisms, writer_partitions, config, False, False)

    def batch_upsert_tensor_with_parallelism(
        self, keys: List[str], tensors_list: List[Any], parallelisms: Any = None,
        config: Optional[ReplicateConfig] = None, writer_partitions: Any = None,
    ) -> List[int]:
        """One :meth:`upsert_tensor_with_parallelism` result per key."""
        ts = list(_seq(tensors_list, "tensors_list"))
        return self._write_batch_parallel(keys, ts, parallelisms, writer_partitions, config, True, False)

    def put_tensor_with_parallelism_from(
        self, key: str, buffer_ptr: int, size: int, parallelism: Any = None,
        config: Optional[ReplicateConfig] = None, writer_partition: Any = None,
    ) -> int:
        """:meth:`put_tensor_with_parallelism` of the tensor object (as
        :meth:`get_tensor_into` leaves it) in registered memory at
        ``buffer_ptr``. With a TP axis every TP shard of it is stored;
        without a request the memory is stored as it is
        (:meth:`put_tensor_from`). -600 when it holds no tensor object."""
        src = (_int(buffer_ptr, "buffer_ptr"), _int(size, "size"))
        return self._write_one(key, src, parallelism, writer_partition, config, False, True)

    def upsert_tensor_with_parallelism_from(
        self, key: str, buffer_ptr: int, size: int, parallelism: Any = None,
        config: Optional[ReplicateConfig] = None, writer_partition: Any = None,
    ) -> int:
        """:meth:`put_tensor_with_parallelism_from` that replaces what is
        there."""
        src = (_int(buffer_ptr, "buffer_ptr"), _int(size, "size"))
        return self._write_one(key, src, parallelism, writer_partition, config, True, True)

    def batch_put_tensor_with_parallelism_from(
        self, keys: List[str], buffer_ptrs: List[int], sizes: List[int], parallelisms: Any = None,
        config: Optional[ReplicateConfig] = None, writer_partitions: Any = None,
    ) -> List[int]:
        """One :meth:`put_tensor_with_parallelism_from` result per key."""
        return self._write_batch_parallel(keys, self._memory(buffer_ptrs, sizes), parallelisms,
                                          writer_partitions, config, False, True)

    def batch_upsert_tensor_with_parallelism_from(
        self, keys: List[str], buffer_ptrs: List[int], sizes: List[int], parallelisms: Any = None,
        config: Optional[ReplicateConfig] = None, writer_partitions: Any = None,
    ) -> List[int]:
        """One :meth:`upsert_tensor_with_parallelism_from` result per key."""
        return self._write_batch_parallel(keys, self._memory(buffer_ptrs, sizes), parallelisms,
                                          writer_partitions, config, True, True)

    # ---- reading ------------------------------------------------------------

    def _manifest_at(self, key: str) -> Optional[plan.Manifest]:
        raw = self._get_bytes([key.encode("utf-8")])[0]
        return plan.decode_manifest(bytes(raw)) if raw else None

    def _join(self, got: List[Optional[Tuple[Any, _codec.Header]]], whole: Tuple[int, ...],
              split_dim: int) -> Any:
        """The tensor of shape ``whole`` the shards ``got`` (in rank order)
        make along ``split_dim``, or None when one is missing or of
        another shape."""
        n = len(got)
        for g in got:
            if g is None:
                return None
            want = whole[:split_dim] + (whole[split_dim] // n,) + whole[split_dim + 1:]
            if _shape(g[0]) != want:
                return None
        try:
            return _codec.concat([g[0] for g in got], split_dim)
        except (TypeError, ValueError, RuntimeError):  # shards of other dtypes or kinds
            return None

    def _whole_from_writers(self, key: str, m: plan.Manifest) -> Any:
        """The tensor whose ``writer_partition`` shards (manifest ``m``)
        are stored under ``key``; None when one is missing."""
        wps = [plan.WriterPartition(r, m.shards, m.split_dim) for r in range(m.shards)]
        got = self._get_tensors([plan.writer_key(key, wp) for wp in wps])
        for g, wp in zip(got, wps):
            if g is None or not _same_axes(g[1], (_codec.Axis("tp", wp.rank, wp.size, wp.split_dim),)):
                return None
        return self._join(got, m.global_shape, m.split_dim)

    def _whole(self, key: str, axes: Tuple[_codec.Axis, ...]) -> Optional[Tuple[Any, Tuple[int, ...], int]]:
        """(whole tensor, its shape, split dim) put back together from the
        TP shards of the request ``axes`` (which has a TP axis): through
        the manifest when there is one, else from the shards' layouts."""
        tp = plan.tp_axis(axes)
        m = self._manifest_at(key + plan.PARALLELISM_MANIFEST)
        if (m is not None and m.split_dim == tp.split_dim and plan.splits_evenly(m.global_shape, m.split_dim, tp.size)
                and plan.splits_evenly(m.global_shape, m.split_dim, m.shards)):
            want = [plan.with_tp_rank(axes, r, m.shards) for r in range(m.shards)]
            got = self._get_tensors([plan.shard_key(key, a) for a in want])
            if all(g is not None and _same_axes(g[1], a) for g, a in zip(got, want)):
                whole = self._join(got, m.global_shape, m.split_dim)
                if whole is not None:
                    return whole, m.global_shape, m.split_dim
        if len(axes) == 1:
            # Shards put_tensor_with_tp wrote: the first one says how many.
            first = self._get_tensors([plan.tp_read_key(key, 0, tp.size)])[0]
            lay = None if first is None else first[1].layout
            if lay is None or len(lay.axes) != 1 or lay.axes[0].kind != "tp" or lay.axes[0].split_dim != tp.split_dim:
                return None
            shards = lay.axes[0].size
            if not (plan.splits_evenly(lay.global_shape, tp.split_dim, tp.size)
                    and plan.splits_evenly(lay.global_shape, tp.split_dim, shards)):
                return None
            want = [(_codec.Axis("tp", r, shards, tp.split_dim),) for r in range(shards)]
            got = self._get_tensors([plan.tp_read_key(key, r, shards) for r in range(shards)])
        else:
            want = [plan.with_tp_rank(axes, r) for r in range(tp.size)]
            got = self._get_tensors([plan.shard_key(key, a) for a in want])
            lay = None if got[0] is None else got[0][1].layout
            if lay is None or not plan.splits_evenly(lay.global_shape, tp.split_dim, tp.size):
                return None
        if not all(g is not None and _same_axes(g[1], a) for g, a in zip(got, want)):
            return None
        whole = self._join(got, lay.global_shape, tp.split_dim)
        return None if whole is None else (whole, lay.global_shape, tp.split_dim)

    def _read(self, key: Any, target: Any, stored: Callable[[str], Any],
              place: Callable[[Any, Optional[_codec.ShardLayout]], Any], unchecked_tp_shard: bool) -> Any:
        """One read of ``key`` as ``target`` asks. ``stored(k)`` reads the
        object under ``k`` if it is a tensor (returning (tensor, header) or
        None); ``place(t, layout)`` delivers a tensor put together here.
        ``unchecked_tp_shard``: a TP shard no layout vouches for is still
        read from where ``put_tensor_with_tp`` puts it (the wheel's plain
        reads do so, its ``_into`` reads do not)."""
        k = _strs([key], "key")[0]
        try:
            mode, par = plan.read_target_of(target)
            axes = None if par is None else plan.axes_of(par)
        except plan.Invalid:
            return None
        if not k:
            return None
        if axes is None:
            m = self._manifest_at(k + plan.WRITER_MANIFEST) if mode == plan.READ_FULL else None
            if m is not None:
                whole = self._whole_from_writers(k, m)
                return None if whole is None else place(whole, None)
            if mode == plan.READ_SHARD:
                return None  # a shard of what: the request names none
            got = stored(k)
            return None if got is None else got[0]
        if mode == plan.READ_AS_STORED:
            return None  # as stored, yet with a split: no such read
        tp = plan.tp_axis(axes)
        if mode == plan.READ_FULL:
            found = None if tp is None else self._whole(k, axes)
            return None if found is None else place(found[0], None)
        got = stored(plan.shard_key(k, axes))
        if got is not None and _same_axes(got[1], axes):
            return got[0]
        if len(axes) == 1 and tp is not None:
            wp = plan.WriterPartition(tp.rank, tp.size, tp.split_dim)
            got = stored(plan.writer_key(k, wp))
            if got is not None and _same_axes(got[1], axes):
                return got[0]
        if tp is not None:
            found = self._whole(k, axes)
            if found is not None:
                whole, shape, sd = found
                start, length = plan.shard_range(shape[sd], tp.rank, tp.size)
                return place(_codec.narrow(whole, sd, start, length), _codec.ShardLayout(shape, axes))
        if unchecked_tp_shard and len(axes) == 1 and tp is not None:
            got = stored(plan.tp_read_key(k, tp.rank, tp.size))
            return None if got is None else got[0]
        return None

    def get_tensor_with_parallelism(self, key: str, target: Any = None) -> Any:
        """Read ``key`` as ``target`` (a :class:`~gostore.ReadTarget`)
        asks: as stored (the default), one shard, or the whole tensor put
        back together from its shards (a shard may also be cut from
        shards of another split). The tensor, or None."""
        return self._read(key, target, lambda k: self._get_tensors([k])[0], lambda t, layout: _contiguous(t), True)

    def batch_get_tensor_with_parallelism(self, keys: List[str], targets: Any = None) -> List[Any]:
        """One :meth:`get_tensor_with_parallelism` result per key;
        ``targets`` is a list with one ReadTarget (or None) per key; all
        None when it is not a list of that length."""
        ks = _strs(keys, "keys")
        if targets is None:
            return self.batch_get_tensor(list(ks))
        if not isinstance(targets, list) or len(targets) != len(ks):
            return [None] * len(ks)
        return [self.get_tensor_with_parallelism(k, t) for k, t in zip(ks, targets)]

    def get_tensor_with_parallelism_into(self, key: str, buffer_ptr: int, size: int, target: Any = None) -> Any:
        """:meth:`get_tensor_with_parallelism` into registered memory of
        ``size`` bytes at ``buffer_ptr``: the tensor object lands there (a
        tensor put together here is copied in) and the tensor returned
        views it. None on failure, a buffer too small included."""
        ptr, cap = _int(buffer_ptr, "buffer_ptr"), _int(size, "size")

        def stored(k: str) -> Any:
            got = self._tensors_into([k], [ptr], [cap])[0]
            return None if isinstance(got, int) else got

        return self._read(key, target, stored, lambda t, layout: self._place(t, layout, ptr, cap), False)

    def batch_get_tensor_with_parallelism_into(
        self, keys: List[str], buffer_ptrs: List[int], sizes: List[int], targets: Any = None,
    ) -> List[Any]:
        """One :meth:`get_tensor_with_parallelism_into` result per key;
        all None when the lists differ in length."""
        ks = _strs(keys, "keys")
        ps, ss = _ints(buffer_ptrs, "buffer_ptrs"), _ints(sizes, "sizes")
        if not (len(ks) == len(ps) == len(ss)):
            return [None] * len(ks)
        if targets is None:
            targets = [None] * len(ks)
        elif not isinstance(targets, list) or len(targets) != len(ks):
            return [None] * len(ks)
        return [self.get_tensor_with_parallelism_into(k, p, s, t) for k, p, s, t in zip(ks, ps, ss, targets)]

    def _place(self, t: Any, layout: Optional[_codec.ShardLayout], ptr: int, cap: int) -> Any:
        """Write ``t`` as a tensor object into the memory at ``ptr`` (host,
        or registered GPU memory) and return the tensor viewing it there;
        None when it does not fit."""
        parts = _codec.encode(_contiguous(t), layout)
        head = bytes(parts.header)
        data = parts.data
        nbytes = data.nbytes if isinstance(data, _codec.DeviceSpan) else len(data)
        total = len(head) + nbytes
        if total > cap or ptr <= 0 or ptr + total > 2**64:
            return None
        # Memory never registered is the caller's own host memory, as for
        # get_tensor_into (which reads into it too).
        where = _where(self._lib(), self._h(), [ptr], [total])[0]
        where = 1 if where == 0 else where
        head_buf = ctypes.create_string_buffer(head, len(head))
        src = data.ptr if isinstance(data, _codec.DeviceSpan) else (data.ctypes.data if nbytes else 0)
        if where == 1 and not isinstance(data, _codec.DeviceSpan):
            ctypes.memmove(ptr, head_buf, len(head))
            if nbytes:
                ctypes.memmove(ptr + len(head), src, nbytes)
        else:  # the driver copies what touches GPU memory
            lib = _native.lib()
            if where == 1:
                ctypes.memmove(ptr, head_buf, len(head))
            elif lib.gs_device_copy(ptr, ctypes.addressof(head_buf), len(head)) != 0:
                return None
            if nbytes and lib.gs_device_copy(ptr + len(head), src, nbytes) != 0:
                return None
        found = _view_object(ptr, total, where)
        return None if found is None else found[0]


def _contiguous(t: Any) -> Any:
    """``t`` in a memory of its own, C-ordered (a slice of a joined tensor
    would otherwise keep the whole alive)."""
    if _codec.is_torch_tensor(t):
        c = t.contiguous()
        return c.clone() if c._base is not None else c
    return t if t.base is None and t.flags.c_contiguous else t.copy(order="C")
