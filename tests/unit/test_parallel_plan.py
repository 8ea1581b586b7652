"""The rules of the ``*_with_parallelism`` calls that need no store: how
requests are read and checked, the names of the objects they write (as the
Mooncake 0.3.13 wheel names them), manifests, and the shard layout a
tensor header records."""

from __future__ import annotations

from types import SimpleNamespace

import numpy as np
import pytest

from gostore import ParallelAxis, ReadTarget, TensorParallelism
from gostore.tensors import codec
from gostore.tensors import parallel_plan as plan
from gostore.tensors.codec import Axis


def ax(kind, rank=0, size=1, split_dim=None, expert_id=None, stage_id=None):
    return ParallelAxis(kind=kind, rank=rank, size=size, split_dim=split_dim, expert_id=expert_id,
                        stage_id=stage_id)


def par(*axes):
    return TensorParallelism(axes=list(axes))


def test_axes_come_back_checked_in_key_order():
    got = plan.axes_of(par(ax("PP", 1, 2, stage_id=9), ax("tp", 0, 2, 1), ax("Dp", 1, 4), ax("ep", 0, 3, expert_id=5)))
    assert got == (Axis("dp", 1, 4), Axis("tp", 0, 2, 1), Axis("ep", 0, 3, None, 5), Axis("pp", 1, 2, None, None, 9))
    # Look-alikes serve as well; absent optional fields read as None.
    duck = SimpleNamespace(axes=[SimpleNamespace(kind="dp", rank=0, size=2)])
    assert plan.axes_of(duck) == (Axis("dp", 0, 2),)


@pytest.mark.parametrize("bad", [
    par(), par(ax("xx", 0, 1)), par(ax("tp", 0, 2, 0), ax("TP", 1, 2, 0)), par(ax("dp", 2, 2)),
    par(ax("dp", -1, 2)), par(ax("dp", 0, 0)), par(ax("tp", 0, 2)), par(ax("dp", 0, 2, 0)),
    par(ax("ep", 0, 2)), par(ax("ep", 0, 2, 0, expert_id=1)), par(ax("pp", 0, 2)), par(ax("pp", 0, 2, 1, stage_id=1)),
    par(ax("dp", 0, 2**31)), SimpleNamespace(), SimpleNamespace(axes=[SimpleNamespace(kind="dp")]),
], ids=repr)
def test_requests_that_name_no_shard_are_invalid(bad):
    with pytest.raises(plan.Invalid):
        plan.axes_of(bad)


def test_wrongly_typed_fields_raise_type_error():
    with pytest.raises(TypeError):
        plan.axes_of(SimpleNamespace(axes=[SimpleNamespace(kind=1, rank=0, size=1)]))
    with pytest.raises(TypeError):
        plan.axes_of(SimpleNamespace(axes=[SimpleNamespace(kind="dp", rank="0", size=1)]))
    with pytest.raises(TypeError):
        plan.axes_of(SimpleNamespace(axes="dp"))
    with pytest.raises(TypeError):
        plan.read_target_of(SimpleNamespace(mode=None, parallelism=None))


def test_writer_partitions():
    assert plan.writer_of(SimpleNamespace(rank=1, size=3, split_dim=0)) == (1, 3, 0)
    assert plan.writer_of(ax("tp", 1, 2, 1)) == (1, 2, 1)
    for bad in (SimpleNamespace(rank=3, size=3, split_dim=0), SimpleNamespace(rank=0, size=0, split_dim=0),
                SimpleNamespace(rank=0, size=1, split_dim=-1), SimpleNamespace(rank=0, size=1),
                ax("tp", 0, 2)):  # a ParallelAxis whose split_dim is None
        with pytest.raises((plan.Invalid, TypeError)):
            plan.writer_of(bad)


