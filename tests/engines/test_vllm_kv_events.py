"""vLLM's own KV event classes decode the master's KV events
(--enable_kv_events): kv_events_engines.py."""

from __future__ import annotations

import pytest

pytest.importorskip("vllm", reason="vLLM is not installed here: `make test-engines` installs it")

from vllm.distributed.kv_events import (  # noqa: E402
    AllBlocksCleared,
    BlockRemoved,
    BlockStored,
    KVEventBatch,
)

from kv_events_engines import check_engine_decodes  # noqa: E402


def test_vllm_decodes_the_masters_kv_events(launcher):
    check_engine_decodes(launcher, KVEventBatch, BlockStored, BlockRemoved, AllBlocksCleared)
