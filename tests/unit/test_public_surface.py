"""The package's public surface, pinned: what ``gostore`` and ``mooncake.store``
export, and every module path a user can name (README.md, docs/*.md, the
console scripts, the Makefile, bench/, tools/, .ci/, examples/) still
resolves. The package is laid out in subpackages by role (store, standalone,
tensors, buffers, tools); moving a module inside it must change none of this.
Pure Python: nothing here loads libgostore.so."""

from __future__ import annotations

import importlib
import importlib.util
import os
import re
import subprocess
import sys
import textwrap
import types

import pytest

import gostore

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

# Every public name of ``gostore`` (its submodules aside), as released: a name
# dropped or added here is a change of the API, to be made on purpose.
GOSTORE_PUBLIC = """
ACTIVATION BufferHandle BufferLease BufferLeaseView BufferPool COMPLETE Descriptor DiskDescriptor
EmbeddedMaster EngramStore EngramStoreConfig ErrorCode FAILED GENERAL GRADIENT GostoreBuffer
INITIALIZED KVCACHE METADATA MemoryDescriptor MooncakeDistributedNoFRegister MooncakeDistributedStore
MooncakeHostMemAllocator NanoKVCache OPTIMIZER_STATE ObjMeta ObjectDataType PENDING PROCESSING
ParallelAxis PlanError PlanNotReady QueryTaskResponse REMOVED REPLICA_COPY REPLICA_MOVE ReadTarget
RegisteredBufferLease RegisteredBufferLeaseView RegisteredBufferPool ReplicaDescriptor ReplicaStatus
ReplicateConfig SAMPLE SUCCESS SoftPinAction TENSOR TaskStatus TaskType TensorParallelism UNDEFINED
UNKNOWN WEIGHT WritePlan bind_to_numa_node get_alloc_func_addr get_free_func_addr gpu_info
master_binary_path plan_address topology
""".split()

# The underscore names other code calls: Mooncake's structured-object store
# (through mooncake.store) and mooncake_alias.
GOSTORE_PRIVATE = ["_MOONCAKE_NAMES", "_MOONCAKE_PRIVATE_NAMES", "_deserialize_tensor", "_serialize_tensor",
                   "_tensor_metadata_size", "__version__", "__all__"]

# gostore.__all__, in its order (``from gostore import *``).
GOSTORE_ALL = """
MooncakeDistributedStore ReplicateConfig SoftPinAction ObjectDataType ReplicaStatus ReplicaDescriptor
MemoryDescriptor DiskDescriptor Descriptor TaskType TaskStatus QueryTaskResponse BufferHandle
MooncakeHostMemAllocator BufferPool BufferLease BufferLeaseView RegisteredBufferPool RegisteredBufferLease
RegisteredBufferLeaseView TensorParallelism ParallelAxis ReadTarget EngramStore EngramStoreConfig
MooncakeDistributedNoFRegister bind_to_numa_node get_alloc_func_addr get_free_func_addr UNKNOWN KVCACHE
TENSOR WEIGHT SAMPLE ACTIVATION GRADIENT OPTIMIZER_STATE METADATA GENERAL UNDEFINED INITIALIZED PROCESSING
COMPLETE REMOVED FAILED REPLICA_COPY REPLICA_MOVE PENDING SUCCESS ErrorCode EmbeddedMaster GostoreBuffer
master_binary_path gpu_info topology NanoKVCache WritePlan ObjMeta PlanError PlanNotReady plan_address
__version__
""".split()

