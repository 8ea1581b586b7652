"""Standalone mode, application side: a store whose calls run in a
``gostore-client`` process (``setup_dummy``).

The application process loads no Go runtime. :class:`RemoteLibrary` stands
in for the native library: it has the ``gs_*`` functions the store calls,
and each forwards its call (:mod:`.protocol`) over a Unix socket to the
``gostore-client`` that owns the segment, the transfer engine and the
master connection. Bytes never cross the socket: they lie in shared memory
(``memfd`` regions) both processes map:

* every ``alloc_from_mem_pool`` is a region of its own, shared at once;
  pointers into it go to the server as they are (zero-copy);
* this process's own memory (the ``bytes`` of ``get``/``get_batch``, a
  ``put``'s value) goes to the server as it is, tagged, for the calls that
  take it (``cross_memory``): the server's library copies it straight to or
  from the owner's segment with ``process_vm_readv``/``writev``, one copy
  where staging made two. It must be allowed to: at session start this
  process names the server its tracer (``PR_SET_PTRACER``, where Yama asks
  for it) and the server checks it can read a nonce here (the CROSS frame);
  ``CROSS_MEMORY = False`` turns it off;
* any other memory a call reads or writes is staged through the *local
  buffer* region (``local_buffer_size`` bytes), or, when that is full or
  absent, through the *overflow* region: shared once and kept for the
  next large call (a region made and mapped for each call cost page
  faults on both sides, several times the copy), grown to the largest
  call up to ``OVERFLOW_MAX`` bytes, and let go at the first call after
  ``OVERFLOW_IDLE_S`` seconds unused. A call it cannot serve (in use by
  another thread, or larger) gets a region of its own.
* a copying get of ``PLACES_MIN`` bytes or more into this process's own
  memory copies here the objects that lie in host memory on this host,
  from the segment mapped read-only (:mod:`.places`): one memcpy, where
  the server's cross-memory write runs at a fraction of its speed; the
  server copies the rest. Where they lie (``gs_get_places``) comes with the
  answer to the call that looked them up; when everything was copied
  here inside its lease, the call that ends the get does not wait for
  its answer (read before the connection's next call);
* copies this process keeps (``get_buffer``'s, copying tensor reads')
  land in the local buffer while it has room, then in *lend regions*:
  ``LEND_CHUNK`` bytes or more each, shared once and kept for the next
  copies, at most ``GOSTORE_HEAP_RETAIN_BYTES`` in all, and let go at the
  first call after one held no copy for ``LEND_IDLE_S`` seconds. The
  copies of one call share one block of room (up to ``LEND_BLOCK_MAX``
  bytes in all), given back with the last of them; small values are read
  straight into it where they start on ``shm.ALIGN`` bytes (the store's
  packed reads take their scratch buffer from the same memory:
  ``packed_scratch``).

One connection per thread, all attached to one server-side session that
holds the regions; the server drops them when the last connection closes.

``fork()``: the child reconnects on its first call with a session of its own,
a staging region of its own, and the regions it inherited (their memory is
shared with the parent, as any ``MAP_SHARED`` memory is). A server that went
away is reconnected to at the next call; calls in between fail with -900.

The package: this module is the application side, kept in the package's
``__init__`` so that its documented settings (``CROSS_MEMORY``,
``LEND_IDLE_S``, ``LEND_BLOCK_MAX``, ``PLACES_MIN``, docs/standalone.md) stay
attributes of ``gostore.standalone``, the module that reads them.
:mod:`.protocol` is the wire protocol both sides speak, :mod:`.server` the
``gostore-client`` process, :mod:`.places` the segments this side maps
read-only, :mod:`.shm` the shared-memory regions and cross-memory checks.
"""

from __future__ import annotations

import ctypes
import json
import logging
import os
import socket
import threading
import time
import weakref
from array import array
from typing import Any, Callable, Dict, List, Optional, Sequence, Set, Tuple

from ..buffers import heap as _heap, hostmem
from ..buffers.pins import SCRATCH_BYTES, new_bytes, packed_hits, scratch_buffer
from ..errors import ErrorCode
from . import places as _places, protocol as P, shm as _shm

__all__ = ["RemoteLibrary", "ask_ipc_path", "HELLO_TIMEOUT_S", "OVERFLOW_MAX", "OVERFLOW_IDLE_S", "CROSS_MEMORY",
           "PLACES_MIN"]

_log = logging.getLogger("gostore.standalone")
# How often a closed store logs the calls it refuses (the library's store
# does the same, bindings/store.go).
_CLOSED_LOG_EVERY_S = 10.0

HELLO_TIMEOUT_S = 5.0
OVERFLOW_MAX = 1 << 30  # the largest overflow region kept between calls
OVERFLOW_IDLE_S = 30.0  # an overflow region unused this long is let go
CROSS_MEMORY = True  # offer the server this process's memory (see the module text)
LEND_CHUNK = 64 << 20  # the least a lend region holds (see the module text)
LEND_IDLE_S = 30.0  # a lend region with no copy in it, and none made or freed this long, is let go
# The copies of one get_buffer call share one block of room up to this
# many bytes in all (see RemoteLibrary._lend_all); larger calls lend room
# per copy, whose own cost is small beside the copy's.
LEND_BLOCK_MAX = 4 << 20
# A copying get with at least this many bytes to write into this process's
# own memory copies what it can from the segments here (see the module
# text); below it the call to the server to ask where they lie costs more
# than the copy saves (a server answers unasked from P.PLACES_MIN up).
# Larger than any get: the server copies everything.
PLACES_MIN = P.PLACES_MIN
_RPC_FAIL = int(ErrorCode.RPC_FAIL)
_INTERNAL = int(ErrorCode.INTERNAL_ERROR)
_HANDLE = 1  # the only store handle an application holds


