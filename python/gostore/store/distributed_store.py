"""``MooncakeDistributedStore``: the Mooncake-compatible client.

This module only checks Python types, packs arguments into the flat arrays of
the C ABI (``bindings/ABI.md``) and maps results; every store decision is made
in Go. Conventions (``PYTHON_API.md``):

* methods return ints -- ``0``/a count/a size on success, a negative
  :class:`~gostore.ErrorCode` on failure -- and never raise for store-level
  failures; ``TypeError`` is raised for arguments of the wrong type;
* values that are well typed but cannot be valid (empty key, empty value,
  negative or > 2**64-1 pointers and sizes, batch lists of different lengths)
  give ``-600`` (INVALID_PARAMS) without reaching native code;
* every native call releases the GIL; a store is usable from many threads (the
  only mutable Python state is the lazily created native handle, created once
  under a lock).
"""

from __future__ import annotations

import ctypes
import json
import logging
import operator
import threading
import weakref
from array import array
from typing import Any, Callable, ContextManager, Dict, List, Optional, Sequence, Tuple

from .. import _native
from ..buffers.pins import PRIVATE_SCRATCH, SCRATCH_BYTES, BufferPins, new_bytes, packed_hits, scratch_buffer
from ..buffers.heap import keep_freed_results
from ..buffers.buffer import GostoreBuffer, wrap as _wrap_buffer
from ..config import ReplicateConfig
from .._args import (
    _INVALID,
    _addr,
    _bool,
    _config,
    _int,
    _ints,
    _key,
    _keys,
    _pack_keys,
    _segment_name,
    _seq,
    _size_arg,
    _str_arg,
    _tname,
    _u64,
)
from .tensor_api import TensorAPI
from .parallel_api import ParallelTensorAPI
from .session_api import SessionAPI
from .segment_api import SegmentAPI
from ..errors import ErrorCode
from .tasks import NO_TASK_ID, QueryTaskResponse, TaskId, task_id_from_native, task_id_to_native
from ..tensors.codec import DeviceSpan

__all__ = ["MooncakeDistributedStore"]

_log = logging.getLogger("gostore")

_MISSING: Any = object()
_TASK_ID_CAP = 128  # task ids are decimal uint64s
_QUERY_TASK_MAX_CAP = 1 << 26

# Dict-form setup() defaults (PYTHON_API.md).
_DEFAULT_SIZE = 16 * 1024 * 1024
_DEFAULT_MASTER = "127.0.0.1:50051"
_DEFAULT_LOCAL_HOSTNAME = "127.0.0.1"
_DEFAULT_METADATA = "P2PHANDSHAKE"

# get() copies values up to this size through the thread's scratch buffer
# (gostore.buffers.pins.scratch_buffer; get_batch() fills SCRATCH_BYTES of a
# scratch from _scratch()).
_SCRATCH = 64 * 1024
_MAY_BE_DEVICE = _native.MAY_BE_DEVICE


# setup()'s parameters in Mooncake's positional order: the first seven are
# required; Go applies Mooncake's defaults to the others when left out.
_SETUP_NAMES = (
    "local_hostname",
    "metadata_server",
    "global_segment_size",
    "local_buffer_size",
    "protocol",
    "rdma_devices",
    "master_server_addr",
    "engine",
    "enable_ssd_offload",
    "ssd_offload_path",
    "tenant_id",
    "enable_client_http_server",
    "client_http_port",
)

# setup(**kwargs) accepted beyond Mooncake's parameters: gostore extensions,
# keyword only.
_SETUP_EXTRA_KWARGS = (
    "cluster_id",
    "segment_location",
    "log_level",
    "put_space_wait_ms",
    "rpc_timeout_ms",
    "rpc_connect_timeout_ms",
    "close_timeout_ms",
    "auth_secret_file",
    "tls_ca_file",
    "tls_cert_file",
    "tls_key_file",
    "allow_insecure",
)

# The extensions that name files: strings, checked by Go.
_AUTH_FILE_KEYS = ("auth_secret_file", "tls_ca_file", "tls_cert_file", "tls_key_file")

_INT32 = (-(2**31), 2**31 - 1)

for _code in ("I", "Q", "q", "i"):  # the ABI's uint32/uint64/int64/int32 arrays
    assert array(_code).itemsize == {"I": 4, "Q": 8, "q": 8, "i": 4}[_code]


def _setup_params(args: Tuple[Any, ...], kwargs: Dict[str, Any]) -> Dict[str, Any]:
    """Validate setup()'s arguments into the JSON object of ``gs_setup``.

    Raises TypeError where Mooncake's binding does; never touches the
    native library. Arguments left at their defaults are not sent: Go
    applies the same defaults.
    """
    names = _SETUP_NAMES
    if len(args) > len(names):
        raise TypeError(
            f"setup() takes at most {len(names)} positional arguments ({len(args)} given)"
        )
    # setup(config: dict) / setup(config=dict)
    if (len(args) == 1 and isinstance(args[0], dict) and not kwargs) or (
        not args and set(kwargs) == {"config"}
    ):
        cfg = args[0] if args else kwargs["config"]
        if not isinstance(cfg, dict):
            raise TypeError(f"setup(config=...) must be a dict, not {_tname(cfg)}")
        return _setup_from_dict(cfg)

    given: Dict[str, Any] = dict(zip(names, args))
    for k, v in kwargs.items():
        if k in given:
            raise TypeError(f"setup() got multiple values for argument {k!r}")
        if k not in names and k not in _SETUP_EXTRA_KWARGS:
            raise TypeError(f"setup() got an unexpected keyword argument {k!r}")
        given[k] = v
    missing = [n for n in names[:7] if n not in given]
    if missing:
        raise TypeError(
            "setup() missing required argument(s): " + ", ".join(repr(m) for m in missing)
        )
    params: Dict[str, Any] = {
        "local_hostname": _str_arg(given["local_hostname"], "local_hostname"),
        "metadata_server": _str_arg(given["metadata_server"], "metadata_server"),
        "global_segment_size": _size_arg(given["global_segment_size"], "global_segment_size"),
        "local_buffer_size": _size_arg(given["local_buffer_size"], "local_buffer_size"),
        "protocol": _str_arg(given["protocol"], "protocol"),
        "rdma_devices": _str_arg(given["rdma_devices"], "rdma_devices"),
        "master_server_addr": _str_arg(given["master_server_addr"], "master_server_addr"),
    }
    # ``engine`` (Mooncake: a TransferEngine to share) is accepted and unused:
    # gostore's client owns its transfer engine.
    for k in ("enable_ssd_offload", "enable_client_http_server"):
        if k in given:
            params[k] = _setup_bool(given[k], k)
    for k in ("ssd_offload_path", "tenant_id"):
        if k in given:
            params[k] = _str_arg(given[k], k)
    if "client_http_port" in given:
        params["client_http_port"] = _setup_int32(given["client_http_port"], "client_http_port")
    _add_extra_params(params, given)
    return params


