"""``gostore-client``: the process that owns a client's segment, transfer
engine and master connection in standalone mode, serving applications that
called ``setup_dummy`` (``gostore.standalone``) on the same host.

It takes the flags of Mooncake's ``mooncake_client`` (``--host``,
``--port``, ``--global_segment_size``, ``--local_buffer_size``,
``--master_server_address``, ``--metadata_server``, ``--protocol``,
``--device_names``, ``--enable_offload``, ``--tenant_id``, ``--threads``,
``--enable_http_server``, ``--http_port``) plus ``--ipc_socket_path`` and
``--ipc_spin_us`` (how long a connection whose application calls in a loop
is polled for its next call after an answer; see ``protocol.Conn``).

It listens twice:

* TCP ``host:port`` answers one JSON line, ``{"ipc_socket_path": ...}``, to
  any connection: how ``setup_dummy(..., "host:port")`` finds the socket.
* The Unix socket carries the calls (``gostore.standalone.protocol``). Only processes
  of this user (or root) are served; file descriptors of shared memory travel
  over it.

Per application session the server maps each shared region, registers it
with the store (so transfers use it in place), translates the application's
pointers into its own mapping, and refuses pointers outside them. An
application that passed the CROSS check (this process could read its memory
with ``process_vm_readv``: same user, and under Yama it named this process
its tracer) may also hand the copying calls pointers into its own memory
(``PROCESS_TAG``): the library copies those with ``process_vm_readv`` /
``writev``, for that connection's process only. A session ends when its last
connection closes: its get handles are aborted and its regions unregistered
and unmapped.
"""

from __future__ import annotations

import argparse
import bisect
import fcntl
import json
import logging
import os
import secrets
import signal
import socket
import stat
import sys
import threading
from array import array
from typing import Any, Dict, List, Optional, Sequence, Tuple

from .. import _native
from . import shm as _shm
from . import protocol as P
from ..errors import ErrorCode
from ..store.distributed_store import MooncakeDistributedStore

_log = logging.getLogger("gostore.client")

_INVALID = int(ErrorCode.INVALID_PARAMS)
_SERVER_MIN_LOCAL_BUFFER = "16MB"
_ZERO_COPY_REGISTERED = 1  # bits of the data calls' zero_copy argument (ABI.md)
_IN_PROCESS = 4  # ...tagged ranges are in process (zero_copy >> _PID_SHIFT)'s memory
_PID_SHIFT = 8
_USER_SPACE_END = 1 << 57  # no process maps an address past it (5-level paging)


class _Region:
    __slots__ = ("app", "size", "local", "fd", "users", "gone")

    def __init__(self, app: int, size: int, local: int, fd: int) -> None:
        self.app, self.size, self.local, self.fd = app, size, local, fd
        self.users = 0  # calls in flight with pointers into it
        self.gone = False  # unshared: unmapped once its last user is done


class Session:
    """What one application process shared with the server."""

    def __init__(self, token: bytes) -> None:
        self.token = token
        self.regions: List[_Region] = []  # sorted by app address
        self.starts: List[int] = []  # their app addresses, for bisect
        self.connections = 0
        self.lock = threading.Lock()
        # The process that passed the CROSS check: its connections' calls may
        # name its own memory (PROCESS_TAG); 0 for none.
        self.cross_pid = 0

    def find(self, addr: int, size: int) -> Optional[_Region]:
        """The region holding [addr, addr+size), counted as used by the
        caller until :meth:`release`."""
        with self.lock:
            i = bisect.bisect_right(self.starts, addr) - 1
            if i >= 0:
                r = self.regions[i]
                if addr + size <= r.app + r.size:
                    r.users += 1
                    return r
        return None

    def release(self, used: List[_Region]) -> List[_Region]:
        """End the uses :meth:`find` counted; the regions now to unmap."""
        done = []
        with self.lock:
            for r in used:
                r.users -= 1
                if r.gone and r.users == 0:
                    done.append(r)
        return done

    def remove(self, app: int) -> Tuple[bool, Optional[_Region]]:
        """Unshare the region the application mapped at ``app``: whether
        there was one, and the region to unmap now (None while a call
        still uses it: its release does)."""
        with self.lock:
            i = bisect.bisect_left(self.starts, app)
            if i == len(self.starts) or self.starts[i] != app:
                return False, None
            r = self.regions.pop(i)
            del self.starts[i]
            r.gone = True
            return True, (r if r.users == 0 else None)

    def overlaps(self, addr: int, size: int) -> bool:
        with self.lock:
            return any(r.app < addr + size and addr < r.app + r.size for r in self.regions)

    def add(self, r: _Region) -> None:
        with self.lock:
            i = bisect.bisect_left(self.starts, r.app)
            self.starts.insert(i, r.app)
            self.regions.insert(i, r)


