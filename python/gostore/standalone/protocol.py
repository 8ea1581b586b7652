"""The calls an application in standalone mode forwards to ``gostore-client``,
and the frames that carry them. Both sides import this module, so the
application and the server read every argument the same way.

A forwarded call is a ``gs_*`` function of the C ABI (``bindings/ABI.md``)
described by :class:`Call`: one :class:`Arg` per C argument. The application
side reads the arrays the caller passed by address (their lengths follow
from other arguments, as the ABI defines them), sends their contents, and
writes the arrays the call fills back to the caller's addresses. The server
rebuilds the arrays in its own memory, checks every length against the same
rules, translates data pointers into its own mapping of the application's
shared memory, and calls the library.

Data pointers (the memory a put reads from or a get writes into) lie in
memory both processes map, or, for the calls marked ``cross_memory`` once
the session passed the CROSS check, in the application's own memory: such a
pointer carries ``PROCESS_TAG`` and the server's library reads or writes it
with ``process_vm_readv``/``writev`` (one copy, no staging). The
application side moves anything else through a staging area it shares (see
``gostore.standalone``); the server refuses a pointer outside every region the
application shared with it, and a tagged one it may not use.

Frames: ``u32 length`` then ``u8 kind`` then the body. A value is a one-byte
tag then its bytes: ``i`` int64, ``n`` None, ``b`` u32-length bytes, ``a``
an array (typecode byte, u32-length bytes).
"""

from __future__ import annotations

import ctypes
import operator
import os
import socket
import struct
import threading
import time
from array import array
from dataclasses import dataclass
from functools import cached_property
from typing import Any, Callable, Container, Dict, Iterator, List, Optional, Sequence, Tuple, TypeVar

from ..errors import ErrorCode

R = TypeVar("R")  # a region, whichever side's

# ---- frame kinds ------------------------------------------------------------

HELLO = 1  # app -> server: session token (b"" for a new one); reply: token
REGION = 2  # app -> server, with one fd: (app_base, size) shared memory
UNREGION = 3  # app -> server: app_base
CALL = 4  # app -> server: name, args [, one fd: a region for this call only]
REPLY = 5  # server -> app: return value, filled arrays
ERROR = 6  # server -> app: code, message
# app -> server: (address, nonce) of bytes the server reads out of the
# application with process_vm_readv; reply: 1 when they matched (the
# session's cross_memory calls may then carry PROCESS_TAG pointers), else 0
CROSS = 7

# Bit of a data pointer naming the application's own memory (the address is
# the rest): above any user-space address, so never a mapped one.
PROCESS_TAG = 1 << 62

MAX_FRAME = 64 << 20  # a forwarded call never carries bulk data

# ---- argument kinds ---------------------------------------------------------

HANDLE = "h"  # the store handle: the server's own
INT = "i"  # an integer, passed as is
BYTES = "s"  # a char* the caller passes as bytes (or None)
IN = "a"  # an array the call reads
OUT = "o"  # an array the call fills
FLAGS = "z"  # the zero_copy flags of a data call: the server's pointers all
# lie in registered host memory, whatever the caller's were


@dataclass(frozen=True)
class Length:
    """How many entries an array argument has: ``kind`` is ``"arg"`` (the
    integer argument ``ref``), ``"sum"`` (the sum of array argument
    ``ref``), ``"const"`` (``ref`` itself) or ``"pending"`` (the key count
    of the pending get handle in argument ``ref``)."""

    kind: str
    ref: int

    def of(self, args: Sequence[Any], pending: Dict[int, int]) -> int:
        if self.kind == "arg":
            return int(args[self.ref])
        if self.kind == "sum":
            return sum(args[self.ref])
        if self.kind == "const":
            return self.ref
        return pending.get(int(args[self.ref]), -1)


def N(i: int) -> Length:
    return Length("arg", i)


def SUM(i: int) -> Length:
    return Length("sum", i)


def ONE() -> Length:
    return Length("const", 1)


def PENDING(i: int) -> Length:
    return Length("pending", i)


