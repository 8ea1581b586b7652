"""``mooncake.store`` resolving to gostore, opt-in (gostore.mooncake_alias):
by GOSTORE_AS_MOONCAKE=1 through the installed .pth hook, or by install()
in the process. Each case runs in a fresh interpreter of the test's
virtualenv, as an engine's process would start."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap

import pytest


def _python(code: str, env_extra: dict | None = None, path: str | None = None) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if k != "GOSTORE_AS_MOONCAKE"}
    env.update(env_extra or {})
    if path:
        env["PYTHONPATH"] = path + os.pathsep + env.get("PYTHONPATH", "")
    return subprocess.run([sys.executable, "-c", textwrap.dedent(code)], env=env, capture_output=True,
                          text=True, timeout=120)


def _ok(r: subprocess.CompletedProcess) -> str:
    assert r.returncode == 0, f"exit {r.returncode}\nstdout: {r.stdout}\nstderr: {r.stderr[-3000:]}"
    return r.stdout


@pytest.fixture
def stand_in_mooncake(tmp_path) -> str:
    """A stand-in for an installed Mooncake (its package with a store and an
    engine module that say where they come from): the real wheel is not in
    the test's virtualenv."""
    pkg = tmp_path / "site" / "mooncake"
    pkg.mkdir(parents=True)
    (pkg / "__init__.py").write_text("ORIGIN = 'installed mooncake'\n")
    (pkg / "store.py").write_text("ORIGIN = 'installed mooncake store'\nclass MooncakeDistributedStore: pass\n")
    (pkg / "engine.py").write_text("ORIGIN = 'installed mooncake engine'\n")
    return str(tmp_path / "site")


def test_the_variable_makes_an_engines_import_get_gostore_and_it_stores(master):
    out = _ok(_python(f"""
        from mooncake.store import MooncakeDistributedStore, ReplicateConfig
        import mooncake.store, gostore
        assert MooncakeDistributedStore is gostore.MooncakeDistributedStore
        assert ReplicateConfig is gostore.ReplicateConfig
        missing = [n for n in gostore._MOONCAKE_NAMES + gostore._MOONCAKE_PRIVATE_NAMES
                   if getattr(mooncake.store, n, None) is not getattr(gostore, n)]
        assert not missing, missing
        s = MooncakeDistributedStore()
        assert s.setup("127.0.0.1", "P2PHANDSHAKE", 16 << 20, 16 << 20, "tcp", "", "{master.addr}") == 0
        value = bytes(range(256)) * 300
        assert s.put("alias/k", value) == 0
        assert s.get("alias/k") == value
        s.close()
        print("stored through mooncake.store")
    """, {"GOSTORE_AS_MOONCAKE": "1"}))
    assert "stored through mooncake.store" in out


@pytest.mark.parametrize("value", ["", "0"])
def test_without_the_variable_nothing_changes(value):
    r = _python("import mooncake.store", {"GOSTORE_AS_MOONCAKE": value} if value else None)
    assert r.returncode != 0 and "No module named 'mooncake'" in r.stderr, r.stderr[-2000:]


def test_an_installed_mooncake_keeps_its_other_modules(stand_in_mooncake):
    code = """
        import mooncake, mooncake.engine, mooncake.store, gostore
        print(mooncake.ORIGIN, "|", mooncake.engine.ORIGIN, "|",
              mooncake.store.MooncakeDistributedStore is gostore.MooncakeDistributedStore)
    """
    out = _ok(_python(code, {"GOSTORE_AS_MOONCAKE": "1"}, path=stand_in_mooncake))
    assert out.split() == "installed mooncake | installed mooncake engine | True".split()
    # Not asked: the installed Mooncake is untouched.
    out = _ok(_python("import mooncake.store; print(mooncake.store.ORIGIN)", path=stand_in_mooncake))
    assert out.strip() == "installed mooncake store"


def test_install_in_process_and_undo(stand_in_mooncake):
    out = _ok(_python("""
        import gostore, gostore.mooncake_alias as alias
        alias.install()
        import mooncake.store
        assert mooncake.store.MooncakeDistributedStore is gostore.MooncakeDistributedStore
        assert alias.installed()
        alias.uninstall()
        import importlib
        real = importlib.import_module("mooncake.store")
        print(real.ORIGIN)
        try:
            alias.install()  # the real store is loaded now: refused, with the reason
        except RuntimeError as e:
            print("refused:", "already imported" in str(e))
    """, path=stand_in_mooncake))
    assert out.splitlines() == ["installed mooncake store", "refused: True"]


def test_spawned_workers_inherit_it(tmp_path):
    """Engines start workers with spawn: the variable carries into them."""
    script = tmp_path / "engine.py"
    script.write_text(textwrap.dedent("""
        import multiprocessing as mp

        def probe(q):
            import mooncake.store, gostore
            q.put(mooncake.store.MooncakeDistributedStore is gostore.MooncakeDistributedStore)

        if __name__ == "__main__":
            ctx = mp.get_context("spawn")
            q = ctx.Queue()
            p = ctx.Process(target=probe, args=(q,))
            p.start()
            print("worker sees gostore:", q.get(timeout=60))
            p.join()
    """))
    env = dict(os.environ, GOSTORE_AS_MOONCAKE="1")
    r = subprocess.run([sys.executable, str(script)], env=env, capture_output=True, text=True, timeout=120)
    assert "worker sees gostore: True" in _ok(r)