def test_read_targets():
    assert plan.read_target_of(None) == ("as_stored", None)
    t = par(ax("dp", 0, 2))
    mode, p = plan.read_target_of(ReadTarget(mode="FULL", parallelism=t))
    assert mode == "full" and plan.axes_of(p) == (Axis("dp", 0, 2),)
    assert plan.read_target_of(SimpleNamespace(mode="Shard", parallelism=None)) == ("shard", None)
    for bad in (SimpleNamespace(mode="bogus", parallelism=None), SimpleNamespace(mode="shard"), object()):
        with pytest.raises(plan.Invalid):
            plan.read_target_of(bad)


def test_key_names():
    tp1 = (Axis("tp", 3, 4, 1),)
    assert plan.shard_key("k", tp1) == "k_tp_3"  # where put_tensor_with_tp puts shard 3
    assert plan.shard_key("k", (Axis("dp", 0, 2), Axis("tp", 1, 3, 1))) == "k__dp_0of2__tp_1of3_sd1"
    assert plan.shard_key("k", (Axis("ep", 0, 2, None, 11),)) == "k__ep_0of2_eid11"
    assert plan.shard_key("k", (Axis("tp", 0, 2, 0), Axis("pp", 1, 2, None, None, 9))) == "k__tp_0of2_sd0__pp_1of2_sid9"
    assert plan.writer_key("k", plan.WriterPartition(1, 2, 0)) == "k__writer_1of2_sd0"
    assert plan.tp_read_key("k", 0, 1) == "k" and plan.tp_read_key("k", 1, 2) == "k_tp_1"
    assert plan.with_tp_rank((Axis("dp", 0, 2), Axis("tp", 1, 3, 1)), 2, 6) == (Axis("dp", 0, 2), Axis("tp", 2, 6, 1))


def test_manifests_round_trip_and_refuse_other_bytes():
    m = plan.Manifest((4, 12), 1, 3)
    assert plan.decode_manifest(plan.encode_manifest(m)) == m
    for raw in (b"", b"GSTM1{", b"GSTM1{\"shape\":[4],\"split_dim\":1,\"shards\":2}", b"x" * 40,
                plan.encode_manifest(plan.Manifest((4,), 0, 0))):
        assert plan.decode_manifest(raw) is None, raw


def test_shard_ranges():
    assert [plan.shard_range(12, r, 4) for r in range(4)] == [(0, 3), (3, 3), (6, 3), (9, 3)]
    assert plan.splits_evenly((4, 12), 1, 4) and not plan.splits_evenly((4, 12), 1, 5)
    assert not plan.splits_evenly((4,), 1, 2) and not plan.splits_evenly((4,), -1, 2)
    assert not plan.splits_evenly((), 0, 1)


def test_headers_record_a_shard_layout():
    a = np.arange(6, dtype=np.int32).reshape(2, 3)
    lay = codec.ShardLayout((2, 9), (Axis("dp", 1, 2), Axis("tp", 2, 3, 1), Axis("ep", 0, 2, None, -5),
                                     Axis("pp", 1, 4, None, None, 2**40)))
    parts = codec.encode(a, lay)
    whole = bytes(parts.header) + parts.data.tobytes()
    hdr = codec.decode_header(whole)
    assert hdr.layout == lay and hdr.shape == (2, 3) and codec.header_length(whole[:codec.FIXED_SIZE]) == hdr.offset
    assert codec.materialize(np.frombuffer(whole, np.uint8), hdr).tolist() == a.tolist()
    assert codec.decode_prefix(bytes(parts.header)).layout == lay  # the header alone is enough
    assert codec.decode_header(bytes(codec.encode(a).header) + parts.data.tobytes()).layout is None
    with pytest.raises(ValueError):
        codec.encode(a, codec.ShardLayout((2,), lay.axes))  # the whole tensor has the shard's rank
    # A header claiming more layout than it holds is no header.
    assert codec.decode_header(whole[:hdr.offset - 64] + parts.data.tobytes()) is None
