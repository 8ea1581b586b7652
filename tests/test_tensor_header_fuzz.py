"""Tensor headers are read from whatever an object holds: another writer's
bytes, Mooncake's, a damaged or foreign value. The decoders
(``decode_header``, ``decode_prefix``, ``header_length``) answer a header
or None (0), never an exception, and what they accept is self-consistent.
Seeded mutations of real headers in both forms (gostore's, for dtypes and
ranks Mooncake's form cannot hold, and Mooncake's), a fixed number per
seed: the same inputs every run."""

from __future__ import annotations

import random
import struct

import pytest

np = pytest.importorskip("numpy")

from gostore.tensors import codec as T  # noqa: E402

ROUNDS = 3000  # mutations per seed


def _seeds():
    """Whole objects (header and data) as encode() writes them."""
    layout = T.ShardLayout((8, 6), (T.Axis("tp", 1, 2, split_dim=0), T.Axis("ep", 0, 4, expert_id=3)))
    arrays = [
        (np.arange(12, dtype=np.float32).reshape(3, 4), None),  # Mooncake's form
        (np.array(7, dtype=np.int8), None),  # 0-d
        (np.arange(24, dtype=np.float32).reshape(4, 6), layout),  # a shard, Mooncake's form
        (np.zeros((2, 3), dtype=">u2"), None),  # big-endian: gostore's own form
        (np.zeros((1,) * 9, dtype=np.complex64), None),  # more dimensions than Mooncake's form holds
        (np.zeros((0, 5), dtype=np.float64), None),  # no data
    ]
    out = []
    for arr, lay in arrays:
        parts = T.encode(arr, lay)
        out.append(bytes(parts.header) + parts.data.tobytes())
    assert any(T._is_mc(memoryview(b)) for b in out) and not all(T._is_mc(memoryview(b)) for b in out)
    return out


def _mutate(rng: random.Random, b: bytes) -> bytes:
    b = bytearray(b)
    how = rng.randrange(6)
    if how == 0 and b:  # flip bits
        for _ in range(rng.randint(1, 4)):
            b[rng.randrange(len(b))] ^= 1 << rng.randrange(8)
    elif how == 1:  # cut
        del b[rng.randrange(len(b) + 1):]
    elif how == 2:  # grow
        b += bytes(rng.randrange(256) for _ in range(rng.randrange(64)))
    elif how == 3 and len(b) >= 8:  # a length or count field set to an extreme
        at = rng.randrange(len(b) - 7) & ~3
        b[at:at + 4] = struct.pack("<I", rng.choice([0, 1, 0x7FFFFFFF, 0xFFFFFFFF, 255, 65535]))
    elif how == 4 and len(b) >= 8:  # an 8-byte field (sizes, offsets) set to an extreme
        at = rng.randrange(len(b) - 7) & ~7
        b[at:at + 8] = struct.pack("<q", rng.choice([-1, 0, 1 << 62, -(1 << 63), 304, 1 << 20]))
    else:  # random bytes
        b = bytearray(rng.randrange(256) for _ in range(rng.randrange(400)))
    return bytes(b)


def _check(buf: bytes) -> None:
    hdr = T.decode_header(buf)
    if hdr is not None:
        assert 0 < hdr.offset <= len(buf) and hdr.offset + hdr.nbytes == len(buf)
        assert all(n >= 0 for n in hdr.shape)
        assert isinstance(hdr.descr, str)
    n = T.header_length(buf[:T.FIXED_SIZE])
    assert n >= 0
    if hdr is not None:
        assert n == hdr.offset  # the prefix says where the data starts
    pre = T.decode_prefix(buf)
    if pre is not None:
        assert pre.offset <= len(buf)


@pytest.mark.parametrize("seed", range(6))
def test_decoders_answer_any_bytes_with_a_header_or_none(seed):
    whole = _seeds()[seed]
    _check(whole)
    assert T.decode_header(whole) is not None  # the seed itself decodes
    rng = random.Random(seed)
    for _ in range(ROUNDS):
        buf = _mutate(rng, whole)
        try:
            _check(buf)
        except AssertionError:
            raise
        except Exception as e:  # noqa: BLE001 -- the property: no exception at all
            pytest.fail(f"{type(e).__name__}: {e} on {buf[:96].hex()}... ({len(buf)} bytes)")