class StandaloneServer:
    """Serves ``store`` (set up) to applications; see the module text."""

    def __init__(self, store: MooncakeDistributedStore, host: str, port: int, ipc_path: str,
                 max_region_bytes: int = 1 << 44, spin_us: int = P.DEFAULT_SPIN_US) -> None:
        """``spin_us``: how long a connection whose application calls in a
        loop is polled for its next call after an answer (``P.Conn``); 0
        never polls."""
        self.store = store
        self.spin_us = spin_us
        self._gate = P.SpinGate()
        self.lib = _native.lib()
        self.h = store._h()
        self.ipc_path = ipc_path
        self.max_region_bytes = max_region_bytes
        self._sessions: Dict[bytes, Session] = {}
        self._lock = threading.Lock()
        self._stop = threading.Event()
        d = os.path.dirname(ipc_path)
        if d:
            os.makedirs(d, mode=0o700, exist_ok=True)
        if os.path.exists(ipc_path):
            os.unlink(ipc_path)  # a socket left by a server that died
        self._unix = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self._unix.bind(ipc_path)
        os.chmod(ipc_path, 0o600)
        self._unix.listen(128)
        self._tcp = socket.create_server((host, port), reuse_port=False)
        self.port = self._tcp.getsockname()[1]

    # ---- accept loops -----------------------------------------------------------

    def serve_forever(self) -> None:
        threading.Thread(target=self._serve_tcp, name="gostore-client-tcp", daemon=True).start()
        while not self._stop.is_set():
            try:
                conn, _ = self._unix.accept()
            except OSError:
                break
            threading.Thread(target=self._serve_conn, args=(conn,), daemon=True).start()

    def shutdown(self) -> None:
        self._stop.set()
        for s in (self._unix, self._tcp):
            try:
                s.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass
            s.close()
        try:
            os.unlink(self.ipc_path)
        except OSError:
            pass

    def _serve_tcp(self) -> None:
        line = (json.dumps({"ipc_socket_path": self.ipc_path, "pid": os.getpid()}) + "\n").encode()
        while not self._stop.is_set():
            try:
                conn, _ = self._tcp.accept()
            except OSError:
                return
            try:
                conn.sendall(line)
            except OSError:
                pass
            conn.close()

    # ---- one application connection ------------------------------------------------

    def _serve_conn(self, sock: socket.socket) -> None:
        pid, uid = P.peer_pid_uid(sock)
        if uid not in (os.getuid(), 0):
            _log.error("gostore-client: refused a connection from uid %d (serving uid %d only)", uid, os.getuid())
            sock.close()
            return
        conn = P.Conn(sock, self.spin_us, self._gate, P.HOT)
        session: Optional[Session] = None
        pending: Dict[int, int] = {}
        try:
            while True:
                fds: List[int] = []  # what came with the frame: closed unless taken
                try:
                    try:
                        kind, body = conn.read(fds)
                    except ConnectionError:
                        break
                    if kind == P.HELLO:
                        session = self._hello(conn, body, session)
                    elif session is None:
                        raise P.FrameError("no session: send HELLO first")
                    elif kind == P.REGION:
                        self._region(conn, session, body, fds)  # takes the fds out of the list
                    elif kind == P.UNREGION:
                        self._unregion(conn, session, body)
                    elif kind == P.CALL:
                        self._call(conn, session, pending, body, fds, pid)  # takes the fd it uses
                    elif kind == P.CROSS:
                        self._cross(conn, session, body, pid)
                    else:
                        raise P.FrameError(f"unknown frame kind {kind}")
                finally:
                    for fd in fds:
                        os.close(fd)
        except (P.FrameError, OSError) as e:
            _log.error("gostore-client: dropped an application connection: %s", e)
        except Exception:  # a bug here must cost one connection, not the server
            _log.exception("gostore-client: dropped an application connection")
        finally:
            sock.close()
            for handle in list(pending):
                self.lib.gs_get_abort(self.h, handle)
            if session is not None:
                self._leave(session)

    def _send_error(self, conn: P.Conn, code: int, msg: str) -> None:
        conn.send(P.frame(P.ERROR, [code, msg.encode()]))

    def _hello(self, conn: P.Conn, body: memoryview, current: Optional[Session]) -> Optional[Session]:
        (token,) = P.get_values(body, 1)
        if token is not None and not isinstance(token, bytes):
            raise P.FrameError("a hello names a session token")
        if current is not None:
            self._leave(current)
        with self._lock:
            if token:
                s = self._sessions.get(token)
                if s is None:
                    self._send_error(conn, int(ErrorCode.CLIENT_NOT_FOUND), "unknown session")
                    return None
            else:
                token = secrets.token_bytes(16)
                s = self._sessions[token] = Session(token)
            s.connections += 1
        conn.send(P.frame(P.REPLY, [token]))
        return s

    def _leave(self, s: Session) -> None:
        with self._lock:
            s.connections -= 1
            if s.connections > 0:
                return
            self._sessions.pop(s.token, None)
        for r in s.regions:
            self._drop_region(r)
        s.regions, s.starts = [], []

    def _map(self, app: int, size: int, fd: int) -> _Region:
        if not isinstance(app, int) or not isinstance(size, int):
            raise P.FrameError("a region is an address and a size")
        if not (0 < size <= self.max_region_bytes) or app <= 0:
            raise P.FrameError(f"region of {size} bytes at 0x{app:x} refused")
        st = os.fstat(fd)
        if st.st_size < size:
            raise P.FrameError(f"region fd holds {st.st_size} bytes, {size} named")
        local = _shm.map_fd(fd, size)
        rc = self.lib.gs_register_buffer(self.h, local, size)
        if rc != 0:
            _shm.unmap(local, size)
            raise OSError(f"register_buffer of a shared region failed ({rc})")
        return _Region(app, size, local, fd)

    def _drop_region(self, r: _Region) -> None:
        self.lib.gs_unregister_buffer(self.h, r.local)
        _shm.unmap(r.local, r.size)
        os.close(r.fd)

    def _region(self, conn: P.Conn, s: Session, body: memoryview, fds: List[int]) -> None:
        app, size = P.get_values(body, 2)
        taken = list(fds)
        fds.clear()  # closed here, once, whatever happens
        if len(taken) != 1:
            for fd in taken:
                os.close(fd)
            self._send_error(conn, _INVALID, "a region comes with one file descriptor")
            return
        try:
            r = self._map(app, size, taken[0])
        except (OSError, P.FrameError) as e:
            os.close(taken[0])
            _log.error("gostore-client: refused a shared region: %s", e)
            self._send_error(conn, _INVALID, str(e))
            return
        if s.overlaps(app, size):
            self._drop_region(r)
            self._send_error(conn, _INVALID, f"region at 0x{app:x} overlaps one already shared")
            return
        s.add(r)
        conn.send(P.frame(P.REPLY, [0]))

    def _unregion(self, conn: P.Conn, s: Session, body: memoryview) -> None:
        (app,) = P.get_values(body, 1)
        if not isinstance(app, int):
            raise P.FrameError("an unregion names an address")
        found, r = s.remove(app)
        if not found:
            self._send_error(conn, _INVALID, f"no region shared at 0x{app:x}")
            return
        if r is not None:
            self._drop_region(r)
        conn.send(P.frame(P.REPLY, [0]))

    def _cross(self, conn: P.Conn, s: Session, body: memoryview, pid: int) -> None:
        """The CROSS check: can this process read the application's memory?"""
        addr, nonce = P.get_values(body, 2)
        if not isinstance(addr, int) or not isinstance(nonce, bytes) or not 8 <= len(nonce) <= 64:
            raise P.FrameError("a cross-memory check names an address and 8 to 64 bytes")
        try:
            ok = pid > 0 and 0 < addr < _USER_SPACE_END and _shm.read_process(pid, addr, len(nonce)) == nonce
        except OSError as e:
            _log.info("gostore-client: cannot reach process %d's memory (%s): its copying calls are staged", pid, e)
            ok = False
        if ok:
            s.cross_pid = pid
        conn.send(P.frame(P.REPLY, [int(ok)]))

    def _call(self, conn: P.Conn, s: Session, pending: Dict[int, int], body: memoryview,
              fds: List[int], pid: int) -> None:
        vals = P.get_values(body)
        if len(vals) < 3 or not isinstance(vals[0], bytes):
            raise P.FrameError("a call names its function first")
        name = vals[0].decode("ascii", "replace")
        call = P.CALLS.get(name)
        if call is None:
            self._send_error(conn, int(ErrorCode.INTERNAL_ERROR), f"{name} is not served")
            return
        temp_addr, temp_size, args = vals[1], vals[2], vals[3:]
        first = args[1] if len(args) > 1 else None  # n, or a get handle
        temp: Optional[_Region] = None
        if temp_addr is not None:
            if len(fds) != 1 or not isinstance(temp_addr, int) or not isinstance(temp_size, int):
                raise P.FrameError("a call's own region is an address, a size and one file descriptor")
            fd = fds.pop()
            try:
                temp = self._map(temp_addr, temp_size, fd)
            except BaseException:
                os.close(fd)
                raise
        used: List[_Region] = []  # shared regions the call's pointers lie in
        try:
            why = None if len(args) == len(call.args) else f"{len(args)} arguments, {len(call.args)} wanted"
            why = why or P.check_lengths(call, args, pending)
            if not why and call.ends_pending and first not in pending:
                why = "a get handle this connection does not hold"
            cross = call.cross_memory and s.cross_pid == pid and pid > 0
            why = why or self._translate(call, s, temp, args, used, cross)
            if why:
                _log.error("gostore-client: refused %s: %s", name, why)
                self._send_error(conn, _INVALID, f"{name}: {why}")
                return
            # Lengths first: they may name arrays the loop below turns into addresses.
            outs = [
                array(a.typecode, bytes(a.length.of(args, pending) * P.ITEMSIZE[a.typecode]))  # type: ignore[union-attr]
                if a.kind == P.OUT else None
                for a in call.args
            ]
            for i, a in enumerate(call.args):
                if a.kind == P.HANDLE:
                    args[i] = self.h
                elif a.kind in (P.OUT, P.IN):
                    arr = outs[i] if a.kind == P.OUT else args[i]
                    args[i] = arr.buffer_info()[0] if len(arr) else 0
                elif a.kind == P.FLAGS:  # what the pointers are now, whatever the caller said
                    args[i] = _ZERO_COPY_REGISTERED | (_IN_PROCESS | pid << _PID_SHIFT if cross else 0)
            outs = [o for o in outs if o is not None]
            ret = getattr(self.lib, name)(*args)
        finally:
            if temp is not None:
                self._drop_region(temp)
            for r in s.release(used):
                self._drop_region(r)
        extra: List[Any] = []
        if call.opens and isinstance(ret, int) and ret > 0:
            n = pending[ret] = int(first) if call.opens == "pending" else 1
            # outs[0]: the objects' sizes (negative for misses)
            if sum(x for x in outs[0] if x > 0) >= P.PLACES_MIN:
                placed = P.ask_places(self.lib.gs_get_places, self.h, ret, n)
                if placed is None or P.places_fit(outs, n, len(placed.paths)):
                    extra = P.reply_places(placed)
                # else: too many objects for one frame with their places;
                # the application asks, or the server reads them
        if call.ends_pending:
            pending.pop(int(first), None)
        conn.send(P.frame(P.REPLY, [ret] + outs + extra))

    def _translate(self, call: P.Call, s: Session, temp: Optional[_Region], args: List[Any],
                   used: List[_Region], cross: bool) -> Optional[str]:
        """Point the call's data pointers at this process's mapping of the
        application's memory (the shared regions they lie in are added to
        ``used``), leaving those into its own memory (PROCESS_TAG) as they
        are when ``cross``; why not, when one lies outside them."""
        def region(addr: int, size: int) -> Optional[_Region]:
            """The shared region holding [addr, addr+size): the call's own
            first, else the session's (counted in ``used``)."""
            if temp is not None and temp.app <= addr and addr + size <= temp.app + temp.size:
                return temp
            r = s.find(addr, size)
            if r is not None:
                used.append(r)
            return r

        whole = P.arrays_in_one_region(call, args, region)
        for k, r in whole.items():
            ps = args[call.data[k].ptrs]
            delta = r.local - r.app
            ps[:] = array("Q", [p + delta for p in ps])  # in place: the call reads this very array
        for holder, j, p, size, use in P.data_pointers(call, args, whole):
            if p < 0 or size < 0:
                return f"pointer 0x{p:x} (+{size}) is not an address and a size"
            if p & P.PROCESS_TAG:
                addr = p & ~P.PROCESS_TAG
                if not cross:
                    return f"pointer 0x{addr:x} (+{size}) names the application's own memory, not allowed here"
                if not 0 < addr < addr + size <= _USER_SPACE_END:
                    return f"pointer 0x{addr:x} (+{size}) is not the application's memory"
                continue
            r = region(p, size)
            if r is None:
                if use == P.PROBE:
                    holder[j] = 0
                    continue
                return f"pointer 0x{p:x} (+{size}) is not in memory shared with gostore-client"
            holder[j] = r.local + (p - r.app)
        return None


