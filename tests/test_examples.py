"""The scripts in examples/ run as a user would run them."""

from __future__ import annotations

import os
import subprocess
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def test_nano_prefill_decode_example():
    """The Nano Mooncake seed's §14: a plan on the decode rank, the KV
    written straight into its memory, committed, read back and verified."""
    out = subprocess.run([sys.executable, os.path.join(ROOT, "examples", "nano_prefill_decode.py")],
                         capture_output=True, text=True, timeout=120, cwd=ROOT)
    assert out.returncode == 0, out.stdout + out.stderr
    assert "bytes verified" in out.stdout, out.stdout
    assert "plan: rank 0, 16 pages" in out.stdout, out.stdout