@dataclass(frozen=True)
class Arg:
    kind: str
    typecode: str = ""
    length: Optional[Length] = None

    @property
    def is_array(self) -> bool:
        return self.kind in (IN, OUT)


H = Arg(HANDLE)
I = Arg(INT)
Z = Arg(FLAGS)
S = Arg(BYTES)


def A(tc: str, n: Length) -> Arg:
    return Arg(IN, tc, n)


def O(tc: str, n: Length) -> Arg:
    return Arg(OUT, tc, n)


# What a data pointer is for: the call reads the memory, writes it, or only
# asks whether it is registered (a pointer outside shared memory reads 0).
READS, WRITES, PROBE = "reads", "writes", "probe"


@dataclass(frozen=True)
class Data:
    """Data pointers of a call: arguments ``ptrs`` and ``sizes`` are either
    two u64 arrays (one pointer and size per entry) or two integers."""

    ptrs: int
    sizes: int
    use: str


@dataclass(frozen=True)
class Call:
    args: Tuple[Arg, ...]
    data: Tuple[Data, ...] = ()
    # "pending": the return value is a get handle of args[1] keys (or 1)
    # that later calls may name; "finish": the call ends handle args[1].
    opens: str = ""
    ends_pending: bool = False
    fail: int = int(ErrorCode.RPC_FAIL)  # what a call that cannot reach the server returns
    returns: bool = True
    # Its data pointers may name the application's own memory (PROCESS_TAG):
    # the library takes them as parts in another process (bindings/ABI.md).
    cross_memory: bool = False

    @cached_property
    def array_order(self) -> List[int]:
        """Array arguments in an order where each length is known first:
        sums of other arrays last."""
        arrays = [i for i, a in enumerate(self.args) if a.is_array]
        return [i for i in arrays if a_kind(self.args[i]) != "sum"] + [
            i for i in arrays if a_kind(self.args[i]) == "sum"
        ]


def a_kind(a: Arg) -> str:
    return a.length.kind if a.length else ""


def data_pointers(call: Call, args: List[Any], skip: Container[int] = ()) -> Iterator[Tuple[Any, int, int, int, str]]:
    """The call's non-empty data pointers, each as ``(holder, index, ptr,
    size, use)``: ``holder[index] = x`` replaces the pointer (in its u64
    array, or in ``args`` for a scalar one); those of ``call.data[k]`` for
    k in ``skip`` are left out. Both sides walk them so."""
    for k, d in enumerate(call.data):
        if k in skip:
            continue
        ps, ss = args[d.ptrs], args[d.sizes]
        if isinstance(ps, array):
            for j in range(len(ps)):
                if ps[j] and ss[j]:
                    yield ps, j, ps[j], ss[j], d.use
        elif ps and ss:
            yield args, d.ptrs, ps, ss, d.use


def arrays_in_one_region(call: Call, args: List[Any], region_of: Callable[[int, int], Optional[R]]) -> Dict[int, R]:
    """The entries k of ``call.data`` whose pointer array (several entries,
    all non-null and untagged) lies in one region, as ``region_of(addr,
    size)`` finds it for the range the array spans: ``{k: region}``. Both
    sides check a batch's pointers so, at once (a lookup per pointer was
    most of their cost), and walk the others one by one (data_pointers,
    skipping these), which names a pointer that is outside."""
    out: Dict[int, R] = {}
    for k, d in enumerate(call.data):
        ps, ss = args[d.ptrs], args[d.sizes]
        if not isinstance(ps, array) or len(ps) < 2:
            continue
        lo = min(ps)
        if lo == 0 or max(ps) >= PROCESS_TAG:
            continue
        r = region_of(lo, max(map(operator.add, ps, ss)) - lo)
        if r is not None:
            out[k] = r
    return out


_keys_n = (H, I, S, A("I", N(1)))  # h, n, keys, key_lens

_WRITE_BATCH = Call(
    _keys_n + (A("Q", SUM(6)), A("Q", SUM(6)), A("I", N(1)), Z, I, I, S, I, O("i", N(1))),
    data=(Data(4, 5, READS),),
    cross_memory=True,
)
_RANGES = (A("Q", SUM(7)), A("Q", SUM(7)), A("Q", SUM(7)), A("I", N(1)), Z)

