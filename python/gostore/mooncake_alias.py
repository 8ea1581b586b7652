"""Make ``mooncake.store`` resolve to gostore, in one process, on request.

Serving engines import Mooncake's store by its module name::

    from mooncake.store import MooncakeDistributedStore

Their code does not change when that name resolves to gostore. Two ways to
ask for it, both opt-in:

* **in the process:** ``import gostore.mooncake_alias;
  gostore.mooncake_alias.install()`` before the engine imports
  ``mooncake.store``;
* **for every process started with the variable set** (engines that spawn
  workers): ``GOSTORE_AS_MOONCAKE=1``. The ``gostore-mooncake-alias.pth``
  file that ``pip install gostore`` puts in site-packages calls
  ``install()`` at interpreter start when the variable is set, and does
  nothing otherwise.

Only ``mooncake.store`` is taken over. A real Mooncake installed beside
gostore keeps its other modules (``mooncake.engine``, ...), and without the
variable or the call nothing changes at all. When no Mooncake is installed,
``mooncake`` itself becomes an empty package holding ``store``.
"""

from __future__ import annotations

import importlib
import importlib.abc
import importlib.machinery
import os
import sys
import types
from typing import Optional, Sequence

#: The environment variable the ``.pth`` hook reads.
ENV_VAR = "GOSTORE_AS_MOONCAKE"

_PARENT = "mooncake"
_STORE = "mooncake.store"


def _gostore_names() -> list:
    import gostore

    return list(gostore._MOONCAKE_NAMES) + list(gostore._MOONCAKE_PRIVATE_NAMES)


class _Loader(importlib.abc.Loader):
    def create_module(self, spec: importlib.machinery.ModuleSpec) -> Optional[types.ModuleType]:
        return None  # the default: a fresh module named as spec says

    def exec_module(self, module: types.ModuleType) -> None:
        if module.__name__ == _PARENT:
            module.__path__ = []  # a package with no files: only store, ours
            module.__doc__ = "Stands in for Mooncake (not installed): only mooncake.store, which is gostore."
            return
        import gostore

        for name in _gostore_names():
            setattr(module, name, getattr(gostore, name))
        module.__all__ = [n for n in gostore._MOONCAKE_NAMES]
        module.__doc__ = "mooncake.store served by gostore (gostore.mooncake_alias)."
        module.__getattr__ = _missing  # type: ignore[attr-defined]


def _missing(name: str):
    raise AttributeError(
        f"mooncake.store (gostore) has no {name!r}: gostore serves the names of Mooncake 0.3.13's store"
    )


class _Finder(importlib.abc.MetaPathFinder):
    """Finds ``mooncake.store`` (always) and ``mooncake`` (when nothing else
    on sys.path provides it)."""

    def find_spec(self, fullname: str, path: Optional[Sequence[str]], target=None):
        if fullname == _STORE:
            return importlib.machinery.ModuleSpec(fullname, _LOADER, origin="gostore")
        if fullname == _PARENT and importlib.machinery.PathFinder.find_spec(fullname) is None:
            return importlib.machinery.ModuleSpec(fullname, _LOADER, origin="gostore", is_package=True)
        return None


_LOADER = _Loader()
_FINDER = _Finder()


def install() -> None:
    """Resolve ``mooncake.store`` to gostore from now on in this process.

    Raises RuntimeError when ``mooncake.store`` was already imported from
    somewhere else (an engine holding the real class would not switch)."""
    loaded = sys.modules.get(_STORE)
    if loaded is not None and getattr(loaded, "__spec__", None) is not None and loaded.__spec__.loader is not _LOADER:
        raise RuntimeError(
            "mooncake.store is already imported from "
            f"{getattr(loaded, '__file__', '?')}: call gostore.mooncake_alias.install() "
            f"(or set {ENV_VAR}=1) before anything imports it"
        )
    if _FINDER not in sys.meta_path:
        sys.meta_path.insert(0, _FINDER)


def uninstall() -> None:
    """Undo install(): later imports find the real Mooncake (or nothing)."""
    if _FINDER in sys.meta_path:
        sys.meta_path.remove(_FINDER)
    for name in (_STORE, _PARENT):
        mod = sys.modules.get(name)
        if mod is not None and getattr(getattr(mod, "__spec__", None), "loader", None) is _LOADER:
            del sys.modules[name]
            if name == _STORE and _PARENT in sys.modules and getattr(sys.modules[_PARENT], "store", None) is mod:
                delattr(sys.modules[_PARENT], "store")


def installed() -> bool:
    """Whether ``mooncake.store`` resolves to gostore in this process."""
    return _FINDER in sys.meta_path


def install_if_asked() -> None:
    """The ``.pth`` hook: install() when GOSTORE_AS_MOONCAKE is set to
    anything but empty or 0."""
    if os.environ.get(ENV_VAR, "") not in ("", "0"):
        install()
