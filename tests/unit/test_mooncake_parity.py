"""gostore's value types behave as mooncake.store's: the same ~400 calls
(parity_probe.py) run under both, and every outcome -- a value's repr, or
the type of the exception -- must be the same.

Needs the Mooncake wheel: either importable here, or in the interpreter
named by ``GOSTORE_MOONCAKE_PYTHON`` (say ``/path/to/venv/bin/python`` with
``mooncake-transfer-engine`` installed). Skipped otherwise; the behaviour
itself is pinned by test_types.py without the wheel.
"""

from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys

import pytest

import gostore

PROBE = os.path.join(os.path.dirname(os.path.abspath(__file__)), "parity_probe.py")


def _mooncake_python():
    if importlib.util.find_spec("mooncake") is not None:
        return sys.executable
    return os.environ.get("GOSTORE_MOONCAKE_PYTHON") or None


def _run(python: str, module: str, env: dict) -> list:
    p = subprocess.run([python, PROBE, module], capture_output=True, text=True, env=env,
                       timeout=120)
    assert p.returncode == 0, f"{python} {PROBE} {module}:\n{p.stderr[-3000:]}"
    return json.loads(p.stdout.strip().splitlines()[-1])


def test_value_types_match_the_wheel():
    python = _mooncake_python()
    if python is None:
        pytest.skip("mooncake.store is not importable here and GOSTORE_MOONCAKE_PYTHON is not set")
    env = dict(os.environ)
    ours_env = dict(env, PYTHONPATH=os.path.dirname(os.path.dirname(gostore.__file__)))
    ours = _run(sys.executable, "gostore", ours_env)
    theirs = _run(python, "mooncake.store", {k: v for k, v in env.items() if k != "PYTHONPATH"})
    assert len(theirs) > 300 and [e[0] for e in ours] == [e[0] for e in theirs]
    diffs = [(o[0], o[1:], t[1:]) for o, t in zip(ours, theirs) if o[1:] != t[1:]]
    assert diffs == [], "\n".join(f"{label}: gostore {o} / mooncake {t}" for label, o, t in diffs)


HEADER_PROBE = os.path.join(os.path.dirname(os.path.abspath(__file__)), "tensor_header_probe.py")


def test_tensor_headers_are_the_wheels_byte_for_byte(tmp_path):
    """The 304-byte tensor header gostore writes is the wheel's, byte for
    byte, for every dtype; both read each other's; bad input fails with
    the same exception types. Runs both under the wheel's Python (it needs
    torch), gostore through a path holding only its package."""
    python = _mooncake_python()
    if python is None:
        pytest.skip("mooncake.store is not importable here and GOSTORE_MOONCAKE_PYTHON is not set")
    check = subprocess.run([python, "-c", "import torch"], capture_output=True)
    if check.returncode != 0:
        pytest.skip("the wheel's Python has no torch")
    (tmp_path / "gostore").symlink_to(os.path.dirname(gostore.__file__))
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    runs = {}
    for module, extra in (("mooncake.store", {}), ("gostore", {"PYTHONPATH": str(tmp_path)})):
        p = subprocess.run([python, HEADER_PROBE, module], capture_output=True, text=True,
                           env=dict(env, **extra), timeout=120)
        assert p.returncode == 0, f"{module}:\n{p.stderr[-3000:]}"
        runs[module] = json.loads(p.stdout.strip().splitlines()[-1])
    ours, theirs = runs["gostore"], runs["mooncake.store"]
    assert len(theirs) >= 15 and [e[:3] for e in ours] == [e[:3] for e in theirs]  # headers, sizes
    # Every round trip gives the tensor back here. (The wheel reads a 0-d
    # tensor back with shape [1]; its header is the same as ours.)
    assert all(e[3] is True for e in ours if len(e) == 4)
    assert [e for e in ours if len(e) == 4 and e[0] != "0-d"] == [e for e in theirs if len(e) == 4 and e[0] != "0-d"]