CALLS: Dict[str, Call] = {
    "gs_health_check": Call((H,), fail=2),
    "gs_get_hostname": Call((H, O("B", N(2)), I)),
    "gs_transport_info": Call((H, O("B", N(2)), I)),
    "gs_put_batch": _WRITE_BATCH,
    "gs_upsert_batch": _WRITE_BATCH,
    "gs_put_one": Call((H, S, I, I, I, Z, I, I, S, I, I), data=(Data(3, 4, READS),), cross_memory=True),
    "gs_get_start": Call(_keys_n + (O("q", N(1)),), opens="pending"),
    "gs_get_finish": Call(
        (H, I, A("Q", SUM(4)), A("Q", SUM(4)), A("I", PENDING(1)), Z, O("q", PENDING(1))),
        data=(Data(2, 3, WRITES),),
        ends_pending=True,
        returns=False,
        cross_memory=True,
    ),
    "gs_get_packed": Call(
        _keys_n + (I, I, Z, O("q", N(1)), O("q", N(1))),
        data=(Data(4, 5, WRITES),),
        opens="pending",
        cross_memory=True,
    ),
    "gs_get_abort": Call((H, I), ends_pending=True, returns=False),
    "gs_get_places": Call(
        (H, I, O("Q", PENDING(1)), O("Q", PENDING(1)), O("Q", PENDING(1)), O("Q", PENDING(1)), O("B", N(7)), I)
    ),
    "gs_get_one": Call((H, S, I, I, I, O("q", ONE())), data=(Data(3, 4, WRITES),), opens="one"),
    "gs_get_into_batch": Call(
        _keys_n + (A("Q", SUM(6)), A("Q", SUM(6)), A("I", N(1)), Z, O("q", N(1))),
        data=(Data(4, 5, WRITES),),
        returns=False,
        cross_memory=True,
    ),
    "gs_get_into_one": Call((H, S, I, I, I, Z), data=(Data(3, 4, WRITES),), cross_memory=True),
    "gs_exist_batch": Call(_keys_n + (O("i", N(1)),), returns=False),
    "gs_get_size": Call((H, S, I)),
    "gs_remove_batch": Call(_keys_n + (I, O("i", N(1))), returns=False),
    "gs_remove_by_regex": Call((H, S, I, I)),
    "gs_remove_all": Call((H, I)),
    "gs_buffer_registered": Call((H, I, I), data=(Data(1, 2, PROBE),)),
    "gs_buffers_registered": Call(
        (H, I, A("Q", N(1)), A("Q", N(1)), O("i", N(1))), data=(Data(2, 3, PROBE),)
    ),
    "gs_create_copy_task": Call((H, S, I, S, I, O("B", N(6)), I)),
    "gs_create_move_task": Call((H, S, I, S, I, S, I, O("B", N(8)), I)),
    "gs_query_task": Call((H, S, I, O("B", N(4)), I)),
    "gs_put_session_start": Call(_keys_n + (A("Q", N(1)), I, I, S, I, O("i", N(1))), returns=False),
    "gs_put_session_write": Call(
        _keys_n + _RANGES + (O("q", N(1)),), data=(Data(4, 5, READS),), returns=False
    ),
    "gs_put_session_end": Call(_keys_n + (I, O("i", N(1))), returns=False),
    "gs_get_session_start": Call(_keys_n + (O("i", N(1)),), returns=False),
    "gs_get_session_read": Call(
        _keys_n + _RANGES + (O("q", N(1)),), data=(Data(4, 5, WRITES),), returns=False
    ),
    "gs_get_session_end": Call(_keys_n),
    "gs_get_ranges": Call(
        _keys_n + _RANGES + (O("q", SUM(7)),), data=(Data(4, 5, WRITES),), returns=False
    ),
    "gs_replica_descs": Call(_keys_n + (O("B", N(5)), I)),
    "gs_disk_read_count": Call((H,)),
    "gs_replica_clear": Call(_keys_n + (S, I, O("i", N(1)))),
}

# ---- places (see gostore.standalone) -----------------------------------------