# ---- command line ---------------------------------------------------------------------


def default_ipc_path(port: int) -> str:
    """Where ``gostore-client --port=PORT`` listens for applications unless
    told otherwise: a socket in a directory only this user can enter."""
    base = os.environ.get("XDG_RUNTIME_DIR") or f"/tmp/gostore-{os.getuid()}"
    return os.path.join(base, f"gostore-client-{port}.sock")


class IpcPathTaken(Exception):
    """Another process serves the ``--ipc_socket_path`` asked for, or the
    path is something other than a socket."""


def claim_ipc_path(path: str) -> int:
    """Make ``path`` this process's to serve, before anything is set up.

    A live ``gostore-client`` on it keeps it: taking the socket over would
    leave that server's applications calling nobody. It holds an exclusive
    ``flock`` on ``path + ".lock"`` for its life (the kernel lets go when it
    dies, so a stale socket of a dead server is taken over); a server that
    holds no lock but answers on the socket counts as live too. Returns the
    lock's descriptor, to keep open; raises :class:`IpcPathTaken` saying
    who holds the path."""
    d = os.path.dirname(path)
    if d:
        os.makedirs(d, mode=0o700, exist_ok=True)
    fd = os.open(path + ".lock", os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o600)
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            holder = os.pread(fd, 32, 0).decode(errors="replace").strip() or "?"
            raise IpcPathTaken(
                f"--ipc_socket_path {path} is served by another gostore-client (pid {holder}): stop it, "
                "or give this one another --ipc_socket_path") from None
        os.ftruncate(fd, 0)
        os.pwrite(fd, f"{os.getpid()}\n".encode(), 0)
        try:
            st = os.lstat(path)
        except FileNotFoundError:
            return fd
        if not stat.S_ISSOCK(st.st_mode):
            raise IpcPathTaken(f"--ipc_socket_path {path} exists and is not a socket: refusing to replace it")
        with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as probe:
            probe.settimeout(2.0)
            try:
                probe.connect(path)
            except (ConnectionRefusedError, FileNotFoundError):
                return fd  # left by a server that died: StandaloneServer replaces it
            except OSError:
                pass  # it exists and did not refuse (a full backlog): someone serves it
        raise IpcPathTaken(
            f"--ipc_socket_path {path} is served by another process (it accepts connections): stop it, "
            "or give this one another --ipc_socket_path")
    except BaseException:
        os.close(fd)
        raise


