"""``gostore-client`` reads frames from any process of its user: hello,
shared regions with their file descriptors, forwarded calls. None of it is
trusted. A real server process gets seeded, deterministic streams of
malformed frames on fresh connections: cut headers, lengths that lie or
claim up to 4 GiB, unknown kinds, tags and call names, values of the wrong
type or count, arrays that disagree with their counts, pointers outside
every shared region (or inside with a size that runs past it, or is
negative), get handles never given, regions and per-call regions with no,
several or unusable descriptors (a pipe, a directory, a memfd too small),
and well-formed calls built from the call table.

For every stream: each answer is a REPLY or an ERROR with a code of the
contract (-600 for what breaks the protocol's rules, -1 for a function not
served, -103 for an unknown session), and the server closes the connection
once the stream ends, within a deadline (no hang). After all of them the
server is alive, holds no descriptor or mapping of shared memory more than
before, and a well-formed session still puts and gets the right bytes, by
raw frames and through ``setup_dummy``.
"""

from __future__ import annotations

import ctypes
import mmap
import os
import random
import socket
import struct
import time
from array import array
from typing import Any, Dict, List, Sequence, Tuple

import pytest

from gostore import MooncakeDistributedStore
from gostore.standalone import protocol as P
from gostore.errors import ErrorCode

CASES = 4000  # streams per seed
DEADLINE = 10.0  # seconds a stream's answers may take
ALLOWED = {int(ErrorCode.INVALID_PARAMS), int(ErrorCode.INTERNAL_ERROR), int(ErrorCode.CLIENT_NOT_FOUND)}
REGION_APP = 0x7E0000000000  # where the fuzzed sessions say their region lives
REGION_SIZE = 1 << 20
KEY = b"fz-key"