# A reply that opens a get handle whose objects are PLACES_MIN bytes or more
# in all carries, after the call's filled arrays, where they lie
# (gs_get_places: segment ids, offsets, sizes, leases, segment lines; or a
# single 0 when nothing could be placed), so the application copies them
# without a round trip of its own to ask. The objects placed are then the
# application's: its finish gives each parts for the server to read into,
# or none once it copied it (counted read; see bindings/ABI.md).
PLACES_MIN = 512 << 10
# Room for gs_get_places' segment lines (about 40 bytes each), tried first;
# a call that needs more asks again with PATHS_MAX. The whole room travels
# in the reply: a larger first try cost 60 us a call.
PATHS_CAP = 4 << 10
PATHS_MAX = 1 << 20
_NO_ROOM = int(ErrorCode.BUFFER_OVERFLOW)

@dataclass(frozen=True)
class Places:
    """Where the objects of a get lie (gs_get_places): per object its
    segment id (0: no place), offset, size and lease in ms; the segment
    lines; and, for places a reply carried, the objects' sizes as the reply
    gave them and when the application sent the call (time.monotonic())."""

    seg_ids: array
    offsets: array
    sizes: array
    leases_ms: array
    paths: bytes
    found: Optional[array] = None
    sent: float = 0.0


def ask_places(gs_get_places: Callable[..., Any], h: int, pending: int, n: int) -> Optional[Places]:
    """``gs_get_places`` of get handle ``pending`` (``n`` objects), through
    whichever side's function: None when it placed nothing or failed."""
    arrays = [array("Q", bytes(8 * n)) for _ in range(4)]
    got: Any = None
    for cap in (PATHS_CAP, PATHS_MAX):
        doc = ctypes.create_string_buffer(cap)
        got = gs_get_places(h, pending, *(a.buffer_info()[0] for a in arrays), ctypes.addressof(doc), cap)
        if got != _NO_ROOM:
            break
    if not isinstance(got, int) or got <= 0:
        return None
    return Places(*arrays, doc.raw[:got])


# What a reply carries when the server looked and placed nothing (objects
# on other hosts, on the SSD tier, ...): the application need not ask.
NOWHERE = Places(array("Q"), array("Q"), array("Q"), array("Q"), b"")


def places_of(extra: Sequence[Any], n: int, found: Any, sent: float) -> Optional[Places]:
    """The places a reply carried after its filled arrays (``extra``), for
    a get of ``n`` objects whose sizes it gave in ``found``: NOWHERE when
    the server looked and placed nothing; None when it carried none (a
    server that did not look) or they do not fit."""
    if len(extra) == 1 and extra[0] == 0:
        return NOWHERE
    if len(extra) != 5:
        return None
    *arrays, doc = extra
    if not all(isinstance(a, array) and a.typecode == "Q" and len(a) == n for a in arrays):
        return None
    if not isinstance(doc, bytes) or not (isinstance(found, array) and len(found) == n):
        return None
    return Places(*arrays, doc, found, sent)


def reply_places(p: Optional[Places]) -> List[Any]:
    """What a reply carries of ``p`` (see places_of); None: nothing placed."""
    return [p.seg_ids, p.offsets, p.sizes, p.leases_ms, p.paths] if p is not None else [0]


def places_fit(outs: Sequence[array], n: int, paths: int) -> bool:
    """Whether a reply filling ``outs`` still fits a frame with the places
    of ``n`` objects and ``paths`` bytes of segment lines."""
    return sum(len(o) * o.itemsize for o in outs) + 32 * n + paths + 4096 <= MAX_FRAME


# Calls whose results are per key in their last argument (n = args[1]
# entries): a call the server cannot answer fills them with the failure.
RESULTS_IN_LAST = frozenset(
    name
    for name, c in CALLS.items()
    if c.args[-1].kind == OUT and c.args[-1].length == N(1) and c.args[1] is I
)

ITEMSIZE = {tc: array(tc).itemsize for tc in "BIiQq"}
assert ITEMSIZE == {"B": 1, "I": 4, "i": 4, "Q": 8, "q": 8}

# ---- values -------------------------------------------------------------------