def spin_us_from_env() -> int:
    """``GOSTORE_IPC_SPIN_US``: how long a call polls for gostore-client's
    answer, in microseconds (unset: ``DEFAULT_SPIN_US``; 0: never). A
    value that is not a whole number from 0 to ``MAX_SPIN_US`` is logged
    and the default used."""
    raw = os.environ.get("GOSTORE_IPC_SPIN_US", "").strip()
    if not raw:
        return P.DEFAULT_SPIN_US
    try:
        us = int(raw)
    except ValueError:
        us = -1
    if not 0 <= us <= P.MAX_SPIN_US:
        _log.warning("gostore: GOSTORE_IPC_SPIN_US=%r is not a whole number of microseconds from 0 to %d: %d used",
                     raw, P.MAX_SPIN_US, P.DEFAULT_SPIN_US)
        return P.DEFAULT_SPIN_US
    return us


def ask_ipc_path(server_address: str, timeout: float = HELLO_TIMEOUT_S) -> str:
    """The IPC socket path a ``gostore-client`` at ``host:port`` serves on
    (it answers one JSON line to any TCP connection). Raises OSError."""
    host, _, port = server_address.rpartition(":")
    if not host or not port.isdigit():
        raise OSError(f"server_address {server_address!r} is not host:port")
    with socket.create_connection((host.strip("[]"), int(port)), timeout=timeout) as s:
        data = b""
        while not data.endswith(b"\n") and len(data) < 4096:
            try:
                chunk = s.recv(4096)
            except socket.timeout:
                # gostore-client answers at once; a master's RPC port
                # waits for a request instead.
                raise OSError(f"{server_address} answered nothing in {timeout:g} s: is it gostore-client's "
                              "--port (not the master's)?") from None
            if not chunk:
                break
            data += chunk
    try:
        info = json.loads(data)
        return str(info["ipc_socket_path"])
    except (ValueError, KeyError, TypeError):
        raise OSError(f"{server_address} is not a gostore-client (answered {data[:80]!r})") from None


class _Connection:
    __slots__ = ("frames", "pending", "places", "owed")

    def __init__(self, sock: socket.socket, spin_us: int, gate: P.SpinGate) -> None:
        # Polls for each answer (hot 0: the answer to a call just sent is
        # awaited), up to the spin, before the thread sleeps.
        self.frames = P.Conn(sock, spin_us, gate, hot=0)
        self.pending: Dict[int, int] = {}  # get handle -> key count
        self.places: Dict[int, P.Places] = {}  # get handle -> where its objects lie, as its reply said
        self.owed = 0  # answers of calls sent without waiting, not read yet


class _ServerError(Exception):
    def __init__(self, code: int, message: str) -> None:
        super().__init__(message)
        self.code = code


_live: "weakref.WeakSet[RemoteLibrary]" = weakref.WeakSet()

# One SpinGate for every standalone store of this process: the CPUs a
# process may poll on are its own, however many stores it opens (a gate
# per store let two stores poll on more CPUs than the process has). A
# forked child starts a gate of its own: a thread polling in the parent
# at the fork does not exist in the child, but would count in the copy.
_gate_lock = threading.Lock()
_gate: Optional[P.SpinGate] = None
_gate_pid = 0


def process_gate() -> P.SpinGate:
    """The SpinGate that bounds this process's polling reads."""
    global _gate, _gate_pid
    with _gate_lock:
        if _gate is None or _gate_pid != os.getpid():
            _gate, _gate_pid = P.SpinGate(), os.getpid()
        return _gate


class _Lent:
    """Gives a lent copy's room back when it goes (the memory of an array
    lend_array made)."""

    __slots__ = ("lib", "copy")

    def __init__(self, lib: "RemoteLibrary", copy: "_Copy") -> None:
        self.lib, self.copy = lib, copy

    def __del__(self) -> None:
        try:
            self.lib._release_copy(self.copy)
        except Exception:  # at interpreter exit the modules it uses may be gone; so is the room
            pass


class _Block:
    """Room in shared memory that the copies of one call share (``off`` and
    ``size`` in ``arena``): one allocation and one free for a batch instead
    of one each per copy. Given back when the last of its copies goes."""

    __slots__ = ("arena", "off", "size", "_left")

    def __init__(self, arena: _shm.Arena, off: int, size: int, copies: int) -> None:
        self.arena, self.off, self.size = arena, off, size
        # One token per copy; whoever pops token 0 (the last one, list.pop
        # takes from the end) gives the room back. list.pop is atomic:
        # __del__ may release a copy in any thread, so the count needs no
        # lock of its own (the last release takes the arena's, as every
        # free does).
        self._left = list(range(copies))

    def release_one(self) -> None:
        if self._left.pop() == 0:
            self.arena.free(self.off, self.size)


class _Copy:
    """A get_buffer copy this process lends: ``size`` bytes at ``addr``, in
    shared memory (``off`` in ``arena``, the local buffer's or a lend
    region's, alone or in a ``block`` with the other copies of its call) or
    in this process's own memory (``mem`` keeps it)."""

    __slots__ = ("addr", "size", "arena", "off", "mem", "block")

    def __init__(self, addr: int, size: int, arena: Optional[_shm.Arena], off: int, mem: Any = None,
                 block: Optional[_Block] = None) -> None:
        self.addr, self.size, self.arena, self.off, self.mem = addr, size, arena, off, mem
        self.block = block

    @classmethod
    def private(cls, size: int) -> "_Copy":
        """A copy in this process's own memory: uninitialized (a ctypes
        array is zeroed first, a second pass over every byte), and from
        malloc, whose freed memory the next batch reuses (buffers.heap)."""
        mem, addr = new_bytes(size)
        return cls(addr, size, None, -1, mem)


def _block_copies(room: _Copy, size: int, parts: List[Tuple[int, int, int]]) -> List[Tuple[int, _Copy]]:
    """(i, copy) for each (i, off, n) of ``parts``: n bytes at off in
    ``room``, the copies sharing its first ``size`` bytes as one _Block."""
    if not parts:
        return []
    arena = room.arena
    assert arena is not None
    block = _Block(arena, room.off, size, len(parts))
    return [(i, _Copy(room.addr + off, n, arena, room.off + off, block=block)) for i, off, n in parts]