def _setup_bool(x: Any, what: str) -> bool:
    """A bool parameter of setup() as Mooncake's binding converts it: None
    is False, and any object whose type defines truth (``__bool__``: ints,
    floats, numpy scalars) converts; others (str, list) raise TypeError."""
    if x is None:
        return False
    if isinstance(x, bool) or hasattr(type(x), "__bool__"):
        return bool(x)
    raise TypeError(f"{what} must be bool, not {_tname(x)}")


def _setup_int32(x: Any, what: str) -> int:
    """An int parameter of setup(): an integer (numpy's too; not a float)
    that fits a C int, else TypeError, as Mooncake's binding checks it."""
    try:
        v = operator.index(x)
    except TypeError:
        raise TypeError(f"{what} must be int, not {_tname(x)}") from None
    if not _INT32[0] <= v <= _INT32[1]:
        raise TypeError(f"{what} must fit a 32-bit int, got {v}")
    return v


def _add_extra_params(params: Dict[str, Any], src: Dict[str, Any]) -> None:
    """The gostore extensions of setup(); Go checks their values."""
    for k in ("cluster_id", "segment_location", "log_level", *_AUTH_FILE_KEYS):
        if src.get(k) is not None:
            params[k] = _str_arg(src[k], k)
    if src.get("allow_insecure") is not None:
        params["allow_insecure"] = _setup_bool(src["allow_insecure"], "allow_insecure")
    for k in ("put_space_wait_ms", *_BOUND_KEYS):
        if src.get(k) is not None:
            v = src[k]
            if isinstance(v, bool) or not isinstance(v, int):
                raise TypeError(f"{k} must be int, not {_tname(v)}")
            params[k] = v


# The bounds of the calls that wait on the network, in milliseconds
# (docs/python-api.md#timeouts-and-ctrl-c); Go checks their values.
_BOUND_KEYS = ("rpc_timeout_ms", "rpc_connect_timeout_ms", "close_timeout_ms")


def _setup_from_dict(cfg: Dict[str, Any]) -> Dict[str, Any]:
    """setup(config: dict). Keys Mooncake does not know are ignored, as it
    ignores them; ``device_name`` and ``master_server_address`` are read as
    ``rdma_devices`` and ``master_server_addr``."""

    def pick(*keys: str, default: Any) -> Any:
        for k in keys:
            if k in cfg and cfg[k] is not None:
                return cfg[k]
        return default

    params: Dict[str, Any] = {
        "local_hostname": _str_arg(
            pick("local_hostname", default=_DEFAULT_LOCAL_HOSTNAME), "local_hostname"
        ),
        "metadata_server": _str_arg(
            pick("metadata_server", default=_DEFAULT_METADATA), "metadata_server"
        ),
        "global_segment_size": _size_arg(
            pick("global_segment_size", default=_DEFAULT_SIZE), "global_segment_size"
        ),
        "local_buffer_size": _size_arg(
            pick("local_buffer_size", default=_DEFAULT_SIZE), "local_buffer_size"
        ),
        "protocol": _str_arg(pick("protocol", default="tcp"), "protocol"),
        "rdma_devices": _str_arg(pick("device_name", "rdma_devices", default=""), "device_name"),
        "master_server_addr": _str_arg(
            pick("master_server_address", "master_server_addr", default=_DEFAULT_MASTER),
            "master_server_address",
        ),
    }
    if cfg.get("ssd_offload_path") is not None:
        params["ssd_offload_path"] = _str_arg(cfg["ssd_offload_path"], "ssd_offload_path")
    # Mooncake reads these keys from the text of any value: Go does the same
    # with what is passed here (a bool or an int as it is, anything else as
    # its str()), so "yes", 1 or "9301" work and a port of "x" is -600.
    for k in ("tenant_id", "ipc_socket_path"):
        if cfg.get(k) is not None:
            params[k] = cfg[k] if isinstance(cfg[k], str) else str(cfg[k])
    for k in ("enable_ssd_offload", "enable_client_http_server"):
        if cfg.get(k) is not None:
            v = cfg[k]
            params[k] = v if isinstance(v, bool) else str(v)
    if "client_http_port" in cfg:
        v = cfg["client_http_port"]
        params["client_http_port"] = v if type(v) is int else str(v)
    _add_extra_params(params, cfg)
    return params


# --------------------------------------------------------------------------
# the native handle


class _Handle:
    """Owns one ``gs_store_new`` handle; ``gs_store_free`` when collected.

    Buffers returned by ``get_buffer`` reference this object (not the store),
    so the handle outlives every buffer whose memory it owns.
    """

    __slots__ = ("h", "lib", "_fin", "__weakref__")

    def __init__(self, lib: Any) -> None:
        self.lib = lib  # the native library, or a RemoteLibrary in standalone mode
        h = lib.gs_store_new()
        if h <= 0 and not _native.forked():  # a forked child's calls all fail: -1 here too
            raise RuntimeError(f"gs_store_new failed: {ErrorCode.name_of(h)}")
        self.h = h
        # Also runs at interpreter exit (atexit), while the Go runtime is still
        # alive: a clean exit unmounts this client's segment. The function is
        # looked up when it runs: a forked child has swapped it (_native).
        self._fin = weakref.finalize(self, _free_store, lib, h)


def _free_store(lib: Any, h: int) -> None:
    lib.gs_store_free(h)