_I64 = struct.Struct("<q")
_U32 = struct.Struct("<I")
_HDR = struct.Struct("<IB")  # frame length (kind and body), kind


class FrameError(ValueError):
    """A frame that does not decode: the peer is not speaking this protocol."""


def put_value(out: List[bytes], v: Any) -> None:
    if v is None:
        out.append(b"n")
    elif isinstance(v, int):
        if not -(2**63) <= v < 2**64:
            raise FrameError(f"integer {v} does not fit 64 bits")
        out.append(b"i" + _I64.pack(v if v < 2**63 else v - 2**64))
    elif isinstance(v, (bytes, bytearray, memoryview)):
        b = bytes(v)
        out.append(b"b" + _U32.pack(len(b)) + b)
    elif isinstance(v, array):
        b = v.tobytes()
        out.append(b"a" + v.typecode.encode() + _U32.pack(len(b)) + b)
    else:
        raise FrameError(f"cannot encode {type(v).__name__}")


def get_values(body: memoryview, count: int = -1) -> List[Any]:
    """Decode ``count`` values (all when -1) from ``body``."""
    vals: List[Any] = []
    pos, end = 0, len(body)
    while pos < end and count != 0:
        tag = body[pos : pos + 1].tobytes()
        pos += 1
        if tag == b"i":
            if pos + 8 > end:
                raise FrameError("truncated integer")
            vals.append(_I64.unpack_from(body, pos)[0])
            pos += 8
        elif tag == b"n":
            vals.append(None)
        elif tag in (b"b", b"a"):
            tc = ""
            if tag == b"a":
                if pos >= end:
                    raise FrameError("truncated array")
                tc = chr(body[pos])
                pos += 1
                if tc not in ITEMSIZE:
                    raise FrameError(f"unknown array type {tc!r}")
            if pos + 4 > end:
                raise FrameError("truncated length")
            (n,) = _U32.unpack_from(body, pos)
            pos += 4
            if pos + n > end:
                raise FrameError("truncated bytes")
            raw = body[pos : pos + n]
            pos += n
            if tag == b"b":
                vals.append(raw.tobytes())
            else:
                if n % ITEMSIZE[tc]:
                    raise FrameError("array length is not a multiple of its item size")
                a = array(tc)
                a.frombytes(raw)
                vals.append(a)
        else:
            raise FrameError(f"unknown value tag {tag!r}")
        count -= 1
    if count > 0:
        raise FrameError("too few values")
    return vals


def frame(kind: int, values: Sequence[Any]) -> bytes:
    parts: List[bytes] = []
    for v in values:
        put_value(parts, v)
    body = b"".join(parts)
    if len(body) + 1 > MAX_FRAME:
        raise FrameError(f"frame of {len(body)} bytes exceeds {MAX_FRAME}")
    return _HDR.pack(len(body) + 1, kind) + body


def peer_pid_uid(sock: Any) -> Tuple[int, int]:
    """The process id and user id of the Unix socket's other end (as the
    kernel saw it at connect; pid 0 when it is not visible here)."""
    pid, uid, _gid = struct.unpack("3i", sock.getsockopt(socket.SOL_SOCKET, socket.SO_PEERCRED, 12))
    return pid, uid


def read_frame(sock: Any, fds: Optional[List[int]] = None) -> Tuple[int, memoryview]:
    """One frame from ``sock``: (kind, body). File descriptors sent with it
    are appended to ``fds`` (when given; otherwise closed). Raises
    ConnectionError at end of stream, FrameError for a bad header."""
    length, kind = _read_header(sock, fds)
    return kind, _read_body(sock, length)


def _read_header(sock: Any, fds: Optional[List[int]]) -> Tuple[int, int]:
    length, kind = _HDR.unpack(_recv_exact(sock, _HDR.size, fds))
    if length < 1 or length > MAX_FRAME:
        raise FrameError(f"frame length {length} out of range")
    return length, kind


def _read_body(sock: Any, length: int) -> memoryview:
    return memoryview(_recv_exact(sock, length - 1, None) if length > 1 else b"")