class _SharedScratch:
    """The context RemoteLibrary.packed_scratch gives."""

    __slots__ = ("lib", "room")

    def __init__(self, lib: "RemoteLibrary") -> None:
        self.lib = lib
        self.room: Optional[_Copy] = None

    def __enter__(self) -> int:
        self.room, scratch = self.lib._scratch_room()
        return scratch

    def __exit__(self, *_exc: Any) -> None:
        self.lib._release_copy(self.room)
        self.room = None


class RemoteLibrary:
    """The ``gs_*`` functions of a store in standalone mode (see the module
    text). Created by ``setup_dummy``; ``connect()`` makes the first
    connection, so a server that is not there fails setup."""

    def __init__(self, ipc_path: str, mem_pool_size: int, local_buffer_size: int,
                 spin_us: int = P.DEFAULT_SPIN_US) -> None:
        """``spin_us``: how long a call polls for the server's answer before
        its thread sleeps (0: never)."""
        self.ipc_path = ipc_path
        self.spin_us = spin_us
        self.mem_pool_size = mem_pool_size
        self.local_buffer_size = local_buffer_size
        self._pool_used = 0
        self._pool: List[_shm.Region] = []  # alloc_from_mem_pool regions
        # get_buffer copies by address (see _Copy)
        self._buffers: Dict[int, _Copy] = {}
        self._closed = False
        self._closed_logged = -_CLOSED_LOG_EVERY_S  # when a refusal after close was last logged
        self._reset()
        _live.add(self)

    def _reset(self) -> None:
        """Fresh per-process state (at creation and in a forked child)."""
        self._pid = os.getpid()
        # get_buffer copies in shared memory (the local buffer, the lend
        # regions) are the parent's in a forked child: forgotten here, their
        # memory mapped and shared with the parent as any region inherited;
        # the child lends from regions of its own.
        self._buffers = {a: b for a, b in self._buffers.items() if b.arena is None}
        self._lent: List[Tuple[_shm.Region, _shm.Arena]] = []
        self._lent_bytes = 0  # their sizes, and those being made
        self._lock = threading.Lock()
        self._tls = threading.local()
        self._gate = process_gate()  # bounds the polling reads of every store here
        self._conns: List[_Connection] = []
        self._token = b""
        self._staging: Optional[_shm.Region] = None
        self._arena = _shm.Arena(0)
        # The overflow region (see the module text): None or shared with
        # the session; busy while a call stages through it.
        self._overflow: Optional[_shm.Region] = None
        self._overflow_busy = False
        self._overflow_used = 0.0
        self._cross = False  # the server copies this process's memory itself
        self._segments = _places.Segments()  # segments mapped here (copying gets)

    def _after_fork(self) -> None:
        for c in self._conns:  # our copies of the parent's sockets; its own stay open
            c.frames.sock.close()
        self._segments.forget_all()  # the parent's mappings, inherited
        self._reset()

    # ---- connections --------------------------------------------------------

    def connect(self) -> int:
        """Open this thread's connection now; 0 or -900 (logged)."""
        try:
            self._conn()
            return 0
        except (OSError, _ServerError, P.FrameError) as e:
            _log.error("gostore: cannot reach gostore-client at %s: %s", self.ipc_path, e)
            return _RPC_FAIL

    def _conn(self) -> _Connection:
        if self._closed:
            raise _ServerError(_INTERNAL, "the store is closed")
        c = getattr(self._tls, "conn", None)
        if c is not None:
            return c
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        try:
            sock.settimeout(HELLO_TIMEOUT_S)
            sock.connect(self.ipc_path)
            sock.settimeout(None)
            c = _Connection(sock, self.spin_us, self._gate)
            with self._lock:
                self._attach(c)
                self._conns.append(c)
        except BaseException:
            sock.close()
            raise
        self._tls.conn = c
        return c

    def _attach(self, c: _Connection) -> None:
        """Join this process's session, or open one and share every region
        with it (first connection, a forked child, a restarted server)."""
        if self._token:
            try:
                self._roundtrip(c, P.frame(P.HELLO, [self._token]))
                return
            except _ServerError:
                pass  # a server that does not know it (restarted): a new session
        kind, body = self._roundtrip(c, P.frame(P.HELLO, [b""]))
        self._token = P.get_values(body, 1)[0]
        self._cross = CROSS_MEMORY and self._offer_memory(c)
        if self._staging is None and self.local_buffer_size > 0:
            self._staging = _shm.Region(self.local_buffer_size, "gostore-staging")
            self._arena = _shm.Arena(self.local_buffer_size)
        overflow = [self._overflow] if self._overflow else []
        lent = [r for r, _ in self._lent]
        for r in ([self._staging] if self._staging else []) + overflow + self._pool + lent:
            self._share(c, r)

    def _offer_memory(self, c: _Connection) -> bool:
        """Let the server reach this process's memory, and ask it whether it
        can (it reads a nonce from here): True when the session's copying
        calls may name this process's memory."""
        server_pid, _uid = P.peer_pid_uid(c.frames.sock)
        try:
            if server_pid > 0:
                _shm.name_tracer(server_pid)
        except OSError as e:
            _log.info("gostore: gostore-client may not reach this process's memory (%s): calls are staged", e)
            return False
        nonce = os.urandom(16)
        held = ctypes.create_string_buffer(nonce, len(nonce))
        _kind, body = self._roundtrip(c, P.frame(P.CROSS, [ctypes.addressof(held), nonce]))
        return P.get_values(body, 1)[0] == 1

    def _share(self, c: _Connection, r: _shm.Region) -> None:
        self._roundtrip(c, P.frame(P.REGION, [r.addr, r.size]), [r.fd])

    def _roundtrip(self, c: _Connection, data: bytes, fds: Sequence[int] = ()) -> Tuple[int, memoryview]:
        self._read_owed(c)
        c.frames.send(data, fds)
        kind, body = c.frames.read()
        if kind == P.ERROR:
            code, msg = P.get_values(body, 2)
            raise _ServerError(code, msg.decode("utf-8", "replace"))
        return kind, body

    @staticmethod
    def _send_owed(c: _Connection, data: bytes) -> None:
        """Send a call whose answer is read later (_read_owed)."""
        c.frames.send(data)
        c.owed += 1

    @staticmethod
    def _read_owed(c: _Connection) -> None:
        """Read the answers of the calls sent without waiting (they came
        long ago, as a rule): only an error says anything, and it is logged."""
        while c.owed:
            c.owed -= 1
            kind, body = c.frames.read()
            if kind == P.ERROR:
                code, msg = P.get_values(body, 2)
                _log.error("gostore: a get's end, sent without waiting, was refused (%s): %s", code,
                           msg.decode("utf-8", "replace"))

    def _drop_conn(self) -> None:
        c = getattr(self._tls, "conn", None)
        self._tls.conn = None
        if c is not None:
            with self._lock:
                if c in self._conns:
                    self._conns.remove(c)
            c.frames.sock.close()

    def close(self) -> int:
        """Close every connection (the server then forgets this session)
        and the staging region; regions from alloc_from_mem_pool stay
        mapped for pointers the application still holds."""
        with self._lock:
            self._closed = True
            conns, self._conns = self._conns, []
        for c in conns:
            c.frames.sock.close()
        self._tls = threading.local()
        self._segments.close()
        return 0

    # ---- memory ------------------------------------------------------------

    def alloc(self, size: int) -> int:
        """A region of ``size`` bytes shared with the server; 0 when the pool
        (``mem_pool_size``) is spent or the server refuses it."""
        if size <= 0:
            return 0
        with self._lock:
            if self._pool_used + size > self.mem_pool_size:
                _log.error(
                    "gostore: alloc_from_mem_pool(%d): the pool has %d of %d bytes left",
                    size, self.mem_pool_size - self._pool_used, self.mem_pool_size,
                )
                return 0
            self._pool_used += size
        try:
            r = _shm.Region(size, "gostore-pool")
        except OSError as e:
            _log.error("gostore: alloc_from_mem_pool(%d): %s", size, e)
            with self._lock:
                self._pool_used -= size
            return 0
        try:
            self._share(self._conn(), r)
        except (OSError, _ServerError, P.FrameError) as e:
            _log.error("gostore: alloc_from_mem_pool(%d): gostore-client refused the region: %s", size, e)
            self._drop_conn()
            r.close()
            with self._lock:
                self._pool_used -= size
            return 0
        with self._lock:
            self._pool.append(r)
        return r.addr

    def _region_of(self, addr: int, size: int) -> Optional[_shm.Region]:
        for r in self._pool:
            if r.contains(addr, size):
                return r
        for r, _ in self._lent:
            if r.contains(addr, size):
                return r
        s = self._staging
        return s if s is not None and s.contains(addr, size) else None

    # ---- the gs_* functions -----------------------------------------------------

    def __getattr__(self, name: str) -> Callable[..., Any]:
        if not name.startswith("gs_"):
            raise AttributeError(name)
        call = P.CALLS.get(name)
        fn = self._forwarder(name, call) if call else self._unavailable(name)
        setattr(self, name, fn)
        return fn

    def gs_store_new(self) -> int:
        return _HANDLE

    def gs_store_free(self, h: int) -> None:
        self.close()

    def gs_close(self, h: int) -> int:
        return self.close()

    def gs_setup(self, h: int, doc: bytes, n: int) -> int:
        _log.error("gostore: setup() on a store in standalone mode: it was set up by setup_dummy()")
        return _INTERNAL

    def gs_register_buffer(self, h: int, ptr: int, size: int) -> int:
        if self._region_of(ptr, size) is not None:
            return 0
        # Memory from MooncakeHostMemAllocator is a memfd too: share it
        # with gostore-client as alloc_from_mem_pool's regions are shared
        # (outside the pool's budget, as Mooncake's dummy client does).
        held = hostmem.mapping_of(ptr, size)
        if held is None:
            _log.error(
                "gostore: register_buffer(0x%x, %d): in standalone mode only memory from "
                "alloc_from_mem_pool or MooncakeHostMemAllocator can be registered", ptr, size,
            )
            return _INTERNAL
        r = _shm.Region.borrowed(held[2], held[0], held[1])
        try:
            self._share(self._conn(), r)
        except (OSError, _ServerError, P.FrameError) as e:
            _log.error("gostore: register_buffer(0x%x, %d): gostore-client refused the region: %s", ptr, size, e)
            self._drop_conn()
            return _INTERNAL
        with self._lock:
            self._pool.append(r)
        return 0

    def gs_unregister_buffer(self, h: int, ptr: int) -> int:
        return 0 if self._region_of(ptr, 1) is not None else _INTERNAL

    def gs_get_buffers(self, h: int, n: int, keys: bytes, lens: int, ptrs_out: int, sizes_out: int) -> None:
        """get_buffer: a copy per object in shared memory while there is
        room (else in this process's own), released by gs_free_buffer.
        Objects that fit a scratch buffer (SCRATCH_BYTES) together come back
        in one round trip: read into a room in shared memory (see _lend)
        that their copies then share, the unused end given back at once;
        larger ones in two (their sizes, then the read straight into their
        rooms)."""
        sizes = array("q", bytes(8 * n))
        results = array("q", bytes(8 * n))
        room, scratch = self._scratch_room()  # the copies may stay where they are read
        try:
            pending = self.gs_get_packed(h, n, keys, lens, scratch, SCRATCH_BYTES, 0,
                                         sizes.buffer_info()[0], results.buffer_info()[0])
            out_p = (ctypes.c_uint64 * n).from_address(ptrs_out)
            out_s = (ctypes.c_int64 * n).from_address(sizes_out)
            for i in range(n):
                out_p[i], out_s[i] = 0, sizes[i]  # a miss keeps its code
            if pending < 0:
                return
            if pending == 0:  # read already, back to back in the scratch
                hits = packed_hits(sizes, results)
                if room is not None and all(hit[0] % _shm.ALIGN == 0 for hit in hits if hit is not None):
                    lent, room = self._share_room(room, hits), None  # the copies stay where they were read
                else:  # copied out, each on ALIGN bytes as a room of its own is
                    lent = self._lend_all([i for i, hit in enumerate(hits) if hit is not None], sizes)
                    for i, copy in lent:
                        ctypes.memmove(copy.addr, scratch + hits[i][0], copy.size)  # type: ignore[index]
            else:  # nothing read yet: each copy is read into its room
                self._release_copy(room)  # first: the copies may take its room
                room = None
                lent = []
                try:
                    lent = self._lend_all([i for i, size in enumerate(sizes) if size > 0], sizes)
                    ptrs = array("Q", [copy.addr for _, copy in lent])
                    lens_ = array("Q", [copy.size for _, copy in lent])
                    nparts = array("I", bytes(4 * n))
                    for i, _ in lent:
                        nparts[i] = 1
                except BaseException:
                    for _, copy in lent:
                        self._release_copy(copy)
                    self.gs_get_abort(h, pending)
                    raise
                # gs_get_finish ends the pending get whatever happens; the
                # results loop below gives back the rooms of what it did not read.
                self.gs_get_finish(h, pending, ptrs.buffer_info()[0], lens_.buffer_info()[0],
                                   nparts.buffer_info()[0], 0, results.buffer_info()[0])
        finally:
            self._release_copy(room)  # the scratch's room, unless the copies took it
        held: List[Optional[_Copy]] = [None] * n  # what self._buffers keeps of each copy
        for i, copy in lent:
            held[i] = copy
        for i in range(n):
            copy = held[i]
            if copy is not None and results[i] == sizes[i]:
                self._buffers[copy.addr] = copy
                out_p[i] = copy.addr
                continue
            self._release_copy(copy)
            if results[i] < 0:
                out_s[i] = results[i]
            elif sizes[i] >= 0:  # read short of its size
                out_s[i] = int(ErrorCode.INVALID_READ)

    def _scratch_room(self) -> Tuple[Optional["_Copy"], int]:
        """(room, address) of a scratch buffer for one packed read:
        SCRATCH_BYTES of shared memory while there is room (see _lend),
        else (None, the thread's own scratch). The connection comes first:
        it brings the local buffer (a forked child has none until then)."""
        try:
            self._conn()
        except (OSError, _ServerError, P.FrameError):
            return None, scratch_buffer()  # the call that follows fails as it would have
        room = self._lend(SCRATCH_BYTES)
        return room, (scratch_buffer() if room is None else room.addr)

    def packed_scratch(self) -> "_SharedScratch":
        """A scratch buffer for one packed read (the store's ``_scratch``):
        room in shared memory while there is some (see _lend), given back
        when the context ends, else the thread's own. The server writes
        values there at memcpy speed, where the thread's own buffer takes a
        cross-memory copy per value (a system call each: most of the time
        of a batch of small values)."""
        return _SharedScratch(self)

    @staticmethod
    def _share_room(room: "_Copy", hits: List[Optional[Tuple[int, int]]]) -> List[Tuple[int, "_Copy"]]:
        """(index, copy) of each value a packed read left in ``room`` (at
        ``hits``, as packed_hits gives them): copies in place, in one block
        of the room's used start; the rest of the room is given back now,
        all of it when no value was read."""
        arena = room.arena
        assert arena is not None
        used = max((off + size for off, size in filter(None, hits)), default=0)
        keep = _shm.round_up(used)
        if keep < room.size:
            arena.free(room.off + keep, room.size - keep)
        return _block_copies(room, keep, [(i, hit[0], hit[1]) for i, hit in enumerate(hits) if hit is not None])

    def gs_get_finish(self, h: int, pending: int, ptrs: int, sizes: int, nparts: int, zero_copy: int,
                      results: int) -> None:
        """Forwarded, once the objects the server places on this host are
        copied here (see the module text): those of one part in this
        process's own memory, when they are PLACES_MIN bytes or more."""
        forward = self._forward_finish
        c = getattr(self._tls, "conn", None)
        n = c.pending.get(int(pending), 0) if c is not None and os.getpid() == self._pid else 0
        if n <= 0:
            return forward(h, pending, ptrs, sizes, nparts, zero_copy, results)
        counts = array("I")
        counts.frombytes(ctypes.string_at(nparts, 4 * n))
        total = sum(counts)
        ps, ss = array("Q"), array("Q")
        if total:
            ps.frombytes(ctypes.string_at(ptrs, 8 * total))
            ss.frombytes(ctypes.string_at(sizes, 8 * total))
        own: List[Tuple[int, int]] = []  # (object, its part): one part, in this process's own memory
        first = want = 0
        for i, k in enumerate(counts):
            if k == 1 and ps[first] and ss[first] and self._region_of(ps[first], ss[first]) is None:
                own.append((i, first))
                want += ss[first]
            first += k
        if want < PLACES_MIN:
            return forward(h, pending, ptrs, sizes, nparts, zero_copy, results)
        # A destination that is not memory is the server's to refuse.
        own = [(i, j) for i, j in own if _shm.mapped(ps[j], ss[j])]
        copied: Set[int] = set()
        placed = c.places.get(int(pending))
        try:
            if placed is None:
                placed = P.ask_places(self.gs_get_places, h, pending, n)
            if placed is not None and placed is not P.NOWHERE:
                copied = self._copy_placed(placed, own, ps, ss)
        except BaseException:
            # Interrupted before the finish went: end the reads, then let
            # the caller see why.
            self.gs_get_abort(h, pending)
            raise
        if not copied or not self._within_leases(placed, copied):
            # Nothing copied here, or a copy that outlived its lease (its
            # bytes may be a newer object's): the server reads every object
            # into its destination, and looks again and reads again what
            # outlives the lease (client.readAgain) before any -707.
            return forward(h, pending, ptrs, sizes, nparts, zero_copy, results)
        # The server ends the get: it counts the objects copied here read
        # (no parts given) once their leases check out, and reads the rest.
        keep_ps, keep_ss = array("Q"), array("Q")
        first = 0
        for i, k in enumerate(counts):
            if i in copied:
                counts[i] = 0
            else:
                keep_ps.extend(ps[first:first + k])
                keep_ss.extend(ss[first:first + k])
            first += k
        if not keep_ps and self._all_copied(placed, copied):
            # Nothing left for the server to read, and every copy ended
            # inside its lease: the results are known here, and the finish
            # (the end of the reads) goes without waiting for its answer,
            # read before this connection's next call.
            done = array("q", placed.found)
            for i in copied:
                done[i] = placed.sizes[i]
            ctypes.memmove(results, done.buffer_info()[0], 8 * n)
            forward(h, pending, 0, 0, counts.buffer_info()[0], zero_copy, results, defer=True)
            return None
        return forward(h, pending, keep_ps.buffer_info()[0] if keep_ps else 0,
                       keep_ss.buffer_info()[0] if keep_ss else 0, counts.buffer_info()[0], zero_copy, results)

    @staticmethod
    def _all_copied(placed: P.Places, copied: Set[int]) -> bool:
        """Whether every object the get found was copied here."""
        return placed.found is not None and all(i in copied for i, size in enumerate(placed.found) if size > 0)

    @staticmethod
    def _within_leases(placed: P.Places, copied: Set[int]) -> bool:
        """Whether the copies of ``copied``, over now, ended inside their
        leases as a reply that opened the get gave them. A lease counts
        from the server's lookup, after the call left here (``sent``):
        ending before ``sent`` + lease is ending inside it."""
        lease = min((placed.leases_ms[i] for i in copied if placed.leases_ms[i]), default=0)
        return lease == 0 or time.monotonic() < placed.sent + lease / 1000

    @property
    def _forward_finish(self) -> Callable[..., Any]:
        f = self.__dict__.get("_finish_forwarder")
        if f is None:
            f = self._finish_forwarder = self._forwarder("gs_get_finish", P.CALLS["gs_get_finish"])
        return f

    def _copy_placed(self, placed: P.Places, own: List[Tuple[int, int]], ps: array, ss: array) -> Set[int]:
        """Copy here the objects of ``own`` (object, part) that ``placed``
        puts in host memory on this host; the objects copied."""
        segs = _places.parse_paths(placed.paths)
        held: Dict[int, Optional[int]] = {}
        parts: List[Tuple[int, int, int]] = []
        copied: Set[int] = set()
        ids, offs, lens = placed.seg_ids, placed.offsets, placed.sizes
        try:
            for i, j in own:
                seg = ids[i]
                if seg not in segs or ss[j] < lens[i] or offs[i] + lens[i] > segs[seg][0]:
                    continue  # not placed, or a destination too small: the server answers
                if seg not in held:
                    held[seg] = self._segments.acquire(seg, *segs[seg])
                base = held[seg]
                if base is None:
                    continue
                parts.append((ps[j], base + offs[i], lens[i]))
                copied.add(i)
            _places.copy_parts(parts)
        finally:
            for base in held.values():
                if base is not None:
                    self._segments.release(base)
        return copied

    def gs_free_buffer(self, h: int, ptr: int) -> None:
        self._release_copy(self._buffers.pop(ptr, None))

    def _lend(self, size: int, local_buffer: bool = True) -> Optional["_Copy"]:
        """Room in shared memory for a copy of ``size`` bytes the server
        writes (at memcpy speed, where this process's own memory takes cross
        memory or staging, two to three times slower): in the local buffer
        (unless not ``local_buffer``), else in a lend region, one made and
        shared with the session when none has room, while they hold at most
        GOSTORE_HEAP_RETAIN_BYTES in all; None past that."""
        def take(r: _shm.Region, arena: _shm.Arena) -> Optional[_Copy]:
            off = arena.alloc(size)
            return None if off is None else _Copy(r.addr + off, size, arena, off)

        places = [(self._staging, self._arena)] if local_buffer and self._staging is not None else []
        for r, arena in places + list(self._lent):
            copy = take(r, arena)
            if copy is not None:
                return copy
        grown = self._grow_lent(size)
        return None if grown is None else take(*grown)

    def _lend_all(self, wanted: List[int], sizes: Sequence[int]) -> List[Tuple[int, "_Copy"]]:
        """(i, room for a copy of sizes[i]) for each i of ``wanted``: one
        block in shared memory for them all when they take at most
        LEND_BLOCK_MAX bytes and a block fits (see _lend; the block goes
        back when the last copy does, so one copy kept holds the room of
        all), else each on its own, in shared memory while there is room,
        then in this process's own memory."""
        offs, total = [], 0
        for i in wanted:
            offs.append(total)
            total += _shm.round_up(sizes[i])
        if len(wanted) > 1 and total <= LEND_BLOCK_MAX:
            room = self._lend(total)
            if room is not None:
                return _block_copies(room, total, [(i, o, sizes[i]) for i, o in zip(wanted, offs)])
        out: List[Tuple[int, _Copy]] = []
        try:
            for i in wanted:
                out.append((i, self._lend(sizes[i]) or _Copy.private(sizes[i])))
        except BaseException:  # MemoryError from a private copy: the rooms lent so far go back
            for _, copy in out:
                self._release_copy(copy)
            raise
        return out

    def lend_array(self, size: int) -> Tuple[Any, int]:
        """A writable uint8 array of ``size`` bytes for a copying tensor read
        to land in, and its address: in a lend region, its room given back
        when the last view of it goes, else in this process's own memory.
        Never in the local buffer: tensors are often kept, and would hold
        the room other calls stage through."""
        import numpy as np

        copy = self._lend(size, local_buffer=False)
        if copy is None:
            arr = np.empty(size, dtype=np.uint8)
            return arr, arr.ctypes.data
        mem = (ctypes.c_char * size).from_address(copy.addr)
        mem._lent = _Lent(self, copy)  # goes with the array's last view
        return np.frombuffer(mem, dtype=np.uint8), copy.addr

    def _grow_lent(self, size: int) -> Optional[Tuple[_shm.Region, _shm.Arena]]:
        """A new lend region holding at least ``size`` bytes, shared with
        the session; None past the bound or when it cannot be made or
        shared (logged at debug: the copy goes to private memory)."""
        want = max(LEND_CHUNK, -(-size // LEND_CHUNK) * LEND_CHUNK)
        with self._lock:  # reserved before it is made: threads growing at once stay within the bound
            if self._lent_bytes + want > _heap.retain_bytes():
                return None
            self._lent_bytes += want
        r: Optional[_shm.Region] = None
        try:
            r = _shm.Region(want, "gostore-lend")
            self._share(self._conn(), r)
        except (OSError, _ServerError, P.FrameError) as e:
            _log.debug("gostore: no lend region of %d bytes (%s): the copy goes to private memory", want, e)
            if r is not None:
                r.close()
            with self._lock:
                self._lent_bytes -= want
            return None
        grown = (r, _shm.Arena(want))
        with self._lock:
            self._lent.append(grown)
        return grown

    def _release_copy(self, held: Optional["_Copy"]) -> None:
        """Give a get_buffer copy's room in shared memory back (one in this
        process's memory goes with its last reference)."""
        if held is None or held.arena is None:
            return
        if held.block is not None:
            held.block.release_one()
        else:
            held.arena.free(held.off, held.size)

    def _unavailable(self, name: str) -> Callable[..., Any]:
        def call(*_args: Any) -> int:
            _log.error("gostore: %s is not available in standalone mode", name)
            return _INTERNAL

        return call

    def _forwarder(self, name: str, call: P.Call) -> Callable[..., Any]:
        order = call.array_order
        enc_name = name.encode()

        def forward(*cargs: Any, defer: bool = False) -> Any:
            """``defer``: send the call and return None, its answer read
            before this connection's next call (a call with nothing to
            fill or stage only)."""
            if os.getpid() != self._pid:
                self._after_fork()
            args: List[Any] = list(cargs)
            outs: List[Tuple[int, int, int]] = []  # (arg index, address, entries)
            try:
                c = self._conn()
            except (OSError, _ServerError, P.FrameError) as e:
                return self._failed(name, call, cargs, e)
            # Read the caller's arrays (lengths from the arguments, as the ABI
            # defines them); the filled ones are written back after the reply.
            for i in order:
                a = call.args[i]
                n = a.length.of(args, c.pending)  # type: ignore[union-attr]
                addr = cargs[i]
                if a.kind == P.OUT:
                    outs.append((i, addr, n))
                    args[i] = None
                    continue
                arr = array(a.typecode)
                if n > 0:
                    arr.frombytes(ctypes.string_at(addr, n * P.ITEMSIZE[a.typecode]))
                args[i] = arr
            staged: List[Tuple[int, int, int]] = []  # (caller address, staging address, size)
            spans: List[Tuple[int, int]] = []  # staging allocations to free
            temp: Optional[_shm.Region] = None
            overflow = False
            try:
                temp, overflow = self._place_data(c, call, args, staged, spans)
                # The overflow region is shared already: only a call's own
                # region travels with it.
                own = None if overflow else temp
                frame_vals: List[Any] = [enc_name, own.addr if own else None, own.size if own else 0]
                frame_vals.extend(args)
                sent = time.monotonic()
                if defer:
                    self._send_owed(c, P.frame(P.CALL, frame_vals))
                    vals = [None]
                else:
                    kind, body = self._roundtrip(c, P.frame(P.CALL, frame_vals), [own.fd] if own else ())
                    vals = P.get_values(body)
                ret, filled = vals[0], vals[1:]
                for (i, addr, n), arr in zip(outs, filled):
                    if n > 0 and isinstance(arr, array):
                        ctypes.memmove(addr, arr.buffer_info()[0], min(n, len(arr)) * arr.itemsize)
                for p, dst, size in staged:
                    ctypes.memmove(p, dst, size)
            except (OSError, P.FrameError, _ServerError) as e:
                if not isinstance(e, _ServerError):
                    self._drop_conn()
                return self._failed(name, call, cargs, e)
            except BaseException:
                # KeyboardInterrupt while the answer was awaited: it would
                # come to this connection's next call, so the connection goes.
                self._drop_conn()
                raise
            finally:
                for off, n in spans:
                    self._arena.free(off, n)
                if overflow:
                    self._overflow_busy = False  # a plain store: only its holder writes it
                elif temp is not None:
                    temp.close()
                if call.ends_pending:  # answered or not, the handle is gone
                    c.pending.pop(int(cargs[1]), None)
                    c.places.pop(int(cargs[1]), None)
            if call.opens and isinstance(ret, int) and ret > 0:
                n = c.pending[ret] = int(cargs[1]) if call.opens == "pending" else 1
                placed = P.places_of(filled[len(outs):], n, filled[0] if filled else None, sent)
                if placed is not None:
                    c.places[ret] = placed
            return ret if call.returns else None

        forward.__name__ = name
        return forward

    def _failed(self, name: str, call: P.Call, cargs: Sequence[Any], err: Exception) -> Any:
        code = err.code if isinstance(err, _ServerError) else call.fail
        if not self._closed:
            _log.error("gostore: %s via gostore-client at %s failed: %s", name, self.ipc_path, err)
        elif time.monotonic() - self._closed_logged >= _CLOSED_LOG_EVERY_S:
            # A closed store refuses every call: one line per interval,
            # as the library's store does, not one per call.
            self._closed_logged = time.monotonic()
            _log.error("gostore: store is closed: %s refused; a closed store serves no call", name.removeprefix("gs_"))

        def write(i: int, arr: array) -> None:
            ctypes.memmove(cargs[i], arr.buffer_info()[0], len(arr) * arr.itemsize)

        return P.fail_results(name, call, cargs, code, write)

    def _place_data(self, c: _Connection, call: P.Call, args: List[Any], staged: List[Tuple[int, int, int]],
                    spans: List[Tuple[int, int]]) -> Tuple[Optional[_shm.Region], bool]:
        """Leave pointers into shared regions as they are; point the others
        at staging memory (filled now when the call reads it). Returns the
        region staged through when the local buffer could not hold the
        call, and whether it is the overflow region (else it is this
        call's own: sent with the call, closed after it)."""
        self._expire_overflow(c)
        self._expire_lent(c)
        self._segments.expire()
        cross = self._cross and call.cross_memory
        todo: List[Tuple[Any, int, int, int, str]] = []  # (holder, index, ptr, size, use)
        # A batch's pointers all in one shared region stay as they are; the
        # others are looked at one by one.
        whole = P.arrays_in_one_region(call, args, self._region_of)
        for holder, j, p, s, use in P.data_pointers(call, args, whole):
            if self._region_of(p, s) is not None:
                continue
            # A range running past the end of shared memory is a mistake,
            # as one straddling a registered buffer is in a client's own
            # process: refused (the server answers -600 for a null).
            straddles = self._region_of(p, 1) is not None or self._region_of(p + s - 1, 1) is not None
            if use == P.PROBE or straddles or not _shm.mapped(p, s):
                holder[j] = 0  # not shared / not memory: the server answers per entry
            elif cross:
                holder[j] = p | P.PROCESS_TAG  # the server copies it in place
            else:
                todo.append((holder, j, p, s, use))
        if not todo:
            return None, False
        total = sum(_shm.round_up(s) for _h, _j, _p, s, _u in todo)
        base_off = self._arena.alloc(total) if self._staging is not None else None
        temp: Optional[_shm.Region] = None
        overflow = False
        if base_off is None:
            temp = self._take_overflow(c, total)
            overflow = temp is not None
            if temp is None:
                temp = _shm.Region(total, "gostore-call")
            base = temp.addr
        else:
            spans.append((base_off, total))
            base = self._staging.addr + base_off  # type: ignore[union-attr]
        off = 0
        for holder, j, p, s, use in todo:
            dst = base + off
            if use == P.READS:
                ctypes.memmove(dst, p, s)
            else:
                staged.append((p, dst, s))
            holder[j] = dst
            off += _shm.round_up(s)
        return temp, overflow

    def _take_overflow(self, c: _Connection, total: int) -> Optional[_shm.Region]:
        """The overflow region, at least ``total`` bytes and marked busy;
        None when another call holds it, the call is larger than
        OVERFLOW_MAX, or a larger one cannot be made or shared."""
        with self._lock:
            if self._overflow_busy or total > OVERFLOW_MAX:
                return None
            self._overflow_busy = True
        r = self._overflow
        if r is None or r.size < total:
            r = self._grow_overflow(c, total)
        if r is None:
            self._overflow_busy = False
        else:
            self._overflow_used = time.monotonic()
        return r

    def _grow_overflow(self, c: _Connection, total: int) -> Optional[_shm.Region]:
        """Replace the overflow region (busy: ours) by one of at least
        ``total`` bytes, shared with the server; None when it cannot be."""
        old, self._overflow = self._overflow, None
        if old is not None:
            self._unshare(c, old)
        size = min(OVERFLOW_MAX, max(total, 2 * old.size if old is not None else 0))
        try:
            r = _shm.Region(size, "gostore-overflow")
        except OSError:
            return None
        try:
            self._share(c, r)
        except (OSError, _ServerError, P.FrameError) as e:
            _log.error("gostore: gostore-client refused a staging region of %d bytes: %s", size, e)
            r.close()
            return None
        self._overflow = r
        return r

    def _expire_overflow(self, c: _Connection) -> None:
        """Let the overflow region go when it went unused OVERFLOW_IDLE_S."""
        r = self._overflow
        if r is None or time.monotonic() - self._overflow_used < OVERFLOW_IDLE_S:
            return
        with self._lock:
            if self._overflow_busy or self._overflow is not r:
                return
            self._overflow = None
        self._unshare(c, r)

    def _expire_lent(self, c: _Connection) -> None:
        """Let the lend regions go that hold no copy and saw none made or
        freed for LEND_IDLE_S: a burst of large copying reads does not keep
        its memory for the life of the store."""
        if not self._lent:
            return
        before = time.monotonic() - LEND_IDLE_S
        for r, arena in list(self._lent):
            if not arena.retire_if_idle(before):
                continue
            with self._lock:
                self._lent.remove((r, arena))
                self._lent_bytes -= r.size
            self._unshare(c, r)

    def _unshare(self, c: _Connection, r: _shm.Region) -> None:
        """Take a region back from the server, then unmap it here."""
        try:
            self._roundtrip(c, P.frame(P.UNREGION, [r.addr]))
        except (OSError, _ServerError, P.FrameError) as e:
            # Kept mapped: the server may still map it (its pages stay
            # shared until its session ends; this address is not reused).
            _log.error("gostore: gostore-client did not let a staging region go: %s", e)
            return
        r.close()


def _after_fork_in_child() -> None:
    global _gate_lock
    _gate_lock = threading.Lock()  # a parent thread may have held it at the fork; process_gate renews the gate
    for lib in list(_live):
        lib._after_fork()


os.register_at_fork(after_in_child=_after_fork_in_child)