_FLAGS = {
    # name: (default, type, what --help says). Mooncake mooncake_client's
    # flags, with its defaults but --host (loopback, as the master's).
    "host": ("127.0.0.1", str,
             "address of the TCP port, and this client's name in the pool (setup's local_hostname); "
             "an address other hosts reach needs authentication (docs/security.md)"),
    "port": (50052, int, "TCP port that tells applications the Unix socket's path (0: a free one)"),
    "global_segment_size": ("4 GB", str, "memory this client gives the pool (bytes, or 4GB, 512MB)"),
    "local_buffer_size": ("0", str, "buffer of the copying calls (0: 16MB, which the server needs)"),
    "master_server_address": ("127.0.0.1:50051", str, "the master's RPC address, host:port"),
    "metadata_server": ("http://127.0.0.1:8080/metadata", str, "setup's metadata_server"),
    "protocol": ("tcp", str, "setup's protocol: tcp, ucx or rdma"),
    "device_names": ("", str, "setup's rdma_devices"),
    "enable_offload": (False, bool, "turn the SSD tier on (in --ssd_offload_path, else $MOONCAKE_OFFLOAD_FILE_STORAGE_PATH)"),
    "start_offload_rpc_server": (True, bool, "accepted, no effect"),
    "tenant_id": ("default", str, "setup's tenant_id: its own key space and quota under the master's --enable_multi_tenants"),
    "threads": (1, int, "accepted, no effect: one thread serves each connection"),
    "enable_http_server": (False, bool, "serve /metrics, /metrics/summary and /health on --http_port"),
    "http_port": (9300, int, "port of --enable_http_server"),
    "mmap_arena_pool_size": (8589934592, int, "accepted, no effect"),
    "use_mmap_arena_allocator": (False, bool, "accepted, no effect"),
    # gostore's
    "ipc_socket_path": ("", str,
                        "the Unix socket applications call through (\"\": gostore-client-PORT.sock in "
                        "$XDG_RUNTIME_DIR, else /tmp/gostore-UID); refused while another process serves it"),
    "ipc_spin_us": (P.DEFAULT_SPIN_US, int,
                    f"how long a connection is polled for its application's next call (0 to {P.MAX_SPIN_US})"),
    "ssd_offload_path": ("", str, "directory of the SSD tier (turns it on)"),
    "log_level": ("", str, "debug, info, warn or error (\"\": $GOSTORE_LOG_LEVEL, else info)"),
    "cluster_id": ("", str, "the HA masters' --cluster_id (\"\": $MC_STORE_CLUSTER_ID, else mooncake_cluster)"),
}