def _recv_exact(sock: Any, n: int, fds: Optional[List[int]]) -> bytes:
    import socket as _socket

    buf = bytearray(n)
    view = memoryview(buf)
    got = 0
    while got < n:
        if fds is not None and got == 0:
            # Descriptors travel with the first byte of a frame.
            k, anc, _flags, _addr = sock.recvmsg_into(
                [view[got:]], _socket.CMSG_SPACE(4 * 4)
            )
            for level, typ, data in anc:
                if level == _socket.SOL_SOCKET and typ == _socket.SCM_RIGHTS:
                    got_fds = array("i")
                    got_fds.frombytes(data[: len(data) - len(data) % 4])
                    fds.extend(got_fds)
        else:
            k = sock.recv_into(view[got:])
        if k == 0:
            raise ConnectionError("peer closed the connection")
        got += k
    return bytes(buf)


def send_frame(sock: Any, data: bytes, fds: Sequence[int] = ()) -> None:
    import socket as _socket

    if fds:
        sent = sock.sendmsg(
            [data], [(_socket.SOL_SOCKET, _socket.SCM_RIGHTS, array("i", fds).tobytes())]
        )
        if sent < len(data):
            sock.sendall(data[sent:])
    else:
        sock.sendall(data)


# ---- waiting for a frame ----------------------------------------------------

# How long a read of the next frame polls by default, in microseconds: the
# value of the Go servers' poll (blockconn.DefaultServerSpin). On this
# project's 2-core VM a blocking Unix-socket round trip between two Python
# processes measured 37-43 µs at the median and a polling one 7 µs; a
# standalone call is two such wake-ups more than the same call in process.
DEFAULT_SPIN_US = 200

# The longest poll either side accepts: a longer one would hold a CPU for a
# frame that is not coming (as the master's --rpc_spin_us).
MAX_SPIN_US = 10_000

# How many frames in a row must each have come within the spin of this end's
# last write before the server polls for the next: a connection whose
# application calls now and then is not polled for (a poll that would not be
# met is not repeated), and a burst pays two sleeping reads to heat it.
HOT = 2


class SpinGate:
    """Bounds how many reads of a process poll at once. A polling thread
    keeps a CPU busy, and each of its tries takes the GIL for a moment, so
    a process keeps CPUs, and the GIL, for the threads with work to do."""

    def __init__(self, limit: int = 0) -> None:
        """``limit`` 0 or less: one fewer than the CPUs this process may run
        on, at least 1 and at most 2 (a Python process has one GIL)."""
        self.limit = limit if limit > 0 else min(2, max(1, len(os.sched_getaffinity(0)) - 1))
        self._lock = threading.Lock()
        self._busy = 0
        self.polls = 0  # reads that polled
        self.hits = 0  # ...and found their frame within the spin

    @property
    def busy(self) -> int:
        """Reads polling now."""
        return self._busy

    def enter(self) -> bool:
        with self._lock:
            if self._busy >= self.limit:
                return False
            self._busy += 1
            self.polls += 1
            return True

    def leave(self, hit: bool) -> None:
        with self._lock:
            self._busy -= 1
            self.hits += hit