# What ``mooncake.store`` (gostore.mooncake_alias) holds, dunders aside.
MOONCAKE_STORE = """
ACTIVATION BufferHandle BufferLease BufferLeaseView BufferPool COMPLETE Descriptor DiskDescriptor
EngramStore EngramStoreConfig FAILED GENERAL GRADIENT INITIALIZED KVCACHE METADATA MemoryDescriptor
MooncakeDistributedNoFRegister MooncakeDistributedStore MooncakeHostMemAllocator OPTIMIZER_STATE
ObjectDataType PENDING PROCESSING ParallelAxis QueryTaskResponse REMOVED REPLICA_COPY REPLICA_MOVE
ReadTarget RegisteredBufferLease RegisteredBufferLeaseView RegisteredBufferPool ReplicaDescriptor
ReplicaStatus ReplicateConfig SAMPLE SUCCESS SoftPinAction TENSOR TaskStatus TaskType TensorParallelism
UNDEFINED UNKNOWN WEIGHT _deserialize_tensor _serialize_tensor _tensor_metadata_size bind_to_numa_node
get_alloc_func_addr get_free_func_addr
""".split()


def _public_names(module: types.ModuleType) -> set:
    # Submodules are module paths (checked below), not names; ``annotations``
    # is the __future__ feature the package's __init__ imports.
    return {n for n in dir(module) if not n.startswith("_") and n != "annotations"
            and not isinstance(getattr(module, n), types.ModuleType)}


def test_gostore_exports_exactly_its_public_names():
    names = _public_names(gostore)
    assert sorted(names - set(GOSTORE_PUBLIC)) == [], "new public names: record them here if meant"
    assert sorted(set(GOSTORE_PUBLIC) - names) == [], "public names gone from gostore"
    missing = [n for n in GOSTORE_PRIVATE if not hasattr(gostore, n)]
    assert missing == []
    assert list(gostore.__all__) == GOSTORE_ALL
    ns: dict = {}
    exec("from gostore import *", ns)
    assert all(ns[n] is getattr(gostore, n) for n in GOSTORE_ALL)


def test_mooncake_store_holds_the_same_names_and_objects():
    # A fresh interpreter: install() changes how this one imports.
    code = textwrap.dedent(f"""
        import gostore, gostore.mooncake_alias
        gostore.mooncake_alias.install()
        import mooncake.store as m
        names = sorted(n for n in dir(m) if not n.startswith("__"))
        assert names == {sorted(MOONCAKE_STORE)!r}, names
        assert all(getattr(m, n) is getattr(gostore, n) for n in names)
        assert m.__all__ == list(gostore._MOONCAKE_NAMES)
        print("same", len(names))
    """)
    env = {k: v for k, v in os.environ.items() if k != "GOSTORE_AS_MOONCAKE"}
    r = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=120)
    assert r.returncode == 0 and r.stdout.split() == ["same", str(len(MOONCAKE_STORE))], r.stderr[-3000:]


# Where users read module paths.
_NAMED_IN = ["README.md", "Makefile", "pyproject.toml", "docs", "bench", "tools", ".ci", "examples"]
# ``gostore.x.y`` on its own (not ``libgostore.so``, not LMCache's
# ``remote_storage_plugin.gostore.url`` keys, not file names such as ``gostore.h``).
_PATH = re.compile(r"(?<![\w./-])gostore(?:\.[A-Za-z_]\w*)+")
_NOT_PATHS = {"gostore.h", "gostore.so"}


def _named_paths() -> dict:
    found: dict = {}
    for top in _NAMED_IN:
        full = os.path.join(ROOT, top)
        files = [full] if os.path.isfile(full) else [
            os.path.join(d, f) for d, _dirs, fs in os.walk(full) for f in fs
            if f.endswith((".md", ".py", ".sh", ".toml", ".yml", ".yaml", ".txt", ".json")) or "." not in f]
        for path in files:
            if "results" in os.path.basename(path):
                continue  # bench output
            try:
                text = open(path, encoding="utf-8").read()
            except (UnicodeDecodeError, OSError):
                continue
            for m in _PATH.finditer(text):
                name = m.group(0)
                if name not in _NOT_PATHS:
                    found.setdefault(name, os.path.relpath(path, ROOT))
    return found