def _flat_batch_fast(keys: Any, ptrs: Any, sizes: Any):
    """What ``_flat_batch`` returns for the common call (lists of equal
    length, every key a non-empty str, every pointer and size an int in
    u64 range), built by C loops; ``None`` for anything else, which the
    checking path then answers (TypeError, -600 per bad entry)."""
    if not (type(keys) is list and type(ptrs) is list and type(sizes) is list):
        return None
    n = len(keys)
    if len(ptrs) != n or len(sizes) != n:
        return None
    try:
        pa = array("Q", ptrs)  # TypeError for a non-int, OverflowError outside u64
        sa = array("Q", sizes)
        send = [k.encode("utf-8") for k in keys]
    except (TypeError, OverflowError, AttributeError, UnicodeEncodeError):
        return None
    if not all(send) or not all(type(k) is str for k in keys):
        return None
    return n, range(n), send, pa, sa


def _flat_batch_checked(keys: Any, ptrs: Any, sizes: Any):
    """``_flat_batch`` for any input: TypeError for wrong types, entries
    that can never be valid left out of idx (the caller answers -600)."""
    ks = _keys(keys)
    ps = _ints(ptrs, "ptrs")
    ss = _ints(sizes, "sizes")
    if not (len(ks) == len(ps) == len(ss)):
        return len(ks), None, None, None, None
    idx: List[int] = []
    send: List[bytes] = []
    pa = array("Q")
    sa = array("Q")
    for i, (k, p, s) in enumerate(zip(ks, ps, ss)):
        if k is not None and _u64(p) and _u64(s):
            idx.append(i)
            send.append(k)
            pa.append(p)
            sa.append(s)
    return len(ks), idx, send, pa, sa