def _pattern(seed: int, n: int) -> bytes:
    return bytes((seed * 131 + i * 7) & 0xFF for i in range(256)) * (n // 256) + bytes(n % 256)


# ---- descriptors a frame may carry ------------------------------------------


class Fds:
    """Descriptors of every kind the fuzzer attaches; made once, sent as
    often as needed (the server gets its own copies)."""

    def __init__(self, tmp: str) -> None:
        self.region = os.memfd_create("fz-region")
        os.ftruncate(self.region, REGION_SIZE)
        self.small = os.memfd_create("fz-small")
        os.ftruncate(self.small, 4096)
        self.pipe_r, self.pipe_w = os.pipe()
        self.dir = os.open(tmp, os.O_RDONLY | os.O_DIRECTORY)
        self.null = os.open("/dev/null", os.O_RDWR)
        self.all = [self.region, self.small, self.pipe_r, self.dir, self.null]

    def pick(self, rng: random.Random, often: float) -> List[int]:
        """No descriptor but with probability ``often``; then mostly one."""
        if rng.random() >= often:
            return []
        return [rng.choice(self.all) for _ in range(rng.choice([0, 1, 1, 1, 2, 3]))]

    def close(self) -> None:
        for fd in self.all + [self.pipe_w]:
            os.close(fd)


# ---- well-formed calls from the table -----------------------------------------


def _key_lens_at(call: P.Call) -> set:
    """Array arguments that hold the lengths of the keys before them."""
    return {i + 1 for i, a in enumerate(call.args[:-1])
            if a.kind == P.BYTES and call.args[i + 1].kind == P.IN and call.args[i + 1].typecode == "I"}


def build_call(rng: random.Random, call: P.Call, region: Tuple[int, int]) -> List[Any]:
    """Arguments of a call that follow every rule of the table, data
    pointers inside ``region`` (app address, size)."""
    args: List[Any] = [None] * len(call.args)
    counts = {a.length.ref for a in call.args if a.length is not None and a.length.kind == "arg"}
    n = rng.randint(0, 3)
    key_lens = _key_lens_at(call)
    for i, a in enumerate(call.args):
        if a.kind == P.HANDLE:
            args[i] = 0
        elif a.kind == P.FLAGS:
            args[i] = rng.choice([0, 1])
        elif a.kind == P.INT:
            args[i] = n if i == 1 and i in counts else 64 if i in counts else rng.randint(0, 2)
        elif a.kind == P.BYTES:
            if i + 1 in key_lens:
                args[i] = KEY * n
            else:
                args[i] = rng.choice([None, b"", b"fz-seg", KEY])
    for i, a in enumerate(call.args):  # a char* followed by its length
        if a.kind == P.BYTES and i + 1 < len(call.args) and call.args[i + 1].kind == P.INT:
            args[i + 1] = len(args[i] or b"")
    data = {d.ptrs: d for d in call.data} | {d.sizes: d for d in call.data}
    for i in call.array_order:
        a = call.args[i]
        assert a.length is not None
        if a.kind == P.OUT:
            continue
        want = max(a.length.of(args, {}), 0)
        if i in key_lens:
            vals = [len(KEY)] * want
        elif a.typecode == "I":
            vals = [1] * want  # parts per key
        elif i in data:
            vals = [0] * want  # filled below
        else:
            vals = [rng.choice([0, 16, 4096]) for _ in range(want)]
        args[i] = array(a.typecode, vals)
    base, size = region
    for d in call.data:
        ps, ss = args[d.ptrs], args[d.sizes]
        if isinstance(ps, array):
            for j in range(len(ps)):
                ss[j] = rng.choice([16, 4096])
                ps[j] = base + rng.randrange(0, size - ss[j], 64)
        else:
            args[d.sizes] = rng.choice([16, 4096])
            args[d.ptrs] = base + rng.randrange(0, size - args[d.sizes], 64)
    return args


# ---- mutations ------------------------------------------------------------------------


def _any_value(rng: random.Random) -> Any:
    return rng.choice([
        None, 0, -1, 1, 2**31, 2**32 + 1, 2**40, 2**62, 2**63 - 1, -(2**63), b"", KEY, b"\xff" * 40,
        array("I", [1]), array("I", [2**32 - 1] * 3), array("Q", [2**64 - 1]), array("q", [-1, 0]),
        array("B", b"xyz"), array("i", []),
    ])


def mutate_args(rng: random.Random, call: P.Call, args: List[Any], region: Tuple[int, int]) -> List[Any]:
    """args broken one way, or (3 times in 10) as they were."""
    args = [array(a.typecode, a) if isinstance(a, array) else a for a in args]
    base, size = region
    how = rng.randrange(10)
    if how == 0 and args:  # a value of another type or an extreme
        args[rng.randrange(len(args))] = _any_value(rng)
    elif how == 1:  # one argument too few or too many
        if args and rng.random() < 0.5:
            del args[rng.randrange(len(args))]
        else:
            args.insert(rng.randrange(len(args) + 1), _any_value(rng))
    elif how == 2 and len(args) > 1 and isinstance(args[1], int):  # a count that disagrees
        args[1] = rng.choice([args[1] + 1, args[1] - 1, -1, 2**31 - 1, 2**40])
    elif how == 3 and call.data:  # a pointer outside, across the end, a negative size
        d = rng.choice(call.data)
        p, s = rng.choice([
            (base - 4096, 4096), (base + size - 8, 16), (0, 4096), (base + size, 1), (0x1000, 64),
            (base + size - 1, -1), (base + 64, -4096), (base + size - 16, 2**63 - 1), (2**64 - 8, 16),
        ])
        if isinstance(args[d.ptrs], array) and len(args[d.ptrs]) and isinstance(args[d.sizes], array):
            j = rng.randrange(len(args[d.ptrs]))
            args[d.ptrs][j], args[d.sizes][j] = p % 2**64, s % 2**64
        elif not isinstance(args[d.ptrs], array):
            args[d.ptrs], args[d.sizes] = p, s
    elif how == 4:  # an output buffer length far past what a frame holds
        outs = [a.length.ref for a in call.args if a.kind == P.OUT and a.length is not None and a.length.kind == "arg"]
        if outs:
            args[rng.choice(outs)] = rng.choice([2**40, 2**31 - 1, P.MAX_FRAME, -5])
    elif how == 5:  # key lengths past the keys
        for i in _key_lens_at(call):
            if isinstance(args[i], array) and len(args[i]):
                args[i][rng.randrange(len(args[i]))] = rng.choice([0, 7, 2**32 - 1])
    elif how == 6:  # an output argument sent with a value
        outs = [i for i, a in enumerate(call.args) if a.kind == P.OUT and i < len(args)]
        if outs:
            args[rng.choice(outs)] = _any_value(rng)
    # how >= 7: left well formed
    return args


def body_of(values: Sequence[Any]) -> bytes:
    return P.frame(0, values)[P._HDR.size:]


def mutate_body(rng: random.Random, body: bytes) -> bytes:
    """body broken one way, or (9 times in 15) as it was."""
    b = bytearray(body)
    how = rng.randrange(15)
    if how == 0 and b:  # flip bits
        for _ in range(rng.randint(1, 3)):
            b[rng.randrange(len(b))] ^= 1 << rng.randrange(8)
    elif how == 1:  # cut
        del b[rng.randrange(len(b) + 1):]
    elif how == 2:  # an unknown tag, an unknown array type
        b += rng.choice([b"x", b"a?", b"a\x00", b"\x00"])
    elif how == 3:  # a value's length past the frame
        b += rng.choice([b"b", b"aQ"]) + struct.pack("<I", rng.choice([1, 2**31, 2**32 - 1])) + b"zz"
    elif how == 4:  # an array that is not a whole number of items
        b += b"aQ" + struct.pack("<I", 3) + b"abc"
    elif how == 5:  # a cut integer
        b += b"i\x01\x02"
    # how >= 6: as is
    return bytes(b)


def make_frame(kind: int, body: bytes, rng: random.Random) -> bytes:
    """The frame's header around body, its length lying at times (1 in 10)."""
    length = len(body) + 1
    r = rng.random()
    if r < 0.02:
        length = 0
    elif r < 0.04:
        length = rng.choice([P.MAX_FRAME + 1, 2**32 - 1, 2**31])
    elif r < 0.07:
        length += rng.choice([1, 100, P.MAX_FRAME - length])  # more than is sent
    elif r < 0.10:
        length = rng.randrange(1, length + 1)  # less: the rest reads as another frame
    return struct.pack("<IB", length % 2**32, kind) + body


# ---- one stream --------------------------------------------------------------------------


class Conn:
    def __init__(self, ipc: str) -> None:
        self.s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self.s.settimeout(DEADLINE)
        self.s.connect(ipc)

    def send(self, data: bytes, fds: Sequence[int] = ()) -> None:
        P.send_frame(self.s, data, fds)

    def roundtrip(self, data: bytes, fds: Sequence[int] = ()) -> Tuple[int, List[Any]]:
        self.send(data, fds)
        kind, body = P.read_frame(self.s)
        return kind, P.get_values(body)

    def close(self) -> None:
        self.s.close()


def answers_until_closed(c: Conn, sent: List[str]) -> List[Tuple[int, List[Any]]]:
    """Every frame the server sends until it closes; fails on a hang
    (naming what was sent)."""
    out = []
    start = time.monotonic()
    while True:
        try:
            kind, body = P.read_frame(c.s)
        except ConnectionError:
            return out
        except socket.timeout:
            pytest.fail(f"the server neither answered nor closed in {DEADLINE} s (after {out}); sent:\n"
                        + "\n".join(sent))
        out.append((kind, P.get_values(body)))
        assert time.monotonic() - start < DEADLINE, f"the server answers without end to {sent}"


def one_stream(rng: random.Random, ipc: str, fds: Fds) -> Tuple[List[Tuple[int, List[Any]]], int]:
    """A stream of frames, most of them malformed, on a fresh connection
    after a well-formed hello and region as a rule; the answers to them.
    Answers come in order, one per frame the server reads, until it
    closes: while the frames sent are calls with a truthful header, each
    call that follows every rule (descriptors it does not need aside) is
    answered with a REPLY. Also how many such calls were answered."""
    c = Conn(ipc)
    sent: List[str] = []
    must_reply: List[bool] = []  # per frame sent while answers stay aligned with frames
    try:
        region = (REGION_APP, REGION_SIZE)
        shared = False
        if rng.random() < 0.9:
            kind, vals = c.roundtrip(P.frame(P.HELLO, [b""]))
            assert kind == P.REPLY and len(vals[0]) == 16
            if rng.random() < 0.8:
                kind, vals = c.roundtrip(P.frame(P.REGION, [REGION_APP, REGION_SIZE]), [fds.region])
                assert (kind, vals) == (P.REPLY, [0])
                shared = True
        names = sorted(P.CALLS)
        aligned = True
        for _ in range(rng.randint(1, 4)):
            kind = rng.choices([P.CALL, P.REGION, P.HELLO, -1], weights=[75, 10, 7, 8])[0]
            if kind == -1:  # a kind the server does not take
                kind = rng.choice([P.UNREGION, P.REPLY, P.ERROR, 0, 255])
            clean = False
            if kind == P.CALL:
                name = rng.choice(names + ["gs_setup", "gs_close", "", "\xff"])
                call = P.CALLS.get(name, P.CALLS["gs_get_size"])
                built = build_call(rng, call, region)
                args = mutate_args(rng, call, built, region)
                # (repr: arrays of other types compare equal when empty)
                # (a call naming a get handle is refused unless this
                # connection opened it: never one here)
                names_handle = call.ends_pending or any(P.a_kind(a) == "pending" for a in call.args)
                clean = shared and name in P.CALLS and not names_handle and repr(args) == repr(built)
                temp: List[Any] = [None, 0]
                if rng.random() < 0.1:  # a region for this call only
                    temp = [rng.choice([REGION_APP + REGION_SIZE, 0x1000, 0, -1]), rng.choice([4096, 0, -1, 2**50])]
                    if rng.random() < 0.5:
                        temp = [rng.choice([KEY, array("Q", [1])]), None]
                head = [name.encode("utf-8", "surrogateescape")]
                if rng.random() < 0.05:
                    head = [rng.choice([1, None, array("B", b"gs_get_size")])]
                values = head + temp + args
                clean = clean and temp == [None, 0] and head == [name.encode()]
            elif kind == P.REGION:
                values = rng.choice([
                    [REGION_APP, REGION_SIZE], [REGION_APP + 4096, 4096], [0, 4096], [-4096, 4096],
                    [REGION_APP + (2 << 20), 0], [REGION_APP + (2 << 20), -1], [REGION_APP + (2 << 20), 2**50],
                    [REGION_APP + (2 << 20), 8192], [KEY, 4096], [REGION_APP + (3 << 20)], [None, None],
                ])
            elif kind == P.HELLO:
                values = rng.choice([[b""], [b"\x00" * 16], [5], [None], [array("B", b"x" * 16)], []])
            else:
                values = [rng.choice([0, KEY, None])]
            body = body_of(values)
            mutated = mutate_body(rng, body)
            data = make_frame(kind, mutated, rng)
            if rng.random() < 0.03:  # a header cut short
                data = data[: rng.randrange(1, 5)]
            elif rng.random() < 0.03:  # not this protocol at all
                data = bytes(rng.randrange(256) for _ in range(rng.randrange(1, 64)))
            with_fds = fds.pick(rng, {P.CALL: 0.3, P.REGION: 0.9, P.HELLO: 0.1}.get(kind, 0))
            # A lying header shifts every later answer; a hello or region
            # changes what the session holds.
            aligned = aligned and kind == P.CALL and data == struct.pack("<IB", len(body) + 1, kind) + mutated
            if aligned:
                must_reply.append(clean and mutated == body)
            sent.append(f"kind {kind} {values!r:.300} as {data[:400]!r} ({len(data)} bytes) fds {with_fds}")
            try:
                c.send(data, with_fds)
            except (BrokenPipeError, ConnectionResetError):
                break  # closed on an earlier frame
        try:
            c.s.shutdown(socket.SHUT_WR)
        except OSError:
            pass  # already reset
        answers = answers_until_closed(c, sent)
        for i, (kind, vals) in enumerate(answers[: len(must_reply)]):
            assert kind == P.REPLY or not must_reply[i], f"frame {i}, well formed, answered {vals}; sent:\n" + "\n".join(
                sent)
        return answers, sum(must_reply[: len(answers)])
    finally:
        c.close()


# ---- what the server holds ---------------------------------------------------------------


def held(pid: int) -> Tuple[int, int]:
    """The server's descriptors other than sockets (its store opens and
    closes connections of its own; an application's connection the server
    failed to close would have hung a stream), and its mappings of what
    applications shared (the store's transport maps other clients'
    segments as it needs them)."""
    n_fds = sum(not k.startswith("socket:") for k, n in fd_kinds(pid).items() for _ in range(n))
    with open(f"/proc/{pid}/maps") as f:
        n_maps = sum("/memfd:fz-" in line for line in f)
    return n_fds, n_maps


def fd_kinds(pid: int) -> Dict[str, int]:
    """The server's descriptors by what they are."""
    kinds: Dict[str, int] = {}
    for fd in os.listdir(f"/proc/{pid}/fd"):
        try:
            what = os.readlink(f"/proc/{pid}/fd/{fd}").split("[")[0].split(" (")[0]
        except OSError:
            continue
        kinds[what] = kinds.get(what, 0) + 1
    return kinds


def settled(pid: int, before: Tuple[int, int], timeout: float = 10.0) -> Tuple[int, int]:
    """What the server holds once connection threads have finished (at
    most what it held before, or the last count after ``timeout``)."""
    end = time.monotonic() + timeout
    now = held(pid)
    while (now[0] > before[0] or now[1] > before[1]) and time.monotonic() < end:
        time.sleep(0.05)
        now = held(pid)
    return now


def steady(pid: int) -> Tuple[int, int]:
    """What the server holds once two looks 0.2 s apart agree."""
    now = held(pid)
    for _ in range(50):
        time.sleep(0.2)
        now, last = held(pid), now
        if now == last:
            break
    return now


def raw_session_puts_and_gets(ipc: str, key: bytes, value: bytes) -> None:
    """A well-formed session by raw frames: put from shared memory, get
    into it, same bytes."""
    n = len(value)
    fd = os.memfd_create("fz-good")
    os.ftruncate(fd, 2 * n)
    mm = mmap.mmap(fd, 2 * n)
    addr = ctypes.addressof(ctypes.c_char.from_buffer(mm))
    c = Conn(ipc)
    try:
        assert c.roundtrip(P.frame(P.HELLO, [b""]))[0] == P.REPLY
        assert c.roundtrip(P.frame(P.REGION, [addr, 2 * n]), [fd]) == (P.REPLY, [0])
        mm[:n] = value
        kl, one = array("I", [len(key)]), array("I", [1])
        kind, vals = c.roundtrip(P.frame(P.CALL, [b"gs_put_batch", None, 0, 0, 1, key, kl, array("Q", [addr]),
                                                  array("Q", [n]), one, 1, 1, 0, None, 0, None]))
        assert (kind, list(vals[1])) == (P.REPLY, [0]), vals
        kind, vals = c.roundtrip(P.frame(P.CALL, [b"gs_get_into_batch", None, 0, 0, 1, key, kl,
                                                  array("Q", [addr + n]), array("Q", [n]), one, 1, None]))
        assert (kind, list(vals[1])) == (P.REPLY, [n]), vals
        assert mm[n:2 * n] == value
    finally:
        c.close()
        mm.close()
        os.close(fd)


@pytest.mark.parametrize("seed", range(2))
def test_malformed_frames_cost_a_connection_at_most(seed, master, client_process_factory, store_factory, tmp_path):
    srv = client_process_factory(master)
    reader = store_factory(master)
    assert reader.put(KEY.decode(), _pattern(seed, 8192)) == 0  # what the fuzzed calls name
    kept = _pattern(seed + 10, 8192)
    assert reader.put("fz-kept", kept) == 0  # what they do not
    pid = srv.proc.pid
    # A session first: what the server opens once (its transfer engine's
    # connections, say) is held before the count starts.
    raw_session_puts_and_gets(srv.ipc_path, b"fz-warm", _pattern(9, 4096))
    before = steady(pid)
    fds = Fds(str(tmp_path))
    rng = random.Random(1000 + seed)
    replies = errors = well_formed = 0
    start = time.monotonic()
    try:
        for case in range(CASES):
            answers, n = one_stream(rng, srv.ipc_path, fds)
            well_formed += n
            for kind, vals in answers:
                if kind == P.ERROR:
                    errors += 1
                    assert vals[0] in ALLOWED, f"case {case}: error {vals}"
                else:
                    replies += 1
                    assert kind == P.REPLY, f"case {case}: frame kind {kind}"
            assert srv.alive(), f"case {case}: the server died:\n{srv.log()[-3000:]}"
    finally:
        fds.close()
    took = time.monotonic() - start
    assert srv.alive(), srv.log()[-3000:]
    after = settled(pid, before)
    assert after[0] <= before[0], f"descriptors {before[0]} before, {after[0]} after: leaked: {fd_kinds(pid)}"
    assert after[1] <= before[1], f"memfd mappings {before[1]} before, {after[1]} after: leaked: " + "".join(
        line for line in open(f"/proc/{pid}/maps") if "/memfd:fz-" in line)

    assert well_formed > CASES // 10 and errors > CASES // 10, (well_formed, errors)  # both kinds were reached
    with open(srv.log_path, errors="replace") as f:
        log = f.read()
    assert "Traceback" not in log, log[log.find("Traceback") - 500:][:3000]  # refused by a check, not a bug

    # Still serving, with the right bytes.
    raw_session_puts_and_gets(srv.ipc_path, b"fz-after", _pattern(seed + 20, 64 << 10))
    app = MooncakeDistributedStore()
    assert app.setup_dummy(16 << 20, 1 << 20, srv.server_address) == 0
    assert app.get("fz-kept") in (kept, b"")  # a fuzzed remove_all may have run
    after_value = _pattern(seed + 30, 300_000)
    assert app.put("fz-app-after", after_value) == 0
    assert app.get("fz-app-after") == after_value
    assert reader.get("fz-app-after") == after_value
    assert reader.get("fz-after") == _pattern(seed + 20, 64 << 10)
    app.close()
    print(f"seed {seed}: {CASES} streams in {took:.1f} s, {replies} replies ({well_formed} to well-formed calls),"
          f" {errors} errors")


def test_inputs_that_once_broke_the_server(master, client_process_factory, store_factory, tmp_path):
    """What the fuzzer above found, each once: a length the peer names
    for an array the server fills (it allocated it: seconds and GiBs per
    frame), descriptors that came with a frame the server then refused
    (kept open for good), a negative size next to a pointer at a region's
    end (the library was handed the server's memory past the mapping), and
    values of the wrong type (a bug's traceback instead of the contract's
    answer)."""
    srv = client_process_factory(master)
    reader = store_factory(master)
    assert reader.put(KEY.decode(), _pattern(1, 8192)) == 0
    pid = srv.proc.pid
    raw_session_puts_and_gets(srv.ipc_path, b"fz-warm", _pattern(9, 4096))
    before = steady(pid)
    fds = Fds(str(tmp_path))

    def session() -> Conn:
        c = Conn(srv.ipc_path)
        assert c.roundtrip(P.frame(P.HELLO, [b""]))[0] == P.REPLY
        assert c.roundtrip(P.frame(P.REGION, [REGION_APP, REGION_SIZE]), [fds.region]) == (P.REPLY, [0])
        return c

    def closed(c: Conn) -> bool:
        c.s.shutdown(socket.SHUT_WR)
        return answers_until_closed(c, []) == []

    def call(c: Conn, name: str, *args: Any, temp: Sequence[Any] = (None, 0), fd: Sequence[int] = ()):
        return c.roundtrip(P.frame(P.CALL, [name.encode(), *temp, *args]), fd)

    try:
        c = session()
        for cap in (2**40, 2**31 - 1, P.MAX_FRAME, -5):  # the hostname into a buffer of cap bytes
            start = time.monotonic()
            kind, vals = call(c, "gs_get_hostname", 0, None, cap)
            assert (kind, vals[0]) == (P.ERROR, -600) and time.monotonic() - start < 2, (cap, vals)
        kind, vals = call(c, "gs_get_hostname", 0, None, 64)
        assert kind == P.REPLY and vals[0] > 0  # its length
        # One object into the region's last byte, "of -1 bytes" (2**64 - 1 in C).
        kind, vals = call(c, "gs_get_one", 0, KEY, len(KEY), REGION_APP + REGION_SIZE - 1, -1, None)
        assert (kind, vals[0]) == (P.ERROR, -600), vals
        kind, vals = call(c, "gs_buffer_registered", 0, REGION_APP + 64, -4096)
        assert (kind, vals[0]) == (P.ERROR, -600), vals
        # Descriptors with a call that takes none: closed, the call served.
        kind, vals = call(c, "gs_get_size", 0, KEY, len(KEY), fd=[fds.small, fds.pipe_r])
        assert (kind, vals) == (P.REPLY, [8192])
        # Values of the wrong type: the contract's answer.
        assert c.roundtrip(P.frame(P.REGION, [KEY, 4096]), [fds.small])[1][0] == -600
        kind, vals = call(c, "gs_exist_batch", 0, b"1", KEY, array("I", [len(KEY)]), None)
        assert (kind, vals[0]) == (P.ERROR, -600), vals
        kind, vals = call(c, "gs_get_abort", 0, array("Q", [1]))
        assert (kind, vals[0]) == (P.ERROR, -600), vals
        c.close()
        # A call's own region that is refused, with its one descriptor.
        for temp, fd in (((REGION_APP + (4 << 20), 0), fds.region), ((REGION_APP + (4 << 20), 8192), fds.small),
                         ((REGION_APP + (4 << 20), 4096), fds.dir), ((KEY, None), fds.region)):
            c = session()
            c.send(P.frame(P.CALL, [b"gs_get_size", *temp, 0, KEY, len(KEY)]), [fd])
            assert closed(c), temp
            c.close()
        # Descriptors with a frame whose header or body is refused.
        for data in (struct.pack("<IB", 0, P.CALL), struct.pack("<IB", P.MAX_FRAME + 1, P.CALL),
                     struct.pack("<IB", 100, P.REGION) + b"i"):
            c = session()
            c.send(data, [fds.region, fds.null])
            assert closed(c)
            c.close()
        # A hello whose token is not bytes.
        c = Conn(srv.ipc_path)
        c.send(P.frame(P.HELLO, [array("B", b"x" * 16)]))
        assert closed(c)
        c.close()
    finally:
        fds.close()
    assert srv.alive(), srv.log()[-3000:]
    after = settled(pid, before)
    assert after == before, f"{before} before, {after} after: {fd_kinds(pid)}"
    with open(srv.log_path, errors="replace") as f:
        assert "Traceback" not in f.read(), srv.log()[-3000:]
