"""One vLLM engine run (CPU, a tiny Llama made from vllm_model/config.json
with vLLM's dummy weights, token-id prompts, no tokenizer), optionally with
gostore's KV connector (the engine contributes no memory: the blocks live
in the storage nodes' segments and outlive the engine); prints one JSON line: the tokens generated and
the prompt tokens vLLM reports as cached.

    python vllm_run.py [--master HOST:PORT] [--chunk TOKENS] PROMPT_LEN
"""

import json
import os
import sys

if __name__ == "__main__":
    from vllm import LLM, SamplingParams
    from vllm.inputs import TokensPrompt

    args = sys.argv[1:]
    master, chunk = None, None
    if args[0] == "--master":
        master, args = args[1], args[2:]
    if args[0] == "--chunk":  # max_num_batched_tokens: a long prompt is prefilled in steps
        chunk, args = int(args[1]), args[2:]
    prompt = [3 + (i * 7) % 250 for i in range(int(args[0]))]
    kw = {}
    if master:
        kw["kv_transfer_config"] = {
            "kv_connector": "GostoreConnector", "kv_connector_module_path": "gostore.integrations.vllm",
            "kv_role": "kv_both",
            "kv_connector_extra_config": {"master_server_address": master, "global_segment_size": 0,
                                          "local_buffer_size": "16mb"}}
    llm = LLM(model=os.path.join(os.path.dirname(os.path.abspath(__file__)), "vllm_model"), load_format="dummy",
              skip_tokenizer_init=True, block_size=32, max_model_len=512, enforce_eager=True, dtype="float32",
              seed=0, gpu_memory_utilization=0.05, **({"max_num_batched_tokens": chunk} if chunk else {}), **kw)
    out = llm.generate([TokensPrompt(prompt_token_ids=prompt)],
                       SamplingParams(max_tokens=16, temperature=0, detokenize=False))[0]
    print("RESULT " + json.dumps({"tokens": list(out.outputs[0].token_ids), "cached": out.num_cached_tokens}),
          flush=True)
