"""Which UCX library the Go side loads for the UCX route (docs/ucx.md).

The Go binding (``gostore/ucx``) opens ``libucp.so.0`` itself, at run time,
from ``$GOSTORE_LIBUCX`` when set and else by the loader's search. This
module only decides, before ``libgostore.so`` loads, whether that variable
should point at the UCX that ``pip install gostore[ucx]`` brought (PyPI's
``libucx-cu12`` wheel). First found wins:

1. ``$GOSTORE_LIBUCX`` set by the user: left alone.
2. A ``libucp.so.0`` the system's loader finds (``LD_LIBRARY_PATH``, the
   ``ld.so.conf`` directories, the default ones): the host's or cluster's
   UCX, usually built for its NICs (verbs) and GPUs. Nothing is set; Go's
   ``dlopen("libucp.so.0")`` finds the same file.
3. The ``libucx`` wheel's ``lib/libucp.so.0``: its libraries are preloaded
   with the wheel's own ``load_library()`` (so ``libucs``/``libuct`` resolve
   to the wheel's copies whatever its RPATH says), and ``GOSTORE_LIBUCX``
   names the file.

Nothing here loads the system's UCX: the search only looks for the file, so
a process that never uses the route does not run UCX's constructors. Where
none is found the variable stays unset and Go reports why the route is off
(``transport_info()["ucx"]["reason"]``).
"""

from __future__ import annotations

import glob
import importlib.util
import logging
import os
from typing import Callable, Iterable, List, Optional

__all__ = ["ENV", "SONAME", "choose_library", "system_library", "wheel_library"]

ENV = "GOSTORE_LIBUCX"
SONAME = "libucp.so.0"
WHEEL = "libucx"  # the import name of PyPI's libucx-cu12 / libucx-cu13

_log = logging.getLogger("gostore")

# The loader's built-in directories (after LD_LIBRARY_PATH and ld.so.cache).
_DEFAULT_DIRS = ("/lib64", "/usr/lib64", "/lib", "/usr/lib",
                 "/lib/x86_64-linux-gnu", "/usr/lib/x86_64-linux-gnu",
                 "/lib/aarch64-linux-gnu", "/usr/lib/aarch64-linux-gnu")


def _conf_dirs(path: str, root: str, seen: set) -> List[str]:
    """Directories listed by an ld.so.conf file, following ``include``."""
    if path in seen:
        return []
    seen.add(path)
    try:
        with open(path) as f:
            lines = f.read().splitlines()
    except OSError:
        return []
    dirs: List[str] = []
    for line in lines:
        line = line.split("#", 1)[0].strip()
        if not line:
            continue
        if line.startswith("include"):
            pat = line[len("include"):].strip()
            if not pat.startswith("/"):
                pat = os.path.join(os.path.dirname(path), pat)
            elif root != "/":
                pat = os.path.join(root, pat.lstrip("/"))
            for inc in sorted(glob.glob(pat)):
                dirs += _conf_dirs(inc, root, seen)
        elif not line.startswith("hwcap"):
            dirs.append(line)
    return dirs


def _search_dirs(env: dict, root: str) -> Iterable[str]:
    for d in env.get("LD_LIBRARY_PATH", "").split(":"):
        if d:
            yield d
    conf = os.path.join(root, "etc", "ld.so.conf")
    for d in _conf_dirs(conf, root, set()) + list(_DEFAULT_DIRS):
        yield d if root == "/" else os.path.join(root, d.lstrip("/"))


def system_library(env: Optional[dict] = None, root: str = "/") -> str:
    """The path of the ``libucp.so.0`` the loader would find, or ``""``
    (``root``: the file system to look in, for tests)."""
    env = os.environ if env is None else env
    for d in _search_dirs(env, root):
        p = os.path.join(d, SONAME)
        if os.path.isfile(p):
            return p
    return ""


def wheel_library(find_spec: Callable = importlib.util.find_spec) -> str:
    """The ``libucp.so.0`` inside an installed ``libucx`` wheel, or ``""``.
    The package is located without importing it."""
    try:
        spec = find_spec(WHEEL)
    except (ImportError, ValueError):
        return ""
    if spec is None or not spec.submodule_search_locations:
        return ""
    for d in spec.submodule_search_locations:
        p = os.path.join(d, "lib", SONAME)
        if os.path.isfile(p):
            return p
    return ""


def _preload_wheel() -> None:
    """The wheel's own loader: its libucs/libuct/libucp in the process (RTLD_LOCAL),
    so that the dlopen of its libucp resolves them to these files."""
    import libucx  # type: ignore[import-not-found]

    libucx.load_library()


def choose_library(env: Optional[dict] = None, root: str = "/",
                   find_spec: Callable = importlib.util.find_spec,
                   preload: Callable[[], None] = _preload_wheel) -> str:
    """Apply the order above to ``env`` (``os.environ``: before the native
    library loads). Returns where the library comes from: ``"env"``,
    ``"system"``, ``"wheel"`` or ``""`` (none found; Go says why)."""
    env = os.environ if env is None else env
    if env.get(ENV):
        return "env"
    if system_library(env, root):
        return "system"
    lib = wheel_library(find_spec)
    if not lib:
        return ""
    try:
        preload()
    except Exception as e:  # a broken wheel: Go's dlopen will say what is missing
        _log.warning("gostore: preloading the libucx wheel's libraries failed: %s", e)
    env[ENV] = lib
    return "wheel"