def _resolve(dotted: str) -> str:
    """Import the longest module prefix of ``dotted`` and get the rest as
    attributes; an integration whose engine is not installed here is
    checked to exist as a file. Returns what was found, or raises."""
    parts = dotted.split(".")
    for i in range(len(parts), 0, -1):
        mod = ".".join(parts[:i])
        try:
            spec = importlib.util.find_spec(mod)
        except ModuleNotFoundError:
            continue
        if spec is None:
            continue
        try:
            obj = importlib.import_module(mod)
        except ModuleNotFoundError as e:
            if e.name and not e.name.startswith("gostore"):
                return f"module {mod} (its engine {e.name} is not installed here)"
            raise
        for attr in parts[i:]:
            obj = getattr(obj, attr)
        return f"module {mod}" + (f", attribute {'.'.join(parts[i:])}" if parts[i:] else "")
    raise ModuleNotFoundError(dotted)


def test_every_module_path_named_for_users_resolves():
    paths = _named_paths()
    # The scan does find them (a guard against a regex that matches nothing).
    for known in ("gostore.mooncake_alias", "gostore.standalone.CROSS_MEMORY", "gostore._places.IDLE_S",
                  "gostore.demo", "gostore.client_server", "gostore.integrations.vllm"):
        assert known in paths, f"{known} is no longer named anywhere users read: update this test"
    broken = []
    for dotted, where in sorted(paths.items()):
        try:
            _resolve(dotted)
        except (ImportError, AttributeError) as e:
            broken.append(f"{where}: {dotted}: {type(e).__name__}: {e}")
    assert not broken, "module paths named for users that no longer resolve:\n" + "\n".join(broken)


def test_every_package_file_named_for_users_exists():
    # README.md and docs/ point readers at files of the package ("tensors/codec.py
    # describes the format"): a moved file is renamed there too.
    named = set()
    for path in [os.path.join(ROOT, "README.md")] + [
            os.path.join(ROOT, "docs", f) for f in os.listdir(os.path.join(ROOT, "docs")) if f.endswith(".md")]:
        named |= set(re.findall(r"python/gostore/[\w/]+\.py", open(path, encoding="utf-8").read()))
    assert named, "the scan found no file: update this test"
    assert sorted(p for p in named if not os.path.isfile(os.path.join(ROOT, p))) == []


def test_console_scripts_name_functions():
    text = open(os.path.join(ROOT, "pyproject.toml"), encoding="utf-8").read()
    section = text.split("[project.scripts]", 1)[1].split("\n[", 1)[0]
    scripts = dict(re.findall(r'^([\w-]+)\s*=\s*"([\w.]+:\w+)"', section, re.M))
    assert set(scripts) == {"gostore-master", "gostore-client"}
    for name, target in scripts.items():
        mod, func = target.split(":")
        assert callable(getattr(importlib.import_module(mod), func)), name


# Module paths kept where a module moved into a subpackage: each old name is
# the very module object of the new path, so a setting written through the
# old name (docs/standalone.md: ``gostore._places.IDLE_S``) is the one read.
MOVED = {
    "gostore._places": "gostore.standalone.places",
    "gostore.client_server": "gostore.standalone.server",
    "gostore.demo": "gostore.tools.demo",
}


@pytest.mark.parametrize("old", sorted(MOVED))
def test_an_old_module_path_is_the_new_module(old):
    new = importlib.import_module(MOVED[old])
    assert importlib.import_module(old) is new
    assert sys.modules[old] is new


def test_a_setting_through_an_old_path_is_the_one_read(monkeypatch):
    import gostore._places as old
    from gostore.standalone import places

    monkeypatch.setattr(old, "IDLE_S", 1234.5)
    assert places.IDLE_S == 1234.5


@pytest.mark.parametrize("module", ["gostore.client_server", "gostore.demo"])
def test_python_dash_m_still_runs(module):
    r = subprocess.run([sys.executable, "-m", module, "--help"], capture_output=True, text=True, timeout=60)
    assert r.returncode == 0 and "usage" in r.stdout.lower(), r.stdout + r.stderr[-2000:]
