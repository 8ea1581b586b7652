"""gostore's own vLLM KV connector (gostore.integrations.vllm): loaded by
vLLM's own connector factory through kv_connector_module_path, and end to
end: real vLLM engine runs on CPU (a tiny Llama with vLLM's dummy
weights, token-id prompts) sharing a prefix through a real gostore-master.
The second engine, in a new process, reports the prefix as cached (from
gostore: its own prefix cache is empty) and generates exactly the tokens
of a run without any cache."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

vllm = pytest.importorskip("vllm", reason="vLLM is not installed here: `make test-engines` installs it")
torch = pytest.importorskip("torch")

import vllm_harness as vh  # noqa: E402

HERE = os.path.dirname(os.path.abspath(__file__))
PROMPT = 100  # three whole blocks of 32, and 4 tokens


def _engine_run(tmp_path, *args: str) -> dict:
    # vLLM leaves its IPC sockets behind: in the test's directory, not /tmp.
    env = dict(os.environ, VLLM_CPU_KVCACHE_SPACE="1", VLLM_RPC_BASE_PATH=str(tmp_path))
    r = subprocess.run([sys.executable, os.path.join(HERE, "vllm_run.py"), *args], env=env, capture_output=True,
                       text=True, timeout=600)
    lines = [ln for ln in r.stdout.splitlines() if ln.startswith("RESULT ")]
    assert r.returncode == 0 and lines, f"vLLM run failed ({r.returncode}):\n{r.stderr[-4000:]}"
    return json.loads(lines[-1][len("RESULT "):])


def test_two_engines_share_a_prefix_and_generate_the_same_tokens(master, client_process_factory, tmp_path):
    client_process_factory(master, segment="64MB")  # a storage node: the pool's memory
    alone = _engine_run(tmp_path, str(PROMPT))
    assert alone["cached"] == 0
    first = _engine_run(tmp_path, "--master", master.addr, str(PROMPT))
    assert first["tokens"] == alone["tokens"]
    assert master.metric("master_key_count") >= 3  # the prompt's three full blocks
    second = _engine_run(tmp_path, "--master", master.addr, str(PROMPT))
    assert second["cached"] == 3 * 32, second  # loaded from gostore
    assert second["tokens"] == alone["tokens"]


def test_a_prompt_prefilled_in_steps_saves_every_block(master, client_process_factory, tmp_path):
    """Chunked prefill: a prompt of 300 tokens prefilled 64 tokens a step
    saves all nine of its full blocks, and the next engine loads them."""
    client_process_factory(master, segment="64MB")
    alone = _engine_run(tmp_path, "--chunk", "64", "300")
    first = _engine_run(tmp_path, "--master", master.addr, "--chunk", "64", "300")
    assert first["tokens"] == alone["tokens"]
    second = _engine_run(tmp_path, "--master", master.addr, "--chunk", "64", "300")
    assert second["cached"] == 9 * 32, second
    assert second["tokens"] == alone["tokens"]


def test_one_workers_blocks_are_loaded_by_another(master, tmp_path, monkeypatch):
    """gostore's connector made by vLLM's factory (kv_connector_module_path)
    and driven step by step as vLLM drives it: a prefill on one worker
    saves the prompt's full blocks; another worker's scheduler finds them
    (synchronously: no async load) and its worker loads them byte for byte;
    a prompt that differs in its first block finds nothing."""
    def pair(tag):
        d = tmp_path / tag
        d.mkdir()
        return vh.open_pair(master.addr, str(d), native=True, segment="64MB", lookup_port=0,
                            patch=monkeypatch.setattr, setenv=monkeypatch.setenv, block=16, blocks=12, layers=3)

    saver, loader = pair("saver"), pair("loader")
    try:
        prompt = list(range(1, 4 * 16 + 2))  # four whole blocks and one token
        lookup, sblocks = vh.prefill(saver, vh.make_request("a", prompt, 16), prompt)
        assert lookup == (0, False)
        assert master.metric("master_key_count") == 4  # stored before wait_for_save returned

        second = vh.make_request("b", prompt, 16)
        hit, load_async, lblocks, meta = vh.allocate_hit(loader, second, 5)
        assert (hit, load_async) == (4 * 16, False)
        vh.load(loader, second, meta, load_async)
        for name in saver.layers:
            for i in range(4):
                assert torch.equal(saver.kv[name][sblocks[i].block_id], loader.kv[name][lblocks[i].block_id])
            assert not torch.equal(saver.kv[name][sblocks[4].block_id], loader.kv[name][lblocks[4].block_id])

        other = [99] + prompt[1:]
        assert loader.sched.get_num_new_matched_tokens(vh.make_request("c", other, 16), 0) == (0, False)
    finally:
        vh.close_pair(saver)
        vh.close_pair(loader)
