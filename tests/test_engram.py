"""EngramStore: one layer's per-head embedding tables, looked up by row ids
with one ranged read; Mooncake's key names, checks and errors."""

from __future__ import annotations

import itertools
import os

import numpy as np
import pytest

from conftest import MiB
from gostore import EngramStore, EngramStoreConfig, MooncakeDistributedNoFRegister

_layers = itertools.count(os.getpid() * 100)


def _config(sizes, dim) -> EngramStoreConfig:
    cfg = EngramStoreConfig()
    cfg.table_vocab_sizes = list(sizes)
    cfg.embedding_dim = dim
    return cfg


def _tables(sizes, dim, seed=0):
    rng = np.random.default_rng(seed)
    return [rng.standard_normal((n, dim), dtype=np.float32) for n in sizes]


def test_lookup_returns_each_heads_rows(store):
    sizes, dim = (50, 7, 130), 12
    layer = next(_layers)
    es = EngramStore(layer, _config(sizes, dim), store)
    assert es.get_store_keys() == [f"engram:l{layer}:h{h}" for h in range(3)]
    assert (es.get_num_heads(), es.get_embedding_dim(), es.get_table_vocab_sizes()) == (3, 12, [50, 7, 130])
    tables = _tables(sizes, dim)
    es.populate(tables)
    rng = np.random.default_rng(1)
    ids = np.stack([rng.integers(0, n, size=(4, 9)) for n in sizes], axis=-1)  # [B, L, H]
    got = es.lookup(ids)
    want = np.stack([tables[h][ids[..., h]] for h in range(3)], axis=2)
    assert got.shape == (4, 9, 3, 12) and got.dtype == np.float32
    assert np.array_equal(got, want)
    # Nested lists, and int32 ids cast as Mooncake casts them
    assert np.array_equal(es.lookup(ids[:2].tolist()), want[:2])
    assert np.array_equal(es.lookup(ids.astype(np.int32)), want)
    with pytest.raises(RuntimeError, match="rc=-706"):
        es.remove_from_store()  # the lookup leased the tables, as a get does
    assert es.remove_from_store(force=True) == 3
    assert store.batch_is_exist(es.get_store_keys()) == [0, 0, 0]
    assert es.remove_from_store() == 0  # missing tables are skipped


def test_populate_is_create_only_and_checks_tables(store):
    sizes, dim = (5, 6), 4
    layer = next(_layers)
    es = EngramStore(layer, _config(sizes, dim), store)
    tables = _tables(sizes, dim)
    for bad, why in (
        (tables[:1], "size must match num_heads"),
        ([tables[0], [[0.0] * dim] * 6], "must be NumPy arrays"),
        ([tables[0], tables[1][:, :3]], "shape does not match"),
        ([tables[0], tables[1].reshape(-1)], "must be 2D"),
    ):
        with pytest.raises(RuntimeError, match=why):
            es.populate(bad)
    assert store.batch_is_exist(es.get_store_keys()) == [0, 0]
    with pytest.raises(TypeError):
        es.populate(tuple(tables))
    es.populate([tables[0].astype(np.float64), tables[1]])  # cast to float32 as Mooncake does
    assert np.array_equal(es.lookup([[[4, 5]]])[0, 0], np.stack([tables[0][4], tables[1][5]]))
    with pytest.raises(RuntimeError, match="populate failed"):
        es.populate(_tables(sizes, dim, seed=2))  # the layer exists: remove it first
    assert np.array_equal(es.lookup([[[4, 5]]])[0, 0], np.stack([tables[0][4], tables[1][5]]))
    assert es.remove_from_store(force=True) == 2
    es.populate(_tables(sizes, dim, seed=2))
    assert es.remove_from_store(force=True) == 2


def test_populate_rolls_back_what_went_in(store):
    """A head table that cannot go in (larger than any segment: the shared
    cluster's are 64 MiB) takes the others with it: the layer is left
    empty, not half written."""
    dim = 1024
    sizes = (8, (80 * MiB) // (4 * dim))
    es = EngramStore(next(_layers), _config(sizes, dim), store)
    tables = [np.ones((8, dim), np.float32), np.zeros((sizes[1], dim), np.float32)]
    with pytest.raises(RuntimeError, match="populate failed"):
        es.populate(tables)
    assert store.batch_is_exist(es.get_store_keys()) == [0, 0]


def test_lookup_refuses_bad_row_ids(store):
    sizes, dim = (10, 20), 3
    es = EngramStore(next(_layers), _config(sizes, dim), store)
    es.populate(_tables(sizes, dim))
    for bad, why in (
        (np.zeros((2, 3), np.int64), r"shape \[B, L, H\]"),
        (np.zeros((1, 1, 3), np.int64), "must match num_heads"),
        (np.array([[[10, 0]]]), "lookup failed"),  # row 10 of a 10-row table
        (np.array([[[0, -1]]]), "lookup failed"),
        (np.zeros((0, 4, 2), np.int64), "lookup failed"),
        ([], "must not be empty"),
        ([[[1, 2]], [[1, 2], [3, 4]]], "lookup failed"),  # ragged
        ([[[1, 2, 3]]], "lookup failed"),
    ):
        with pytest.raises(RuntimeError, match=why):
            es.lookup(bad)
    assert es.remove_from_store(force=True) == 2
    with pytest.raises(RuntimeError, match="lookup failed"):
        es.lookup([[[1, 2]]])  # the tables are gone


def test_config_and_store_arguments_are_checked():
    with pytest.raises(ValueError, match="must not be empty"):
        EngramStore(0, _config([], 4))
    with pytest.raises(ValueError, match="embedding_dim must be positive"):
        EngramStore(0, _config([3], 0))
    with pytest.raises(ValueError, match="only positive"):
        EngramStore(0, _config([3, 0], 4))
    with pytest.raises(TypeError):
        EngramStore(0, {"table_vocab_sizes": [3], "embedding_dim": 4})
    with pytest.raises(RuntimeError, match="must be a MooncakeDistributedStore"):
        EngramStore(0, _config([3], 4), store=object())
    meta_only = EngramStore(7, _config([3], 4))  # the layout and keys, no store
    assert meta_only.get_store_keys() == ["engram:l7:h0"]
    with pytest.raises(RuntimeError, match="rc=-600"):
        meta_only.remove_from_store()
    with pytest.raises(RuntimeError):
        meta_only.populate(_tables([3], 4))


def test_nvme_of_registration_fails_with_a_reason(caplog):
    """No NVMe-oF transport here: Mooncake's registrar answers
    OPERATION_FAILED and says why."""
    reg = MooncakeDistributedNoFRegister()
    assert reg.real_register("nqn.test", 1, "10.0.0.1", 4420, 0, 1024, "127.0.0.1:50051") == -1
    assert reg.real_unregister_by_endpoint("nqn.test") == -1
    assert "no NVMe-oF transport" in caplog.text