def usage() -> str:
    """What ``gostore-client --help`` prints: every flag, its type and
    default, and what it does."""
    lines = ["Usage: gostore-client [flags]", "",
             "Standalone mode's server: owns this host's segment and serves applications that call",
             "setup_dummy (docs/standalone.md). Flags are --name=value, -name=value or --name value;",
             "bools also --name / --noname.", ""]
    for name, (default, typ, text) in _FLAGS.items():
        lines.append(f"  --{name} ({typ.__name__}) default: {json.dumps(default)}")
        lines.append(f"      {text}")
    return "\n".join(lines) + "\n"


def _bool(v: str) -> bool:
    low = v.lower()
    if low in ("1", "true", "yes", "on", "t", "y"):
        return True
    if low in ("0", "false", "no", "off", "f", "n"):
        return False
    raise argparse.ArgumentTypeError(f"not a bool: {v!r}")


def parse_flags(argv: Sequence[str]) -> Dict[str, Any]:
    """Flags as gflags writes them: ``-name=value``, ``--name=value``,
    ``--name value``, ``--name`` / ``--noname`` for bools."""
    opts = {k: d for k, (d, _t, _h) in _FLAGS.items()}
    it = iter(argv)
    for arg in it:
        if not arg.startswith("-"):
            raise SystemExit(f"gostore-client: unexpected argument {arg!r}")
        name, eq, value = arg.lstrip("-").partition("=")
        if name not in _FLAGS and name.startswith("no") and _FLAGS.get(name[2:], (0, str, ""))[1] is bool and not eq:
            opts[name[2:]] = False
            continue
        if name in ("help", "h"):
            sys.stdout.write(usage())
            raise SystemExit(0)
        if name not in _FLAGS:
            raise SystemExit(f"gostore-client: unknown flag --{name} (--help lists them)")
        typ = _FLAGS[name][1]
        if not eq:
            if typ is bool:
                opts[name] = True
                continue
            value = next(it, None)
            if value is None:
                raise SystemExit(f"gostore-client: --{name} needs a value")
        try:
            opts[name] = _bool(value) if typ is bool else typ(value)
        except (ValueError, argparse.ArgumentTypeError):
            raise SystemExit(f"gostore-client: --{name}={value!r} is not a {typ.__name__}") from None
    return opts


