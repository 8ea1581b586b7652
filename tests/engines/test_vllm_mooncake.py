"""vLLM's own Mooncake store KV connector (``vllm.distributed.kv_transfer.
kv_connector.v1.mooncake.store``, from the installed CPU build of vLLM,
unchanged) on gostore: ``mooncake.store`` resolves to gostore
(GOSTORE_AS_MOONCAKE=1), the connector is made by vLLM's own factory for
both roles, and driven the way vLLM's scheduler and model runner drive it:
the scheduler half (get_num_new_matched_tokens, update_state_after_alloc,
build_connector_meta, update_connector_output, request_finished) and the
worker half (register_kv_caches, start_load_kv, wait_for_layer_load,
save_kv_layer, wait_for_save, get_finished), over CPU KV caches and a real
gostore-master. A second request with the same prompt finds the first
one's blocks in gostore and loads them, byte for byte.

Two stand-ins, for what cannot exist here, and nothing else: vLLM's
parallel-group helpers answer "rank 0 of 1" (no torch.distributed world is
started), and ``torch.cuda.Event`` (which ``wait_for_save`` records on the
GPU stream before a save) is an event that is always complete: there is no
GPU.
"""

from __future__ import annotations

import pytest

vllm = pytest.importorskip("vllm", reason="vLLM is not installed here: `make test-engines` installs it")
torch = pytest.importorskip("torch")

from vllm.v1.core.sched.output import SchedulerOutput  # noqa: E402

import gostore  # noqa: E402
import vllm_harness as vh  # noqa: E402
from conftest import wait_until  # noqa: E402

BLOCK = 16
_port = iter(range(23100, 23200))


@pytest.fixture
def vllm_pair(master, tmp_path, monkeypatch):
    """vLLM's connector, scheduler and worker halves, on gostore."""
    yield from _pair(master, tmp_path, monkeypatch, "64MB")


@pytest.fixture
def vllm_pair_small(master, tmp_path, monkeypatch):
    """The same with a segment of 4 KiB, the pool's only one: room for one
    block of this model's KV (2 KiB) beside the others, not three, and
    puts that do not wait for room."""
    monkeypatch.setenv("GOSTORE_PUT_SPACE_WAIT_MS", "0")
    yield from _pair(master, tmp_path, monkeypatch, "4KB")


def _pair(master, tmp_path, monkeypatch, segment: str):
    p = vh.open_pair(master.addr, str(tmp_path), native=False, segment=segment, lookup_port=next(_port),
                     patch=monkeypatch.setattr, setenv=monkeypatch.setenv, block=BLOCK)
    p.master = master
    yield p
    vh.close_pair(p)


def test_mooncake_store_is_gostore():
    import mooncake.store

    assert mooncake.store.MooncakeDistributedStore is gostore.MooncakeDistributedStore


def test_a_prefix_saved_by_one_request_is_loaded_by_the_next(vllm_pair):
    p = vllm_pair
    prompt = list(range(1, 3 * BLOCK + 5))  # three whole blocks and a bit
    r1 = vh.make_request("r1", prompt, BLOCK)
    lookup, blocks = vh.prefill(p, r1, prompt)
    assert lookup == (0, False)  # nothing stored yet
    # The save runs on the connector's sending thread: wait for its objects.
    wait_until(lambda: p.master.metric("master_key_count") >= 3, what="the save of three blocks")
    assert p.sched.request_finished(r1, [b.block_id for b in blocks]) == (False, None)

    r2 = vh.make_request("r2", prompt, BLOCK)
    hit, load_async, blocks2, meta = vh.allocate_hit(p, r2, 4)
    assert (hit, load_async) == (3 * BLOCK, True)
    vh.load(p, r2, meta, load_async)  # until vLLM hears that r2's blocks are loaded
    for name in p.layers:
        for i in range(3):
            assert torch.equal(p.kv[name][blocks[i].block_id], p.kv[name][blocks2[i].block_id]), (name, i)
    # The block after the stored prefix was not loaded over.
    assert not torch.equal(p.kv[p.layers[0]][blocks[3].block_id], p.kv[p.layers[0]][blocks2[3].block_id])


def test_no_space_is_back_pressure_not_an_error(vllm_pair_small):
    """gostore answers -200 (no space) to a save that cannot fit: vLLM's
    connector reads it as back-pressure (it skips the request's saves while
    the store is under pressure), and still releases the request's blocks."""
    p = vllm_pair_small
    prompt = list(range(1, 3 * BLOCK + 5))
    vh.prefill(p, vh.make_request("big", prompt, BLOCK), prompt)
    sender = p.worker.connector_worker.kv_send_thread
    wait_until(lambda: sender._store_pressure_active, what="vLLM to see gostore's -200 as back-pressure")
    assert "big" in sender._skip_store_requests

    def released():
        vh.step(p, p.sched.build_connector_meta(SchedulerOutput.make_empty()))
        return not p.sched.has_pending_push_work()

    wait_until(released, what="the request's blocks released after the refused save")
