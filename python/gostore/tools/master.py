"""The master: embedded in this process, or the packaged executable.

:class:`EmbeddedMaster` runs a master inside the current process (handy for
tests and single-process use); deployments run the ``gostore-master``
executable, whose path :func:`master_binary_path` gives.
"""

from __future__ import annotations

import os
import weakref
from typing import Any, Optional

from .. import _native
from ..errors import ErrorCode

__all__ = ["EmbeddedMaster", "master_binary_path"]

# The package root (this module sits in gostore/tools/): bin/ is built there,
# beside libgostore.so (setup.py).
_PKG_DIR = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def master_binary_path() -> str:
    """Path of the packaged ``bin/gostore-master`` (``$GOSTORE_MASTER_BIN`` overrides)."""
    return os.environ.get("GOSTORE_MASTER_BIN") or os.path.join(_PKG_DIR, "bin", "gostore-master")


def _flag_value(v: Any) -> str:
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, (list, tuple)):
        return ",".join(_flag_value(x) for x in v)
    return str(v)


def _flag_lines(flags: dict) -> bytes:
    lines = []
    for name, value in flags.items():
        if value is None:
            continue
        s = _flag_value(value)
        if "\n" in s or "\n" in name:
            raise ValueError(f"master flag {name!r} must not contain a newline")
        lines.append(f"--{name}={s}")
    return "\n".join(lines).encode("utf-8")


class EmbeddedMaster:
    """A master running inside this process.

    ``EmbeddedMaster(rpc_port=0, client_ttl=2)`` passes each keyword as the
    command-line flag ``--name=value`` (the ``gostore-master`` flags;
    ``rpc_port=0`` picks a free port). :attr:`address` is the RPC ``"ip:port"``
    to give clients as ``master_server_addr``. Stop it with :meth:`stop` or a
    ``with`` block; it is also stopped when collected and at exit.
    """

    def __init__(self, **flags: Any) -> None:
        args = _flag_lines(flags)
        lib = _native.lib()
        m = lib.gs_master_start(args, len(args))
        if m <= 0:
            raise RuntimeError(
                f"gs_master_start({args.decode()!r}) failed: {m} ({ErrorCode.name_of(m)})"
            )
        self._m = m
        # gs_master_stop is looked up when it runs (a forked child swaps it).
        self._fin = weakref.finalize(self, lambda: lib.gs_master_stop(m))
        self._address = _native.read_string(lib.gs_master_addr, m) or ""
        self._http_address = _native.read_string(lib.gs_master_http_addr, m) or ""

    @property
    def address(self) -> str:
        """``"ip:port"`` of the RPC listener."""
        return self._address

    @property
    def http_address(self) -> str:
        """``"ip:port"`` of the HTTP listener (``/metrics``, ``/health``…)."""
        return self._http_address

    @property
    def running(self) -> bool:
        return self._fin.alive

    def stop(self) -> None:
        """Stop the master (idempotent)."""
        self._fin()

    def __enter__(self) -> "EmbeddedMaster":
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def __repr__(self) -> str:
        state = "running" if self.running else "stopped"
        return f"<EmbeddedMaster {self._address} {state}>"
