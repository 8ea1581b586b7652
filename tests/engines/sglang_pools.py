"""SGLang's real MHA host KV pool over CPU device buffers (page_first), for
the SGLang tests and bench/engines.py alike."""

from __future__ import annotations

import torch
from sglang.srt.mem_cache.device_pool_info import KVBufferLayout, KVBuffers, MHABufferInfo
from sglang.srt.mem_cache.pool_host.mha import MHATokenToKVPoolHost


def mha_host_pool(*, layers: int, heads: int, head_dim: int, page: int, device_tokens: int,
                  dtype: torch.dtype = torch.float32, ratio: float = 1.0, **kw) -> MHATokenToKVPoolHost:
    """A host pool of ``ratio`` times ``device_tokens`` tokens, mirroring
    device buffers that are plain CPU tensors (no GPU, no pinned memory)."""
    k = tuple(torch.zeros(device_tokens, heads, head_dim, dtype=dtype) for _ in range(layers))
    v = tuple(torch.zeros(device_tokens, heads, head_dim, dtype=dtype) for _ in range(layers))
    info = MHABufferInfo(
        buffers=KVBuffers(k=k, v=v, k_data_ptrs=torch.tensor([t.data_ptr() for t in k], dtype=torch.uint64),
                          v_data_ptrs=torch.tensor([t.data_ptr() for t in v], dtype=torch.uint64),
                          layout=KVBufferLayout.NHD),
        page_size=page, head_num=heads, head_dim=head_dim, v_head_dim=head_dim, dtype=dtype,
        device=torch.device("cpu"))
    return MHATokenToKVPoolHost(info, host_to_device_ratio=ratio, host_size=0, page_size=page, layout="page_first",
                                pin_memory=False, device="cpu", device_capacity_tokens=device_tokens,
                                start_layer=0, end_layer=layers - 1, **kw)