def main(argv: Optional[Sequence[str]] = None) -> int:
    opts = parse_flags(sys.argv[1:] if argv is None else argv)
    logging.basicConfig(
        level=logging.INFO, stream=sys.stderr,
        format="time=%(asctime)s level=%(levelname)s msg=%(message)s",
    )
    if not 0 <= opts["ipc_spin_us"] <= P.MAX_SPIN_US:
        _log.error("gostore-client: --ipc_spin_us %d: from 0 to %d", opts["ipc_spin_us"], P.MAX_SPIN_US)
        return 1
    host = opts["host"]
    advertised = "127.0.0.1" if host in ("0.0.0.0", "") else host
    ipc = opts["ipc_socket_path"] or default_ipc_path(opts["port"])
    try:
        ipc_lock = claim_ipc_path(ipc)  # before setup: a refused start takes nothing from the pool
    except (IpcPathTaken, OSError) as e:
        _log.error("gostore-client: %s", e)
        return 1
    store = MooncakeDistributedStore()
    kwargs: Dict[str, Any] = {}
    if opts["log_level"]:
        kwargs["log_level"] = opts["log_level"]
    if opts["cluster_id"]:
        kwargs["cluster_id"] = opts["cluster_id"]
    local_buffer = opts["local_buffer_size"]
    if local_buffer.strip() in ("0", ""):
        # Mooncake's default. The server's reads into a small scratch buffer
        # (an application's get) are copying calls, which a client without
        # a local buffer refuses; applications stage their memory themselves.
        local_buffer = _SERVER_MIN_LOCAL_BUFFER
    rc = store.setup(
        advertised, opts["metadata_server"], opts["global_segment_size"], local_buffer,
        opts["protocol"], opts["device_names"], opts["master_server_address"], None,
        opts["enable_offload"], opts["ssd_offload_path"], opts["tenant_id"],
        opts["enable_http_server"], opts["http_port"], **kwargs,
    )
    if rc != 0:
        _log.error("gostore-client: setup failed (%s)", ErrorCode.name_of(rc))
        return 1
    try:
        server = StandaloneServer(store, host, opts["port"], ipc, spin_us=opts["ipc_spin_us"])
    except OSError as e:
        _log.error("gostore-client: cannot listen on %s:%d / %s: %s", host, opts["port"], ipc, e)
        store.close()
        return 1

    def stop(_sig: int, _frame: Any) -> None:
        threading.Thread(target=server.shutdown, daemon=True).start()

    signal.signal(signal.SIGTERM, stop)
    signal.signal(signal.SIGINT, stop)
    _log.info("gostore-client: serving segment %s on %s:%d, ipc %s", store.get_hostname(), host, server.port, ipc)
    print(json.dumps({"ready": True, "port": server.port, "ipc_socket_path": ipc, "segment": store.get_hostname()}),
          flush=True)
    server.serve_forever()
    store.close()
    os.close(ipc_lock)
    return 0


if __name__ == "__main__":
    sys.exit(main())