class Conn:
    """One end of a standalone connection: frames written whole, and reads
    of the next frame that poll the socket for up to ``spin_us``
    microseconds (yielding the CPU between tries) before the thread sleeps
    in the kernel. Waking a sleeping thread costs tens of microseconds on a
    VM whose idle CPUs halt; an answer (or the next call) that comes within
    the spin costs none.

    A read polls only after this end wrote (an answer, or a call whose
    answer is awaited), only once ``hot`` frames in a row each came within
    the spin of the write before them (0: after every write), and only
    through ``gate``. ``spin_us`` 0 never polls, nor does a socket with a
    timeout (Python waits for it to be readable before every read). One
    thread uses a Conn at a time."""

    __slots__ = ("sock", "spin_ns", "gate", "hot", "_wrote", "_streak")

    def __init__(self, sock: socket.socket, spin_us: int = 0, gate: Optional[SpinGate] = None,
                 hot: int = 0) -> None:
        self.sock = sock
        polls = gate is not None and sock.gettimeout() is None
        self.spin_ns = max(0, spin_us) * 1000 if polls else 0
        self.gate = gate
        self.hot = hot
        self._wrote = 0  # when this end last wrote; 0 once a read began
        self._streak = 0  # frames in a row that came within the spin of a write

    def send(self, data: bytes, fds: Sequence[int] = ()) -> None:
        send_frame(self.sock, data, fds)
        self._wrote = time.monotonic_ns()

    def read(self, fds: Optional[List[int]] = None) -> Tuple[int, memoryview]:
        """The next frame, as :func:`read_frame` reads it."""
        wrote, self._wrote = self._wrote, 0
        hit = False
        if wrote and self.spin_ns > 0 and self._streak >= self.hot and self.gate is not None \
                and self.gate.enter():
            try:
                hit = _poll_readable(self.sock, wrote + self.spin_ns)
            finally:
                self.gate.leave(hit)
        length, kind = _read_header(self.sock, fds)
        if wrote:  # timed at the header, as a large frame's body may take a while
            came_within = time.monotonic_ns() - wrote < self.spin_ns
            self._streak = min(self._streak + 1, self.hot) if came_within else 0
        return kind, _read_body(self.sock, length)


def _poll_readable(sock: socket.socket, until_ns: int) -> bool:
    """Whether ``sock`` became readable (a byte, or the end of the stream)
    before ``until_ns``, trying without blocking and yielding the CPU
    between tries. A peek leaves descriptors passed with the byte queued
    for the read that follows."""
    peek = socket.MSG_PEEK | socket.MSG_DONTWAIT
    while True:
        try:
            sock.recv(1, peek)
            return True
        except BlockingIOError:
            if time.monotonic_ns() >= until_ns:
                return False
            os.sched_yield()
        except OSError:
            return True  # the read that follows reports it


def check_lengths(call: Call, args: List[Any], pending: Dict[int, int]) -> Optional[str]:
    """Why ``args`` (arrays decoded) break the call's length rules, or None."""
    # Types first: the lengths below read integer arguments.
    for i, a in enumerate(call.args):
        if a.kind in (INT, FLAGS) and not isinstance(args[i], int):
            return f"argument {i}: want an integer"
        if a.kind == BYTES and not (args[i] is None or isinstance(args[i], bytes)):
            return f"argument {i}: want bytes"
    out_bytes = 0
    for i in call.array_order:
        a = call.args[i]
        assert a.length is not None
        want = a.length.of(args, pending)
        if want < 0:
            return f"argument {i}: unknown get handle" if a_kind(a) == "pending" else f"argument {i}: {want} entries"
        if a.kind == OUT:
            # The server allocates what the call fills, and sends it back
            # in one frame: a length the peer names is bounded by that.
            out_bytes += want * ITEMSIZE[a.typecode]
            if out_bytes > MAX_FRAME - 4096:  # room for the reply's other values
                return f"argument {i}: {want} entries to fill do not fit a frame"
            continue
        v = args[i]
        if not isinstance(v, array) or v.typecode != a.typecode or len(v) != want:
            return f"argument {i}: want {want} entries of {a.typecode!r}"
    # A char* followed by its length, or by the lengths of the keys packed
    # in it: together they may not exceed the bytes sent.
    for i, a in enumerate(call.args[:-1]):
        nxt = call.args[i + 1]
        if a.kind != BYTES:
            continue
        sent = len(args[i] or b"")
        if nxt.kind == INT:
            n = args[i + 1]
        elif nxt.kind == IN and nxt.typecode == "I":
            n = sum(args[i + 1])
        else:
            continue
        if not 0 <= n <= sent:
            return f"argument {i + 1}: {n} bytes named, {sent} sent"
    return None


def fail_results(name: str, call: Call, args: Sequence[Any], code: int, write: Callable[[int, array], None]) -> Any:
    """What a call that did not run answers: ``code`` in every per-key
    result slot (through ``write(arg index, array)``) and as its value."""
    if name in RESULTS_IN_LAST:
        n = int(args[1])
        if n > 0:
            tc = call.args[-1].typecode
            write(len(call.args) - 1, array(tc, [code]) * n)
    return code if call.returns else None