class MooncakeDistributedStore(TensorAPI, ParallelTensorAPI, SessionAPI, SegmentAPI):
    """A gostore client with Mooncake's ``MooncakeDistributedStore`` API.

    Create it, call :meth:`setup`, use it, :meth:`close` it (or use it as a
    context manager). Nothing native happens before the first method call.
    """

    def __init__(self) -> None:
        self._hobj: Optional[_Handle] = None
        self._hlock = threading.Lock()

    # ---- native plumbing -------------------------------------------------

    def _owner(self) -> _Handle:
        hobj = self._hobj
        if hobj is None:
            with self._hlock:
                if self._hobj is None:
                    self._hobj = _Handle(_native.lib())  # setup_dummy installs a RemoteLibrary first
                hobj = self._hobj
        return hobj

    def _h(self) -> int:
        return self._owner().h

    def _lib(self) -> Any:
        """The library this store's calls go to: the native one, or in
        standalone mode the ``gostore-client`` it forwards them to."""
        return self._owner().lib

    def _write(
        self,
        keys: List[bytes],
        ptrs: array,
        sizes: array,
        nparts: array,
        zero_copy: int,
        cfg: Tuple[int, int, bytes],
        upsert: bool = False,
    ) -> List[int]:
        """``gs_put_batch`` (or ``gs_upsert_batch``: same arguments)."""
        h = self._h()
        blob, lens = _pack_keys(keys)
        results = array("i", bytes(4 * len(keys)))
        replica_num, flags, preferred = cfg
        lib = self._lib()
        fn = lib.gs_upsert_batch if upsert else lib.gs_put_batch
        fn(
            h, len(keys), blob, _addr(lens), _addr(ptrs), _addr(sizes), _addr(nparts),
            zero_copy, replica_num, flags, preferred, len(preferred), _addr(results),
        )
        return results.tolist()

    def _get_into(
        self, keys: List[bytes], ptrs: array, sizes: array, nparts: array, zero_copy: int
    ) -> List[int]:
        h = self._h()
        blob, lens = _pack_keys(keys)
        results = array("q", bytes(8 * len(keys)))
        self._lib().gs_get_into_batch(
            h, len(keys), blob, _addr(lens), _addr(ptrs), _addr(sizes), _addr(nparts),
            zero_copy, _addr(results),
        )
        return results.tolist()

    def _get_packed(self, keys: List[bytes], scratch: int) -> Tuple[int, array, array]:
        """gs_get_packed into ``scratch`` (SCRATCH_BYTES, from
        :meth:`_scratch`): (0 or a pending get or a negative code, sizes,
        results). At 0 the hits were read into the scratch back to back, in
        key order."""
        n = len(keys)
        blob, lens = _pack_keys(keys)
        sizes = array("q", bytes(8 * n))
        results = array("q", bytes(8 * n))
        pending = self._lib().gs_get_packed(
            self._h(), n, blob, _addr(lens), scratch, SCRATCH_BYTES, 0, _addr(sizes), _addr(results)
        )
        return pending, sizes, results

    def _scratch(self) -> ContextManager[int]:
        """A scratch buffer for one packed read, as a context whose value
        is its address: this thread's own, or, where the library offers one
        (standalone mode: ``packed_scratch``), memory it writes faster."""
        lib = self._lib()
        shared = getattr(type(lib), "packed_scratch", None)
        return PRIVATE_SCRATCH if shared is None else shared(lib)

    def _get_bytes(self, keys: List[bytes]) -> List[bytes]:
        """One fresh ``bytes`` per hit, ``b""`` otherwise. Hits that fit the
        scratch buffer together are read into it in the same call that looks
        them up; larger ones are finished into new objects."""
        with self._scratch() as at:
            pending, sizes, results = self._get_packed(keys, at)
            if pending == 0:
                return [b"" if hit is None else ctypes.string_at(at + hit[0], hit[1])
                        for hit in packed_hits(sizes, results)]
        if pending < 0:
            return [b""] * len(keys)
        return [b"" if v is None else v for v in self._finish_fresh(pending, sizes, new_bytes)]

    def _get_fresh(self, keys: List[bytes], alloc: Callable[[int], Tuple[Any, int]],
                   read_into: Optional[Callable[[int], Tuple[Any, int]]] = None) -> List[Any]:
        """One object per hit from ``alloc(size) -> (obj, address)``, None for
        misses and errors. Hits that fit the scratch buffer together are
        read with their lookup and copied, by this process, into one
        ``alloc(total)`` object, each hit a slice of it (so ``alloc``'s
        objects must slice into views, as numpy arrays do); larger ones are
        finished by the library into an object each, from ``read_into``
        when given (memory it writes faster), else from ``alloc``."""
        with self._scratch() as at:
            pending, sizes, results = self._get_packed(keys, at)
            if pending == 0:
                total = sum(s for s in sizes if s > 0)
                if total == 0:
                    return [None] * len(keys)
                block, addr = alloc(total)
                ctypes.memmove(addr, at, total)
                return [None if hit is None else block[hit[0]:hit[0] + hit[1]]
                        for hit in packed_hits(sizes, results)]
        if pending < 0:
            return [None] * len(keys)
        return self._finish_fresh(pending, sizes, read_into or alloc)

    def _finish_fresh(self, pending: int, sizes_out: array, alloc: Callable[[int], Tuple[Any, int]]) -> List[Any]:
        """Finish get ``pending`` (sizes ``sizes_out``) into one object from
        ``alloc`` per hit; None for misses and errors. Aborts it when an
        allocation fails."""
        lib = self._lib()
        h = self._h()
        n = len(sizes_out)
        finished = False
        try:
            outs: List[Any] = [None] * n
            ptrs = array("Q")
            sizes = array("Q")
            nparts = array("I", bytes(4 * n))
            for i, size in enumerate(sizes_out):
                if size > 0:
                    outs[i], addr = alloc(size)
                    ptrs.append(addr)
                    sizes.append(size)
                    nparts[i] = 1
            if not ptrs:
                return [None] * n
            results = array("q", bytes(8 * n))
            finished = True  # gs_get_finish frees ``pending`` whatever happens
            lib.gs_get_finish(
                h, pending, _addr(ptrs), _addr(sizes), _addr(nparts), 0, _addr(results)
            )
            return [
                out if (sizes_out[i] > 0 and results[i] == sizes_out[i]) else None
                for i, out in enumerate(outs)
            ]
        finally:
            if not finished:
                lib.gs_get_abort(h, pending)

    def _get_buffers(self, keys: List[bytes]) -> List[Optional[GostoreBuffer]]:
        lib = self._lib()
        owner = self._owner()
        n = len(keys)
        blob, lens = _pack_keys(keys)
        ptrs_out = array("Q", bytes(8 * n))
        sizes_out = array("q", bytes(8 * n))
        lib.gs_get_buffers(owner.h, n, blob, _addr(lens), _addr(ptrs_out), _addr(sizes_out))
        out: List[Optional[GostoreBuffer]] = [None] * n
        for i in range(n):
            ptr, size = ptrs_out[i], sizes_out[i]
            if size > 0 and ptr:
                out[i] = _wrap_buffer(lib, owner, ptr, size)
            elif ptr:
                lib.gs_free_buffer(owner.h, ptr)
        return out

    # ---- lifecycle --------------------------------------------------------

    def setup(self, *args: Any, **kwargs: Any) -> int:
        """Connect to the cluster; 0 or a negative error code.

        ``setup(local_hostname, metadata_server, global_segment_size,
        local_buffer_size, protocol, rdma_devices, master_server_addr,
        engine=None, enable_ssd_offload=False, ssd_offload_path='',
        tenant_id='default', enable_client_http_server=False,
        client_http_port=9300)`` -- Mooncake's thirteen parameters, in its
        order -- or ``setup(config: dict)``. The first seven are required,
        positionally or by name; sizes are ints or strings such as
        ``"16MB"``. Types are checked as Mooncake's binding checks them
        (``TypeError``): the flags take None (False), bools, ints and
        floats, not strings; ``client_http_port`` an int that fits 32 bits.
        Unknown keyword arguments raise ``TypeError``. ``engine`` is
        accepted and unused (the client owns its transfer engine).

        ``ssd_offload_path`` alone turns the SSD tier on in that directory
        (``enable_ssd_offload=False`` keeps it off);
        ``enable_ssd_offload=True`` alone takes the directory from
        ``MOONCAKE_OFFLOAD_FILE_STORAGE_PATH``. ``tenant_id`` names the
        client's tenant: against a master with ``--enable_multi_tenants``
        each tenant has its own key space (and quota); otherwise, as in
        Mooncake 0.3.13, it isolates nothing. It is shown by the client
        HTTP server; a name starting with ``_`` or holding a control
        character is -600.
        ``enable_client_http_server=True`` serves ``/metrics``
        (Prometheus), ``/health`` and ``/metrics/summary`` on
        ``0.0.0.0:client_http_port`` until close(); the port must then be
        1-65535 (else -600), and a port already taken is logged and setup
        goes on without the server.

        The dict form reads the keys ``local_hostname``, ``metadata_server``,
        ``global_segment_size``, ``local_buffer_size``, ``protocol``,
        ``rdma_devices`` (or ``device_name``), ``master_server_addr`` (or
        ``master_server_address``), ``enable_ssd_offload``,
        ``ssd_offload_path``, ``tenant_id``, ``enable_client_http_server``
        (this and ``enable_ssd_offload``: a bool, or text such as
        ``"true"``/``"yes"``/``"1"``),
        ``client_http_port`` (an int or decimal text; else -600),
        ``ipc_socket_path`` (accepted; it has no effect here: it belongs to
        standalone mode, whose socket :meth:`setup_dummy` takes) and
        the extensions below; other keys are ignored.

        gostore extensions, by keyword (and dict key): ``cluster_id`` (else
        ``$MC_STORE_CLUSTER_ID``, else ``"mooncake_cluster"``) is the
        masters' ``--cluster_id``: with ``master_server_addr`` =
        ``"etcd://h1:2379;h2:2379"`` the client finds the leading master of
        that cluster. ``segment_location="cuda:N"`` (or
        ``$GOSTORE_SEGMENT_LOCATION``) contributes GPU memory of device N
        instead of host memory; same-host peers reach it through CUDA IPC.
        ``log_level`` (``"debug"``, ``"info"``, ``"warn"``, ``"error"``; else
        ``$GOSTORE_LOG_LEVEL``) sets the level of every gostore logger in the
        process. ``put_space_wait_ms`` (else ``$GOSTORE_PUT_SPACE_WAIT_MS``,
        default 5000; 0 = never wait) bounds how long a put waits for room
        the master says is being freed before it returns -200.
        ``auth_secret_file`` (else ``$GOSTORE_AUTH_SECRET_FILE``) or
        ``tls_ca_file``, ``tls_cert_file`` and ``tls_key_file`` (else
        ``$GOSTORE_TLS_CA_FILE``, ``..._CERT_FILE``, ``..._KEY_FILE``)
        authenticate this client to the master and to its peers, and its
        peers to it (docs/security.md); without them setup refuses a
        ``local_hostname`` other hosts can reach (-600) unless
        ``allow_insecure=True`` (or ``$GOSTORE_ALLOW_INSECURE=1``), or the
        master's address is loopback and ``local_hostname`` is this host's:
        then the client listens on loopback only, under that name (one
        host: what vLLM's connector sets up).
        """
        params = _setup_params(args, kwargs)  # all TypeErrors before native code
        for k in ("global_segment_size", "local_buffer_size"):
            v = params[k]
            if isinstance(v, int) and not _u64(v):
                _log.error("gostore: setup: %s=%d is outside 0..2**64-1", k, v)
                return _INVALID
        doc = json.dumps(params).encode("utf-8")
        rc = self._lib().gs_setup(self._h(), doc, len(doc))
        if rc == 0:
            keep_freed_results()
        return rc

    def setup_dummy(
        self, mem_pool_size: int, local_buffer_size: int, server_address: str, ipc_socket_path: str = ""
    ) -> int:
        """Standalone mode: use the ``gostore-client`` at ``server_address``
        (``host:port``; same host) instead of a client in this process; 0,
        or -1 when it cannot be reached (as Mooncake answers), -600 for
        sizes beyond 64 bits.

        This process then loads no Go runtime, so it may ``fork()``: a child
        reconnects on its first call. ``mem_pool_size`` caps what
        :meth:`alloc_from_mem_pool` hands out; ``local_buffer_size`` bytes of
        shared memory stage the calls whose memory is not from the pool.
        ``ipc_socket_path`` names the server's Unix socket directly (else
        the server is asked for it over TCP). Call it on a fresh store,
        instead of :meth:`setup`."""
        from ..standalone import RemoteLibrary, ask_ipc_path, spin_us_from_env

        pool = _int(mem_pool_size, "mem_pool_size")
        local = _int(local_buffer_size, "local_buffer_size")
        addr = _str_arg(server_address, "server_address")
        ipc = _str_arg(ipc_socket_path, "ipc_socket_path")
        if not (_u64(pool) and _u64(local)):
            return _INVALID
        with self._hlock:
            if self._hobj is not None:
                _log.error("gostore: setup_dummy() on a store already in use; make a new store")
                return int(ErrorCode.INTERNAL_ERROR)
            if not ipc:
                try:
                    ipc = ask_ipc_path(addr)
                except OSError as e:
                    _log.error("gostore: setup_dummy: cannot reach gostore-client at %s: %s", addr, e)
                    return int(ErrorCode.INTERNAL_ERROR)
            remote = RemoteLibrary(ipc, pool, local, spin_us_from_env())
            if remote.connect() != 0:
                return int(ErrorCode.INTERNAL_ERROR)
            self._hobj = _Handle(remote)
        keep_freed_results()
        return 0

    def alloc_from_mem_pool(self, size: int) -> int:
        """Standalone mode: the address of ``size`` bytes of memory shared
        with ``gostore-client`` (zero-copy for every call), 0 when the pool
        is spent, or outside standalone mode. Not freed before exit."""
        from ..standalone import RemoteLibrary

        n = _int(size, "size")
        lib = self._hobj.lib if self._hobj is not None else None
        if not isinstance(lib, RemoteLibrary) or n <= 0:
            return 0
        return lib.alloc(n)

    def close(self) -> int:
        """Unmount this client's segment and disconnect; 0."""
        if self._hobj is None:
            return 0
        return self._lib().gs_close(self._hobj.h)

    def health_check(self) -> int:
        """0 healthy, 1 not set up / closed, 2 master unreachable."""
        if self._hobj is None:
            return 1
        return self._lib().gs_health_check(self._hobj.h)

    def get_hostname(self) -> str:
        """This client's segment name ``"host:port"`` ("" before setup)."""
        if self._hobj is None:
            return ""  # a status query: answered without loading the library
        s = _native.read_string(self._lib().gs_get_hostname, self._hobj.h, 256)
        return s or ""

    def transport_info(self) -> Dict[str, Any]:
        """What setup decided about the transport (a gostore extension):
        ``{"requested", "protocol", "rdma_devices", "unknown_devices",
        "nic_for": {location: nic}, "reason"}``. ``rdma_devices=""`` with
        ``protocol="rdma"`` means every RDMA device found; ``nic_for`` is the
        NIC chosen for buffers at each location (``"cpu:N"``, ``"cuda:N"``).
        ``{}`` before setup."""
        if self._hobj is None:
            return {}  # a status query: answered without loading the library
        h = self._hobj.h
        n, raw = _native.call_growing(lambda out, cap: self._lib().gs_transport_info(h, out, cap), cap=4096)
        return json.loads(raw) if n >= 0 else {}

    def __enter__(self) -> "MooncakeDistributedStore":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __repr__(self) -> str:
        state = "unset" if self._hobj is None else f"handle={self._hobj.h}"
        return f"<MooncakeDistributedStore {state}>"

    # ---- copying API ------------------------------------------------------

    # The put and upsert families share these helpers; ``upsert`` picks
    # gs_upsert_batch over gs_put_batch and nothing else differs.

    def _write_value(self, key: Any, value: Any, config: Any, upsert: bool) -> int:
        k = _key(key)
        cfg = _config(config)
        with BufferPins() as pins:
            addr, n = pins.pin(value)
            if k is None or n == 0 or cfg is None:
                return _INVALID
            return self._write(
                [k], array("Q", [addr]), array("Q", [n]), array("I", [1]), 0, cfg, upsert
            )[0]

    def _write_parts(self, key: Any, parts: Tuple[Any, ...], config: Any, upsert: bool) -> int:
        return self._write_multi([_key(key)], [parts], _config(config), upsert)[0]

    def _write_batch(self, keys: Any, values: Any, config: Any, upsert: bool) -> int:
        ks = _keys(keys)
        values = _seq(values, "values")
        cfg = _config(config)
        if len(ks) != len(values) or cfg is None:
            return _INVALID
        for c in self._write_multi(ks, [(v,) for v in values], cfg, upsert):
            if c != 0:
                return c
        return 0

    def _write_multi(
        self, ks: Sequence[Optional[bytes]], parts: Sequence[Sequence[Any]], cfg: Any, upsert: bool
    ) -> List[int]:
        """Store key ``ks[i]`` as the concatenation of the buffers
        ``parts[i]`` in one native call; -600 for a None key, a key with no
        bytes, or a None config. Every part is pinned first, so a part that
        is not a buffer raises ``TypeError`` before anything is stored."""
        codes = [_INVALID] * len(ks)
        mem_flags = 0
        with BufferPins() as pins:
            idx: List[int] = []
            send: List[bytes] = []
            ptrs, sizes, nparts = array("Q"), array("Q"), array("I")
            for i, (k, ps) in enumerate(zip(ks, parts)):
                pinned = []
                for p in ps:
                    if isinstance(p, DeviceSpan):  # a CUDA tensor's memory: Go asks the driver
                        pinned.append((p.ptr, p.nbytes))
                        mem_flags = _MAY_BE_DEVICE
                    else:
                        pinned.append(pins.pin(p))
                pinned = [(addr, n) for addr, n in pinned if n]
                if k is None or not pinned:
                    continue
                for addr, n in pinned:
                    ptrs.append(addr)
                    sizes.append(n)
                idx.append(i)
                send.append(k)
                nparts.append(len(pinned))
            if send and cfg is not None:
                for i, r in zip(idx, self._write(send, ptrs, sizes, nparts, mem_flags, cfg, upsert)):
                    codes[i] = r
        return codes

    def put(self, key: str, value: Any, config: Optional[ReplicateConfig] = None) -> int:
        """Store ``value`` (any buffer) under ``key``; an existing key is kept (0)."""
        return self._write_value(key, value, config, False)

    def put_parts(self, key: str, *parts: Any, config: Optional[ReplicateConfig] = None) -> int:
        """Store the concatenation of ``parts`` under ``key``."""
        return self._write_parts(key, parts, config, False)

    def put_batch(
        self, keys: List[str], values: List[Any], config: Optional[ReplicateConfig] = None
    ) -> int:
        """Store many values; 0 or the first error (in key order)."""
        return self._write_batch(keys, values, config, False)

    def get(self, key: str) -> bytes:
        """The value as ``bytes``; ``b""`` on a miss or any error."""
        k = _key(key)
        if k is None:
            return b""
        # One native call: a value up to _SCRATCH bytes lands in this
        # thread's scratch buffer and is copied into the bytes returned; a
        # larger one comes back as a pending get, finished straight into a
        # fresh bytes object (same single RPC either way).
        scratch = scratch_buffer()
        size = array("q", [0])
        lib = self._lib()
        h = self._h()
        r = lib.gs_get_one(h, k, len(k), scratch, _SCRATCH, _addr(size))
        if r == 0:
            return ctypes.string_at(scratch, size[0])
        if r < 0:
            return b""
        return self._finish_one(h, r, size[0])

    def _finish_one(self, h: int, pending: int, size: int) -> bytes:
        lib = self._lib()
        try:
            out, addr = new_bytes(size)
        except BaseException:
            lib.gs_get_abort(h, pending)
            raise
        # The arrays must outlive the call: only their addresses cross.
        ptrs, sizes, nparts = array("Q", [addr]), array("Q", [size]), array("I", [1])
        results = array("q", [0])
        lib.gs_get_finish(h, pending, _addr(ptrs), _addr(sizes), _addr(nparts), 0, _addr(results))
        return out if results[0] == size else b""

    def get_batch(self, keys: List[str]) -> List[bytes]:
        """``list[bytes]``, ``b""`` for misses and errors."""
        ks = _keys(keys)
        out = [b""] * len(ks)
        idx = [i for i, k in enumerate(ks) if k is not None]
        if idx:
            for i, v in zip(idx, self._get_bytes([ks[i] for i in idx])):
                out[i] = v
        return out

    def get_buffer(self, key: str) -> Optional[GostoreBuffer]:
        """The value in library memory (buffer protocol, ``.ptr()``, ``.size()``), or None."""
        k = _key(key)
        if k is None:
            return None
        return self._get_buffers([k])[0]

    def batch_get_buffer(self, keys: List[str]) -> List[Optional[GostoreBuffer]]:
        """One :meth:`get_buffer` result per key."""
        ks = _keys(keys)
        out: List[Optional[GostoreBuffer]] = [None] * len(ks)
        idx = [i for i, k in enumerate(ks) if k is not None]
        if idx:
            for i, v in zip(idx, self._get_buffers([ks[i] for i in idx])):
                out[i] = v
        return out

    # ---- existence, size, removal ----------------------------------------

    def _exist(self, keys: List[bytes]) -> List[int]:
        blob, lens = _pack_keys(keys)
        results = array("i", bytes(4 * len(keys)))
        self._lib().gs_exist_batch(self._h(), len(keys), blob, _addr(lens), _addr(results))
        return results.tolist()

    def is_exist(self, key: str) -> int:
        """1 exists, 0 not, negative on error; grants a read lease."""
        k = _key(key)
        if k is None:
            return _INVALID
        return self._exist([k])[0]

    def batch_is_exist(self, keys: List[str]) -> List[int]:
        """``list[int]`` with :meth:`is_exist`'s convention."""
        ks = _keys(keys)
        out = [_INVALID] * len(ks)
        idx = [i for i, k in enumerate(ks) if k is not None]
        if idx:
            for i, r in zip(idx, self._exist([ks[i] for i in idx])):
                out[i] = r
        return out

    def get_size(self, key: str) -> int:
        """Size in bytes, or negative (-704 missing); grants a lease."""
        k = _key(key)
        if k is None:
            return _INVALID
        return self._lib().gs_get_size(self._h(), k, len(k))

    def _remove(self, keys: List[bytes], force: bool) -> List[int]:
        blob, lens = _pack_keys(keys)
        results = array("i", bytes(4 * len(keys)))
        self._lib().gs_remove_batch(
            self._h(), len(keys), blob, _addr(lens), int(force), _addr(results)
        )
        return results.tolist()

    def remove(self, key: str, force: bool = False) -> int:
        """0; -704 missing; -706 leased (unless ``force``); -703; -708."""
        k = _key(key)
        force = _bool(force, "force")
        if k is None:
            return _INVALID
        return self._remove([k], force)[0]

    def remove_by_regex(self, regex_pattern: str, force: bool = False) -> int:
        """Number of keys removed whose key matches ``regex_pattern`` (search semantics)."""
        p = _str_arg(regex_pattern, "regex_pattern")
        force = _bool(force, "force")
        try:
            pb = p.encode("utf-8")
        except UnicodeEncodeError:
            return _INVALID
        return self._lib().gs_remove_by_regex(self._h(), pb, len(pb), int(force))

    def remove_all(self, force: bool = False) -> int:
        """Number of objects removed."""
        force = _bool(force, "force")
        return self._lib().gs_remove_all(self._h(), int(force))

    def batch_remove(self, keys: List[str], force: bool = False) -> List[int]:
        """``list[int]``, one :meth:`remove` result per key."""
        ks = _keys(keys)
        force = _bool(force, "force")
        out = [_INVALID] * len(ks)
        idx = [i for i, k in enumerate(ks) if k is not None]
        if idx:
            for i, r in zip(idx, self._remove([ks[i] for i in idx], force)):
                out[i] = r
        return out

    # ---- zero-copy API ----------------------------------------------------

    def register_buffer(self, buffer_ptr: int, size: int) -> int:
        """Declare ``[buffer_ptr, buffer_ptr+size)`` usable by the zero-copy calls; 0 / negative."""
        p = _int(buffer_ptr, "buffer_ptr")
        s = _int(size, "size")
        if not (_u64(p) and _u64(s)):
            return _INVALID
        return self._lib().gs_register_buffer(self._h(), p, s)

    def unregister_buffer(self, buffer_ptr: int) -> int:
        """Forget a registered buffer; 0 / negative."""
        p = _int(buffer_ptr, "buffer_ptr")
        if not _u64(p):
            return _INVALID
        return self._lib().gs_unregister_buffer(self._h(), p)

    def _write_from(self, key: Any, ptr: Any, size: Any, config: Any, upsert: bool) -> int:
        k = _key(key)
        p = _int(ptr, "ptr")
        s = _int(size, "size")
        cfg = _config(config)
        if k is None or cfg is None or not (_u64(p) and _u64(s)):
            return _INVALID
        replica_num, flags, preferred = cfg
        return self._lib().gs_put_one(
            self._h(), k, len(k), p, s, 1, replica_num, flags, preferred, len(preferred), int(upsert)
        )

    def put_from(
        self, key: str, buffer_ptr: int, size: int, config: Optional[ReplicateConfig] = None
    ) -> int:
        """Store ``size`` bytes read directly from registered memory at ``buffer_ptr``."""
        return self._write_from(key, buffer_ptr, size, config, False)

    def get_into(self, key: str, buffer_ptr: int, size: int) -> int:
        """Read the value into registered memory; bytes written or negative."""
        k = _key(key)
        p = _int(buffer_ptr, "buffer_ptr")
        s = _int(size, "size")
        if k is None or not (_u64(p) and _u64(s)):
            return _INVALID
        return self._lib().gs_get_into_one(self._h(), k, len(k), p, s, 1)

    def _flat_batch(self, keys: Any, ptrs: Any, sizes: Any):
        """(n, idx, send_keys, ptrs, sizes) for the one-buffer-per-key batches."""
        fast = _flat_batch_fast(keys, ptrs, sizes)
        return fast if fast is not None else _flat_batch_checked(keys, ptrs, sizes)

    def _write_batch_from(
        self, keys: Any, ptrs: Any, sizes: Any, config: Any, upsert: bool
    ) -> List[int]:
        cfg = _config(config)
        n, idx, send, pa, sa = self._flat_batch(keys, ptrs, sizes)
        out = [_INVALID] * n
        if idx is None or cfg is None:
            return out
        if send:
            res = self._write(send, pa, sa, array("I", [1]) * len(send), 1, cfg, upsert)
            for i, r in zip(idx, res):
                out[i] = r
        return out

    def batch_put_from(
        self,
        keys: List[str],
        buffer_ptrs: List[int],
        sizes: List[int],
        config: Optional[ReplicateConfig] = None,
    ) -> List[int]:
        """One :meth:`put_from` result per key; all -600 if list lengths differ."""
        return self._write_batch_from(keys, buffer_ptrs, sizes, config, False)

    def batch_get_into(self, keys: List[str], buffer_ptrs: List[int], sizes: List[int]) -> List[int]:
        """One :meth:`get_into` result per key (-704 for a miss)."""
        n, idx, send, pa, sa = self._flat_batch(keys, buffer_ptrs, sizes)
        out = [_INVALID] * n
        if idx is None:
            return out
        if send:
            res = self._get_into(send, pa, sa, array("I", [1]) * len(send), 1)
            for i, r in zip(idx, res):
                out[i] = r
        return out

    def _multi_batch(self, keys: Any, ptr_lists: Any, size_lists: Any):
        """(n, idx, send_keys, ptrs, sizes, nparts) for the scatter-list batches."""
        ks = _keys(keys)
        pls = _seq(ptr_lists, "ptr_lists")
        sls = _seq(size_lists, "size_lists")
        pls = [_ints(pl, "ptr_lists[i]") for pl in pls]
        sls = [_ints(sl, "size_lists[i]") for sl in sls]
        if not (len(ks) == len(pls) == len(sls)):
            return len(ks), None, None, None, None, None
        idx: List[int] = []
        send: List[bytes] = []
        pa = array("Q")
        sa = array("Q")
        na = array("I")
        for i, (k, pl, sl) in enumerate(zip(ks, pls, sls)):
            if (
                k is None
                or not pl
                or len(pl) != len(sl)
                or not all(_u64(p) for p in pl)
                or not all(_u64(s) for s in sl)
            ):
                continue
            idx.append(i)
            send.append(k)
            pa.extend(pl)
            sa.extend(sl)
            na.append(len(pl))
        return len(ks), idx, send, pa, sa, na

    def batch_put_from_multi_buffers(
        self,
        keys: List[str],
        all_buffer_ptrs: List[List[int]],
        all_sizes: List[List[int]],
        config: Optional[ReplicateConfig] = None,
    ) -> List[int]:
        """Store each object as the concatenation of its scatter list."""
        cfg = _config(config)
        n, idx, send, pa, sa, na = self._multi_batch(keys, all_buffer_ptrs, all_sizes)
        out = [_INVALID] * n
        if idx is None or cfg is None:
            return out
        if send:
            for i, r in zip(idx, self._write(send, pa, sa, na, 1, cfg)):
                out[i] = r
        return out

    def batch_get_into_multi_buffers(
        self, keys: List[str], all_buffer_ptrs: List[List[int]], all_sizes: List[List[int]],
        prefer_alloc_in_same_node: bool = False,
    ) -> List[int]:
        """Gather each object into its scatter list; bytes written or negative.
        ``prefer_alloc_in_same_node`` is accepted for Mooncake's signature:
        reads always take the nearest replica first (own segment, this
        host's shared memory, then the network)."""
        _bool(prefer_alloc_in_same_node, "prefer_alloc_in_same_node")
        n, idx, send, pa, sa, na = self._multi_batch(keys, all_buffer_ptrs, all_sizes)
        out = [_INVALID] * n
        if idx is None:
            return out
        if send:
            for i, r in zip(idx, self._get_into(send, pa, sa, na, 1)):
                out[i] = r
        return out

    # ---- upsert (insert or replace) ---------------------------------------
    # The put family's argument rules; an existing key is replaced instead of
    # kept. Results straight from the store: 0; -714 (OBJECT_REPLICA_BUSY)
    # while readers copy out of the object; -708 (OBJECT_HAS_REPLICATION_TASK)
    # while a copy/move task runs on it; -200 when no space; -600 as for put.

    def upsert(self, key: str, value: Any, config: Optional[ReplicateConfig] = None) -> int:
        """Insert or replace ``key`` with ``value`` (any buffer); 0 or negative."""
        return self._write_value(key, value, config, True)

    def upsert_from(
        self, key: str, buffer_ptr: int, size: int, config: Optional[ReplicateConfig] = None
    ) -> int:
        """:meth:`upsert` of ``size`` bytes read directly from registered memory."""
        return self._write_from(key, buffer_ptr, size, config, True)

    def upsert_parts(
        self, key: str, *parts: Any, config: Optional[ReplicateConfig] = None
    ) -> int:
        """:meth:`upsert` of the concatenation of ``parts``."""
        return self._write_parts(key, parts, config, True)

    def upsert_batch(
        self, keys: List[str], values: List[Any], config: Optional[ReplicateConfig] = None
    ) -> int:
        """Upsert many values in one pipeline; 0 or the first error (in key order)."""
        return self._write_batch(keys, values, config, True)

    def batch_upsert_from(
        self,
        keys: List[str],
        buffer_ptrs: List[int],
        sizes: List[int],
        config: Optional[ReplicateConfig] = None,
    ) -> List[int]:
        """One :meth:`upsert_from` result per key; all -600 if list lengths differ."""
        return self._write_batch_from(keys, buffer_ptrs, sizes, config, True)

    # ---- replica tasks ----------------------------------------------------

    def _task_id(self, fn: Any, *args: Any) -> Tuple[TaskId, int]:
        out = ctypes.create_string_buffer(_TASK_ID_CAP)
        n = fn(self._h(), *args, out, _TASK_ID_CAP)
        if n < 0:
            return NO_TASK_ID, n
        return task_id_from_native(out.raw[:n].decode("ascii")), 0

    def create_copy_task(self, key: str, targets: List[str]) -> Tuple[TaskId, int]:
        """Copy ``key`` to the segments named in ``targets`` (``get_hostname()``
        values), in the background; ``(task_id, 0)`` or ``((0, 0), negative)``:
        -704 missing key (checked first), -600 a target no segment is named
        (as Mooncake), -708 another task runs on the key, -200 no room. A
        target that holds the key already is skipped. A task id is
        a ``(high, low)`` pair of ints, as in Mooncake."""
        k = _key(key)
        ts = _seq(targets, "targets")
        names = [_segment_name(t, "targets[i]") for t in ts]
        if k is None or not names or any(n is None for n in names):
            return NO_TASK_ID, _INVALID
        tb = b"\n".join(names)  # type: ignore[arg-type]
        return self._task_id(self._lib().gs_create_copy_task, k, len(k), tb, len(tb))

    def create_move_task(self, key: str, source: str, target: str) -> Tuple[TaskId, int]:
        """Move ``key``'s replica from segment ``source`` to ``target``, in the
        background; ``(task_id, 0)`` or ``((0, 0), negative)`` (as
        :meth:`create_copy_task`, and -600 when ``source`` is unknown, holds
        no replica, or is ``target``)."""
        k = _key(key)
        sb = _segment_name(source, "source")
        tb = _segment_name(target, "target")
        if k is None or sb is None or tb is None:
            return NO_TASK_ID, _INVALID
        return self._task_id(
            self._lib().gs_create_move_task, k, len(k), sb, len(sb), tb, len(tb)
        )

    def query_task(self, task_id: TaskId) -> Tuple[Optional[QueryTaskResponse], int]:
        """``(QueryTaskResponse, 0)`` for a known task, ``(None, negative)``
        otherwise (-709 for an unknown or long-finished id). ``task_id`` is
        the ``(high, low)`` pair a create call returned (``TypeError`` for
        anything else)."""
        tid = task_id_to_native(task_id)
        if tid is None:
            return None, int(ErrorCode.OBJECT_NO_REPLICATION_TASK)
        lib, h = self._lib(), self._h()
        # A long key needs a larger answer: call_growing asks again with room.
        n, raw = _native.call_growing(lambda out, cap: lib.gs_query_task(h, tid, len(tid), out, cap),
                                      limit=_QUERY_TASK_MAX_CAP)
        if n < 0:
            return None, n
        return QueryTaskResponse._from_json(raw.decode("utf-8", "replace")), 0
