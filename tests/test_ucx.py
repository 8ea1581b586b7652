"""The UCX route (docs/ucx.md): setup's ``protocol="ucx"`` moves bytes
between clients with UCX one-sided put/get into the owner's segment.

- Which UCX is loaded (gostore/_ucx.py): ``$GOSTORE_LIBUCX``, else the
  system's ``libucp.so.0``, else the ``libucx`` wheel's; on fake file
  layouts, and for real with the system's library hidden in a mount
  namespace (a copy of it as the "wheel").
- The whole store API over the route, bytes verified: real master, client
  processes with ``GOSTORE_TRANSPORT=ucx`` (the route even on one host, no
  shared-memory mapping), over ``UCX_TLS`` tcp, shared memory and CMA.
- Hosts as network namespaces joined by veth, UCX over tcp between them.
- Faults: a peer killed -9 mid-transfer (an error, no hang), a peer
  restarted (endpoints rebuilt; new objects served), a hung peer taken as
  gone (the next calls fail at once), an owner that
  remounted its segment after a master restart (a reader's stale
  descriptor refreshed and its op tried once more: no failed call).
- Segments mounted after setup (allocate_and_mount_segment) are exposed
  and reached over UCX too, again after a master restart.

The route tests skip, saying why, where no UCX library exists (``make
ucx`` installs Debian's). ``make test-ucx-wheel`` runs this file on PyPI's
UCX (libucx-cu12, the ``ucx`` extra) and names it in
GOSTORE_TEST_UCX_VERSION/_LIBRARY: every client must then have loaded
that one, and none skips for want of UCX."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import time
import types

import pytest

from conftest import MiB, pattern, socket_inodes, wait_until
from gostore import _ucx

# ---------------------------------------------------------------------------
# which UCX: the search, on fake layouts


def _touch(path) -> str:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(b"")
    return str(path)


def _spec_of(pkg_dir):
    """A find_spec that finds the package ``libucx`` in ``pkg_dir``."""
    def find_spec(name):
        assert name == "libucx"
        return types.SimpleNamespace(submodule_search_locations=[str(pkg_dir)]) if pkg_dir else None
    return find_spec


class _Preload:
    def __init__(self) -> None:
        self.calls = 0

    def __call__(self) -> None:
        self.calls += 1


def test_a_library_the_user_names_wins(tmp_path):
    wheel = tmp_path / "site" / "libucx"
    _touch(wheel / "lib" / "libucp.so.0")
    env = {"GOSTORE_LIBUCX": "/opt/mine/libucp.so.0", "LD_LIBRARY_PATH": str(tmp_path)}
    pre = _Preload()
    assert _ucx.choose_library(env, root=str(tmp_path), find_spec=_spec_of(wheel), preload=pre) == "env"
    assert env["GOSTORE_LIBUCX"] == "/opt/mine/libucp.so.0" and pre.calls == 0


def test_the_systems_library_wins_over_the_wheel(tmp_path):
    """Found through LD_LIBRARY_PATH, through ld.so.conf (with include), or
    in a default directory; the wheel is then neither loaded nor named."""
    root = tmp_path / "root"
    wheel = tmp_path / "site" / "libucx"
    _touch(wheel / "lib" / "libucp.so.0")
    # ld.so.conf -> include ld.so.conf.d/*.conf -> /opt/ucx/lib
    (root / "etc" / "ld.so.conf.d").mkdir(parents=True)
    (root / "etc" / "ld.so.conf").write_text("# comment\ninclude /etc/ld.so.conf.d/*.conf\n")
    (root / "etc" / "ld.so.conf.d" / "ucx.conf").write_text("/opt/ucx/lib\n")
    conf_lib = _touch(root / "opt" / "ucx" / "lib" / "libucp.so.0")
    assert _ucx.system_library({}, root=str(root)) == conf_lib
    env: dict = {}
    pre = _Preload()
    assert _ucx.choose_library(env, root=str(root), find_spec=_spec_of(wheel), preload=pre) == "system"
    assert "GOSTORE_LIBUCX" not in env and pre.calls == 0

    # LD_LIBRARY_PATH comes before the conf directories
    mine = _touch(tmp_path / "ldpath" / "libucp.so.0")
    assert _ucx.system_library({"LD_LIBRARY_PATH": f"/nonexistent::{tmp_path / 'ldpath'}"},
                               root=str(root)) == mine
    # a default directory, no conf at all
    bare = tmp_path / "bare"
    dflt = _touch(bare / "usr" / "lib" / "x86_64-linux-gnu" / "libucp.so.0")
    assert _ucx.system_library({}, root=str(bare)) == dflt


def test_the_wheel_when_the_system_has_none(tmp_path):
    wheel = tmp_path / "site" / "libucx"
    lib = _touch(wheel / "lib" / "libucp.so.0")
    env: dict = {}
    pre = _Preload()
    empty = tmp_path / "empty-root"
    empty.mkdir()
    assert _ucx.choose_library(env, root=str(empty), find_spec=_spec_of(wheel), preload=pre) == "wheel"
    assert env["GOSTORE_LIBUCX"] == lib and pre.calls == 1


def test_neither_leaves_the_choice_to_go(tmp_path):
    """No UCX anywhere: nothing set (Go's dlopen then says why the route is
    off); a wheel directory without its library counts as none."""
    empty = tmp_path / "empty-root"
    empty.mkdir()
    for spec in (_spec_of(None), _spec_of(tmp_path / "site" / "libucx")):
        env: dict = {}
        pre = _Preload()
        assert _ucx.choose_library(env, root=str(empty), find_spec=spec, preload=pre) == ""
        assert env == {} and pre.calls == 0


# ---------------------------------------------------------------------------
# the route: real master, real client processes


# The UCX a run is for (tools/test_ucx_wheel.sh sets them; "" each: any):
# a run meant for the wheel's UCX that loaded the system's must fail.
EXPECT_VERSION = os.environ.get("GOSTORE_TEST_UCX_VERSION", "")
EXPECT_LIBRARY = os.environ.get("GOSTORE_TEST_UCX_LIBRARY", "")


def _library_or_skip() -> str:
    """The UCX library this machine would load, or skip saying why not
    (fail, where the run expects a UCX)."""
    lib = os.environ.get(_ucx.ENV) or _ucx.system_library() or _ucx.wheel_library()
    if not lib and (EXPECT_VERSION or EXPECT_LIBRARY):
        pytest.fail(f"no UCX library here, and the run expects {EXPECT_VERSION} {EXPECT_LIBRARY}")
    if not lib:
        pytest.skip("no UCX library here (libucp.so.0): `make ucx` installs Debian's libucx0, "
                    "`pip install gostore[ucx]` PyPI's")
    return lib


def ucx_info(info: dict) -> dict:
    """transport_info()'s account of the UCX it loaded."""
    return info.get("ucx") or {}


def assert_expected_ucx(u: dict) -> None:
    """transport_info()'s UCX ``u`` is the one the run expects, if any."""
    if EXPECT_VERSION:
        assert u.get("version") == EXPECT_VERSION, u
    if EXPECT_LIBRARY:
        assert u.get("library") and os.path.samefile(u["library"], EXPECT_LIBRARY), u


def expected_ucx_peer(p):
    """``p``, after checking that it loaded the UCX the run expects."""
    if EXPECT_VERSION or EXPECT_LIBRARY:
        assert_expected_ucx(ucx_info(p.call("transport_info")["info"]))
    return p


def route_ops(info: dict) -> dict:
    """transport_info()'s count of ops sent per route ({"ucx": n, "tcp": n, ...})."""
    return info.get("route_ops") or {}


# UCX_TLS settings the suite runs over on one host. Shared memory: posix
# and sysv carry UCX's messages and its software RMA; CMA reads and writes
# the peer's memory through the kernel (process_vm_readv/writev), with
# posix for UCX's own messages (CMA has none).
TLS = {"tcp": "tcp", "shm": "posix,sysv,self", "cma": "cma,posix,self"}


def ucx_env(tls: str, **extra: str) -> dict:
    # UCX prints its own log lines on stdout, where tests/peer.py answers:
    # they go to the peer's stderr log instead.
    env = {"UCX_TLS": tls, "GOSTORE_LOG_LEVEL": "info", "UCX_LOG_FILE": "/dev/stderr"}
    env.update(extra)
    return env


def ucx_peer(launcher, master, tls: str, **kw):
    """A client process on the UCX route, forced even on one host."""
    env = ucx_env(tls)
    env.update(kw.pop("env", {}))
    return expected_ucx_peer(launcher.peer(master, transport="ucx", protocol="ucx", env=env, **kw))


def tcp_remote_ports(pid: int) -> set:
    """Remote ports of process ``pid``'s established TCP connections (its
    /proc/PID/net/tcp{,6} rows whose inodes are among its descriptors)."""
    inodes = socket_inodes(pid)
    ports = set()
    for table in ("tcp", "tcp6"):
        with open(f"/proc/{pid}/net/{table}") as f:
            for row in f.read().splitlines()[1:]:
                cols = row.split()
                if len(cols) > 9 and cols[3] == "01" and cols[9] in inodes:
                    ports.add(int(cols[2].rsplit(":", 1)[1], 16))
    return ports


def no_tcp_route(pid: int, *others) -> None:
    """Process ``pid`` holds no connection to the gostore TCP port of any of
    ``others`` (its segment's name is host:port)."""
    ports = tcp_remote_ports(pid)
    for o in others:
        assert int(o.hostname.rsplit(":", 1)[1]) not in ports, (o, sorted(ports))


def assert_ucx_route(peer, tls: str, *others, disk_reads: int = 0) -> dict:
    """The peer loaded UCX with the transports asked for (UCX_TLS), and its
    ops to ``others`` went over the UCX route: it never connected to their
    gostore TCP ports nor mapped their segments' shared memory, and
    transport_info's route_ops counts UCX ones and no others but at most
    ``disk_reads`` over shared memory (an SSD tier's staging memory, which is
    not exposed to UCX, is mapped as before)."""
    info = peer.call("transport_info")["info"]
    u = ucx_info(info)
    assert info.get("protocol") == "ucx" and u.get("available"), info
    names = {r.split("/", 1)[0] for r in u.get("resources", [])}
    assert names and names <= set(tls.split(",")), (tls, u.get("resources"))
    # tcp exposes an owner to UCX's abort when a reader dies mid-get
    # (docs/ucx.md, Known limits); shared memory does not.
    assert [l.split(":", 1)[0] for l in u.get("limits", [])] == (["tcp"] if "tcp" in names else []), (tls, u)
    assert_expected_ucx(u)
    no_tcp_route(peer.pid, *others)
    assert len(peer.mapped_segments()) <= 1, peer.mapped_segments()  # its own only
    ops = route_ops(info)
    if ops:
        assert ops.get("ucx", 0) > 0, info
        assert ops.get("shm", 0) <= disk_reads, ops
        assert all(n == 0 for r, n in ops.items() if r not in ("ucx", "own", "shm")), ops
    return info


@pytest.fixture(params=list(TLS), ids=list(TLS))
def tls(request) -> str:
    _library_or_skip()
    return TLS[request.param]


SIZES = [1, 4096, 1 * MiB + 13, 8 * MiB]


def test_the_store_api_over_ucx(launcher, tls):
    """put/get, batch, zero-copy (registered and not), upsert: a writes into
    b's segment and reads back from it, bytes verified, all over UCX."""
    m = launcher.master()
    a, b = ucx_peer(launcher, m, tls), ucx_peer(launcher, m, tls)
    on_b = b.hostname
    for i, size in enumerate(SIZES):
        assert a.put_pattern(f"u/{size}", size, seed=i, preferred_segment=on_b) == 0
        assert a.check_pattern(f"u/{size}", size, seed=i), size
        assert b.check_pattern(f"u/{size}", size, seed=i), size  # b's own, locally
    keys = [f"u/batch/{j}" for j in range(32)]
    ans = a.call("batch_pattern", keys=keys, size=64 << 10, seed=100, preferred_segment=on_b)
    assert ans["put"] == [0] * 32 and all(ans["ok"]), ans
    ans = a.call("registered", keys=[f"u/zc/{j}" for j in range(8)], size=256 << 10, seed=200,
                 preferred_segment=on_b)
    assert ans["put"] == [0] * 8 and ans["get"] == [256 << 10] * 8 and ans["ok"], ans
    ans = a.call("unregistered", key="u/unreg", size=3 * MiB + 1, seed=300, preferred_segment=on_b)
    assert (ans["put"], ans["get"], ans["ok"]) == (0, 3 * MiB + 1, True), ans
    # upsert: in place (same size) and grown, read from both sides
    assert a.upsert_pattern("u/up", 1 * MiB, seed=400, preferred_segment=on_b) == 0
    assert a.upsert_pattern("u/up", 1 * MiB, seed=401, preferred_segment=on_b) == 0
    assert b.check_pattern("u/up", 1 * MiB, seed=401)
    assert a.upsert_pattern("u/up", 2 * MiB, seed=402, preferred_segment=on_b) == 0
    assert a.check_pattern("u/up", 2 * MiB, seed=402)
    assert_ucx_route(a, tls, b)


def test_replica_tasks_over_ucx(launcher):
    """Copy and move tasks' bytes move between clients over UCX; the copies
    serve once the original holder is gone."""
    tls = TLS["tcp"]
    _library_or_skip()
    m = launcher.master()
    a, b, c = (ucx_peer(launcher, m, tls, segment="32MB") for _ in range(3))
    key, size = "task/k", 3 * MiB + 7
    assert a.put_pattern(key, size, seed=1, preferred_segment=a.hostname) == 0
    ans = c.call("copy_task", key=key, targets=[b.hostname])
    assert ans["rc"] == 0, ans
    wait_until(lambda: c.call("query_task", id=ans["id"])["status"] in ("SUCCESS", "FAILED"),
               timeout=30, what="the copy task to end")
    assert c.call("query_task", id=ans["id"])["status"] == "SUCCESS"
    # and a move of the copy from b to c
    mv = a.call("move_task", key=key, source=b.hostname, target=c.hostname)
    assert mv["rc"] == 0, mv
    wait_until(lambda: a.call("query_task", id=mv["id"])["status"] in ("SUCCESS", "FAILED"),
               timeout=30, what="the move task to end")
    assert a.call("query_task", id=mv["id"])["status"] == "SUCCESS"
    assert sorted(r["segment"] for r in m.query_key(key)["replicas"]) == sorted([a.hostname, c.hostname])
    a.stop()
    wait_until(lambda: a.hostname not in m.segment_names(), timeout=10, what="a's segment unmounted")
    assert c.check_pattern(key, size, seed=1)
    assert b.check_pattern(key, size, seed=1)  # from c's copy, over UCX
    for p in (b, c):
        assert_ucx_route(p, tls, *{a, b, c} - {p})


def test_ssd_tier_beside_the_ucx_route(launcher, tmp_path):
    """A pool four times the holder's memory, on clients set up with "ucx":
    every object reads back, bytes verified: those in memory over UCX, the
    disk-only ones from the holder's SSD tier (through its RPC, as on the
    TCP route: the tier's staging memory is not exposed to UCX)."""
    _library_or_skip()
    tls = TLS["tcp"]
    m = launcher.master(enable_offload=True, tick_interval_ms=20, eviction_high_watermark_ratio=0.8,
                        eviction_ratio=0.2, client_ttl=2)
    ssd = tmp_path / "ssd"
    ssd.mkdir()
    env = {"MOONCAKE_OFFLOAD_STORAGE_BACKEND_DESCRIPTOR": "bucket_storage_backend",
           "MOONCAKE_OFFLOAD_USE_URING": "false", "MOONCAKE_OFFLOAD_HEARTBEAT_INTERVAL_SECONDS": "0.2",
           "MOONCAKE_OFFLOAD_LOCAL_BUFFER_SIZE_BYTES": str(16 * MiB),
           "MOONCAKE_OFFLOAD_TOTAL_SIZE_LIMIT_BYTES": str(256 * MiB),
           "MOONCAKE_OFFLOAD_BUCKET_SIZE_LIMIT_BYTES": str(4 * MiB)}
    holder = ucx_peer(launcher, m, tls, segment=str(16 * MiB), ssd=str(ssd), env=env)
    w = ucx_peer(launcher, m, tls, segment="0")
    n = 64  # four times the holder's pool, of 1 MiB each
    for i in range(n):
        deadline = time.monotonic() + 30
        while (rc := w.put_pattern(f"ssd/{i}", MiB, seed=i)) != 0:
            assert time.monotonic() < deadline, f"put ssd/{i}: {rc}"
            time.sleep(0.01)

    def disk_only(k):
        info = m.query_key(k)
        return bool(info and info.get("disk") and not info.get("replicas"))
    wait_until(lambda: sum(disk_only(f"ssd/{i}") for i in range(n)) >= n // 2, timeout=20,
               what="most objects on disk only")
    for i in range(n):
        assert w.check_pattern(f"ssd/{i}", MiB, seed=i), i
    disk_reads = w.call("disk_reads")["n"]
    assert disk_reads > 0
    assert_ucx_route(w, tls, holder, disk_reads=disk_reads)


def test_standalone_client_on_the_ucx_route(launcher, monkeypatch):
    """An application's gostore-client (standalone mode) reaches a peer's
    segment over UCX: the application's put lands in b, read back both ways."""
    _library_or_skip()
    tls = TLS["tcp"]
    m = launcher.master()
    b = ucx_peer(launcher, m, tls)
    for k, v in ucx_env(tls, GOSTORE_TRANSPORT="ucx").items():
        monkeypatch.setenv(k, v)
    cp = launcher.client_process(m, protocol="ucx")
    from gostore import MooncakeDistributedStore, ReplicateConfig
    s = MooncakeDistributedStore()
    assert s.setup_dummy(32 * MiB, 4 * MiB, cp.server_address) == 0
    try:
        data = pattern(7, 2 * MiB + 3)
        assert s.put("sa/k", data, ReplicateConfig(preferred_segment=b.hostname)) == 0
        assert s.get("sa/k") == data
        assert b.check_pattern("sa/k", 2 * MiB + 3, seed=7)
        info = s.transport_info()
        assert info.get("protocol") == "ucx" and ucx_info(info).get("available"), info
        assert_expected_ucx(ucx_info(info))
        no_tcp_route(cp.proc.pid, b)
    finally:
        s.close()


def test_hosts_joined_by_veth_over_ucx_tcp(launcher, hosts, secret):
    """Three "hosts" (network namespaces): the master on h0, clients on h1
    and h2 with protocol="ucx", UCX over tcp on their veth (UCX_NET_DEVICES:
    the host's own NIC), the pool authenticated."""
    _library_or_skip()
    h0, h1, h2 = hosts
    m = launcher.master(wrap=h0["wrap"], address=h0["ip"], auth_secret_file=secret)

    def host_peer(h):
        # GOSTORE_TRANSPORT=ucx: the namespaces share this machine's memory,
        # which two real hosts would not, so same-host routes are off.
        return ucx_peer(launcher, m, "tcp", hostname=h["ip"], wrap=h["wrap"],
                        env={"GOSTORE_AUTH_SECRET_FILE": secret, "UCX_NET_DEVICES": h["dev"]})
    a, b = host_peer(h1), host_peer(h2)
    for i, size in enumerate([4096, 3 * MiB + 1]):
        assert a.put_pattern(f"h/{i}", size, seed=i, preferred_segment=b.hostname) == 0
        assert a.check_pattern(f"h/{i}", size, seed=i)
        assert b.put_pattern(f"h/b{i}", size, seed=10 + i, preferred_segment=a.hostname) == 0
        assert b.check_pattern(f"h/b{i}", size, seed=10 + i)
    for p, h, o in ((a, h1, b), (b, h2, a)):
        info = assert_ucx_route(p, "tcp", o)
        assert ucx_info(info)["resources"] == [f"tcp/{h['dev']}"], info


# UCX 1.13's shared-memory transports cannot tell a dead peer
# (UCP_ERR_HANDLING_MODE_PEER is refused there, and gostore/ucx connects
# without it): gostore/ucx takes a peer whose requests see no completion for
# ucx.PeerStallBound (3 s) as gone, so the reads end within the 10 s here.
# A peer killed mid-send can also block the initiator's shared-memory
# receive queue for every peer: gostore/ucx then renews its UCP worker, so
# the live peer c is still read (before that, about half the runs over
# shm/cma failed every read of c at the 3 s bound).
@pytest.mark.parametrize("which", ["tcp", "shm", "cma"])
def test_a_peer_killed_mid_transfer_is_an_error_not_a_hang(launcher, tmp_path, which):
    """b dies (SIGKILL) while a's threads read 8 MiB objects from it: every
    read ends (empty: an error), none returns wrong bytes, a stays healthy
    and reads the right bytes from a third, live peer."""
    _library_or_skip()
    tls = TLS[which]
    m = launcher.master(client_ttl=2)
    a, b, c = (ucx_peer(launcher, m, tls) for _ in range(3))
    size = 8 * MiB
    assert a.put_pattern("kill/k", size, seed=5, preferred_segment=b.hostname) == 0
    assert a.put_pattern("kill/c", size, seed=6, preferred_segment=c.hostname) == 0
    stop, read = str(tmp_path / "stop"), str(tmp_path / "read")
    a.send("read_loop", key="kill/k", size=size, seeds=[5], threads=4, seconds=60,
           stop_file=stop, read_file=read)
    wait_until(lambda: os.path.exists(read), timeout=30, what="a's first read of b")
    b.kill()
    open(stop, "w").close()
    t0 = time.monotonic()
    stats = a.recv("read_loop", timeout=10)
    assert time.monotonic() - t0 < 10, "reads hung on the dead peer"
    assert stats["bad"] == 0 and stats["match"].get("5", 0) > 0 and stats["empty"] > 0, stats
    print("reads around the kill:", {k: stats[k] for k in ("reads", "empty", "match", "bad")},
          f"answered {time.monotonic() - t0:.2f} s after the stop")
    assert a.health_check() == 0
    assert a.check_pattern("kill/c", size, seed=6), "a's read from the live peer c after b died"


@pytest.mark.parametrize("which", list(TLS), ids=list(TLS))
def test_a_restarted_peer_is_reached_again(launcher, which):
    """b is killed and comes back under its name (host:port) with a fresh
    segment: a's endpoint to the old process is rebuilt, new objects move
    into b over UCX and read back."""
    _library_or_skip()
    tls = TLS[which]
    m = launcher.master(client_ttl=2)
    a, b = ucx_peer(launcher, m, tls), ucx_peer(launcher, m, tls)
    assert a.put_pattern("re/old", MiB, seed=1, preferred_segment=b.hostname) == 0
    assert a.check_pattern("re/old", MiB, seed=1)
    name = b.hostname
    b.kill()
    b2 = ucx_peer(launcher, m, tls, hostname=name)
    assert b2.hostname == name
    wait_until(lambda: a.put_pattern("re/new", 2 * MiB, seed=2, preferred_segment=name) == 0,
               timeout=20, interval=0.2, what="a put into the restarted peer")
    assert a.check_pattern("re/new", 2 * MiB, seed=2)
    assert b2.check_pattern("re/new", 2 * MiB, seed=2)
    assert not a.check_pattern("re/old", MiB, seed=1)  # gone with the old process, never stale bytes
    assert_ucx_route(a, tls, b)


def _stopped(pid: int) -> bool:
    """The kernel shows process ``pid`` stopped (SIGSTOP takes effect
    asynchronously)."""
    with open(f"/proc/{pid}/stat") as f:
        stat = f.read()
    return stat[stat.rindex(")") + 2] in "Tt"


def test_a_peer_taken_as_gone_fails_the_next_call_at_once(launcher):
    """Over UCX 1.13's shared memory nothing tells a reader that its peer
    hangs: a's get of b's object, b stopped (SIGSTOP), fails after two
    stalls of ucx.PeerStallBound (3 s each), b taken as gone. a's next gets
    of it fail at once (ucx.GoneFor), rather than stalling 6 s again (the
    failed get's clean-up forgot the segment, which cleared that record).
    Once b runs again, a reads from it within GoneFor (30 s) plus a bound."""
    _library_or_skip()
    tls = TLS["shm"]
    m = launcher.master(client_ttl=60)  # b stays mounted while it is stopped
    a, b = ucx_peer(launcher, m, tls), ucx_peer(launcher, m, tls)
    size = MiB
    assert a.put_pattern("gone/k", size, seed=7, preferred_segment=b.hostname) == 0
    assert a.check_pattern("gone/k", size, seed=7)
    with b.suspended():
        wait_until(lambda: _stopped(b.pid), timeout=10, interval=0.01, what="b stopped")
        took = []
        for _ in range(3):
            t0 = time.monotonic()
            assert not a.check_pattern("gone/k", size, seed=7)
            took.append(time.monotonic() - t0)
        print("gets of the stopped b took", [f"{x:.2f} s" for x in took])
        assert max(took[1:]) < 1.5, f"a peer taken as gone stalled the next calls again: {took}"
    with open(a.log_path) as f:
        assert "taken as gone" in f.read()
    wait_until(lambda: a.check_pattern("gone/k", size, seed=7), timeout=45, interval=0.5,
               what="a's read of b once it runs again")
    assert_ucx_route(a, tls, b)


def _hidden_system_ucx() -> str:
    """The real file of the system's libucp, which _client_without_system_ucx
    hides; skips where it cannot."""
    sys_lib = _ucx.system_library()
    if not sys_lib:
        pytest.skip("no system libucp.so.0 (make ucx)")
    if os.geteuid() != 0 or not shutil.which("unshare"):
        pytest.skip("hiding the system's UCX needs root and unshare(1)")
    return os.path.realpath(sys_lib)


def _client_without_system_ucx(master, site: str = "") -> dict:
    """A client process set up with protocol "ucx" while the system's
    libucp is hidden (a mount namespace binds /dev/null over it) and
    GOSTORE_LIBUCX is unset; ``site`` goes first on its PYTHONPATH. Returns
    its setup code, GOSTORE_LIBUCX as the package left it, how often the
    wheel's load_library ran, and transport_info()."""
    real = _hidden_system_ucx()
    script = (
        "import json, os\n"
        "from gostore import MooncakeDistributedStore\n"
        "s = MooncakeDistributedStore()\n"
        f"rc = s.setup('127.0.0.1', 'P2PHANDSHAKE', 0, 1 << 20, 'ucx', '', {master.addr!r})\n"
        "try:\n    import libucx; pre = len(getattr(libucx, 'loaded', []))\nexcept ImportError:\n    pre = None\n"
        "print(json.dumps({'rc': rc, 'env': os.environ.get('GOSTORE_LIBUCX'), 'preloaded': pre,"
        " 'info': s.transport_info()}))\n"
        "s.close()\n")
    env = {k: v for k, v in os.environ.items() if k != _ucx.ENV}
    env.update(UCX_TLS="tcp")
    if site:
        env["PYTHONPATH"] = site
    p = subprocess.run(["unshare", "-m", "sh", "-c", f'mount --bind /dev/null "{real}" && exec "$@"', "sh",
                        sys.executable, "-c", script], capture_output=True, text=True, env=env, timeout=60)
    assert p.returncode == 0, p.stderr[-3000:]
    return json.loads(p.stdout.strip().splitlines()[-1])


def test_the_wheels_ucx_is_loaded_when_the_system_has_none(launcher, tmp_path):
    """With the system's libucp hidden and GOSTORE_LIBUCX unset, the package
    names the "wheel's" library (a libucx package dir holding a copy of the
    system's libucp: the real 142 MB wheel is checked by hand, docs/ucx.md)
    and the Go side loads that file."""
    real = _hidden_system_ucx()
    pkg = tmp_path / "site" / "libucx"
    (pkg / "lib").mkdir(parents=True)
    shutil.copy(real, pkg / "lib" / "libucp.so.0")
    (pkg / "__init__.py").write_text("loaded = []\ndef load_library():\n    loaded.append(1)\n")
    out = _client_without_system_ucx(launcher.master(), site=str(tmp_path / "site"))
    lib = str(pkg / "lib" / "libucp.so.0")
    assert (out["rc"], out["env"], out["preloaded"]) == (0, lib, 1), out
    u = ucx_info(out["info"])
    assert out["info"]["protocol"] == "ucx" and u.get("available") and u.get("library") == lib \
        and u.get("resources"), out["info"]


def test_the_real_wheels_ucx_is_loaded_when_the_system_has_none(launcher):
    """The same with PyPI's libucx-cu12 itself installed (``pip install
    gostore[ucx]``: make test-ucx-wheel's virtualenv): the package finds
    the wheel's libucp, and the Go side loads that file, of the wheel's
    version."""
    from importlib import metadata

    lib = _ucx.wheel_library()
    if not lib:
        pytest.skip("libucx-cu12 is not installed here (make test-ucx-wheel installs it)")
    out = _client_without_system_ucx(launcher.master())
    assert (out["rc"], out["env"]) == (0, lib), out
    u = ucx_info(out["info"])
    assert out["info"]["protocol"] == "ucx" and u.get("available") and u.get("resources"), out["info"]
    assert os.path.samefile(u["library"], lib), u
    assert u["version"] == metadata.version("libucx-cu12"), u
    assert_expected_ucx(u)


def test_without_any_ucx_setup_falls_back_to_tcp_and_says_why(launcher, tmp_path):
    """No UCX anywhere (the system's hidden, no wheel): setup with "ucx"
    succeeds, bytes will move over TCP, and transport_info says why. Where
    the real wheel is installed, a libucx package without its library
    comes first on the path (which counts as none)."""
    site, pre = "", None
    if _ucx.wheel_library():
        (tmp_path / "site" / "libucx").mkdir(parents=True)
        (tmp_path / "site" / "libucx" / "__init__.py").write_text("")
        site, pre = str(tmp_path / "site"), 0
    out = _client_without_system_ucx(launcher.master(), site=site)
    assert (out["rc"], out["env"], out["preloaded"]) == (0, None, pre), out
    info, u = out["info"], ucx_info(out["info"])
    assert info["protocol"] == "tcp" and not u.get("available"), info
    assert "libucp.so.0" in u.get("reason", "") and info.get("reason"), info


def test_the_route_prints_nothing_on_stdout(launcher):
    """A process's stdout is its own (gostore-client's ready line, an
    engine's output, tests/peer.py's answers): UCX's log, whose default is
    stdout, goes to stderr when UCX_LOG_FILE is unset. UCX_LOG_LEVEL=info
    makes UCX log a line at every context it opens, so the test sees it."""
    _library_or_skip()
    m = launcher.master()
    env = {"UCX_TLS": TLS["shm"], "UCX_LOG_LEVEL": "info"}
    a, b = (expected_ucx_peer(launcher.peer(m, transport="ucx", protocol="ucx", env=env)) for _ in range(2))
    assert a.put_pattern("out/k", MiB, seed=1, preferred_segment=b.hostname) == 0  # an answer that is JSON
    assert a.check_pattern("out/k", MiB, seed=1)
    with open(a.log_path) as f:
        assert "UCX  INFO" in f.read(), "UCX logged nothing: the test shows nothing"


def test_the_sdist_carries_the_vendored_ucx_headers(tmp_path):
    """gostore/ucx compiles against UCX's headers in third_party/ucx (no
    libucx-dev needed): an sdist must ship them, with UCX's licence, or
    `pip install gostore-*.tar.gz` fails to build."""
    import tarfile

    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    p = subprocess.run([sys.executable, "setup.py", "-q", "sdist", "-d", str(tmp_path)], cwd=root,
                       capture_output=True, text=True, timeout=120)
    assert p.returncode == 0, p.stderr[-2000:]
    (tarball,) = tmp_path.glob("*.tar.gz")
    with tarfile.open(tarball) as t:
        shipped = {n.split("/", 1)[1] for n in t.getnames() if "/" in n}
    vendored = {os.path.relpath(os.path.join(d, f), root)
                for d, _, fs in os.walk(os.path.join(root, "third_party", "ucx")) for f in fs}
    assert "third_party/ucx/include/ucp/api/ucp.h" in vendored
    assert vendored <= shipped, sorted(vendored - shipped)


def test_an_allocated_segment_is_reached_over_ucx(launcher):
    """A segment mounted after setup (allocate_and_mount_segment) is a
    segment like the first: with the route forced, a reaches it over UCX,
    neither by mapping its shared memory nor through its transfer server;
    bytes verified from both sides. After a master restart the heartbeat's
    remount exposes it afresh and it is reached over UCX again."""
    _library_or_skip()
    tls = TLS["tcp"]
    m = launcher.master()
    a, b = (ucx_peer(launcher, m, tls, segment="0") for _ in range(2))
    ans = b.call("allocate_segment", size=16 * MiB)
    assert ans["ret"] == 0, ans
    (seg,) = [d for d in m.segments() if d["Name"] not in (a.hostname, b.hostname)]
    for i, size in enumerate((1, 4 * MiB + 3)):
        assert a.put_pattern(f"alloc/{i}", size, seed=i) == 0  # b's is the only segment
        assert a.check_pattern(f"alloc/{i}", size, seed=i)
        assert b.check_pattern(f"alloc/{i}", size, seed=i)
    assert a.mapped_segments() == []
    no_tcp_route(a.pid, b, types.SimpleNamespace(hostname=seg["Name"]))
    ops = route_ops(a.call("transport_info")["info"])
    assert ops.get("ucx", 0) >= 4 and all(n == 0 for r, n in ops.items() if r != "ucx"), ops
    # A master restarted without its state forgets both clients: b's
    # heartbeat mounts the allocated segment again, exposed afresh, and
    # new objects move into it over UCX.
    port = m.rpc_port
    m.kill()
    m2 = launcher.master(rpc_port=port)
    wait_until(lambda: a.put_pattern("alloc/after", 2 * MiB, seed=9) == 0, timeout=20, interval=0.2,
               what="a put into the remounted allocated segment")
    assert [d["Name"] for d in m2.segments()] == [seg["Name"]]
    assert a.check_pattern("alloc/after", 2 * MiB, seed=9)
    assert b.check_pattern("alloc/after", 2 * MiB, seed=9)
    assert a.mapped_segments() == []
    no_tcp_route(a.pid, b, types.SimpleNamespace(hostname=seg["Name"]))
    after = route_ops(a.call("transport_info")["info"])
    assert after.get("ucx", 0) >= ops["ucx"] + 2 and all(n == 0 for r, n in after.items() if r != "ucx"), after


STALE_OPS = ("get", "batch_get", "put", "zero_copy")


@pytest.mark.parametrize("op", STALE_OPS)
def test_an_owner_remount_does_not_fail_the_next_op(launcher, tmp_path, tls, op):
    """a reads from and writes into b's segment over UCX, caching b's
    descriptor. The master restarts on its state (objects kept), b's
    heartbeat remounts its segment under the same id with a fresh exposure,
    and the old descriptor is refused (canary, closed worker). a's first op
    of each kind after that still succeeds, bytes verified: it drops the
    stale descriptor, asks the master for the new one and tries once more."""
    state = str(tmp_path / "state")
    m = launcher.master(snapshot_backup_dir=state)
    a, b = ucx_peer(launcher, m, tls), ucx_peer(launcher, m, tls)
    on_b = b.hostname
    assert a.put_pattern("st/one", 4096, seed=1, preferred_segment=on_b) == 0
    keys = [f"st/batch/{j}" for j in range(8)]
    ans = a.call("batch_pattern", keys=keys, size=64 << 10, seed=10, preferred_segment=on_b)
    assert ans["put"] == [0] * 8 and all(ans["ok"]), ans
    assert a.check_pattern("st/one", 4096, seed=1)  # a now holds b's descriptor (and a spot)
    before = route_ops(a.call("transport_info")["info"]).get("ucx", 0)

    m.kill()
    m2 = launcher.master(snapshot_backup_dir=state, rpc_port=m.rpc_port)
    # b's first ping finds a master that does not know it: it remounts its
    # segment, exposed afresh, and the master logs the mount.
    wait_until(lambda: any("segment mounted" in ln and f"name={on_b}" in ln for ln in m2.log().splitlines()),
               timeout=20, what="b's remount at the restarted master")
    # b closes its old exposure only once the master answered that mount:
    # until then the old descriptor still reaches the same memory, and a's
    # op may succeed on it without the stale path this test is about ("the
    # stale descriptor was never refused", seen under load).
    wait_until(lambda: "previous exposure is closed" in open(b.log_path).read(), timeout=20,
               what="b closing its old exposure")
    # a's calls fail at once until its own ping reached the new master.
    wait_until(lambda: a.is_exist("st/one") == 1, timeout=20, what="a reaching the restarted master")

    if op == "get":
        assert a.check_pattern("st/one", 4096, seed=1)
    elif op == "batch_get":
        got = a.call("get_batch_pattern", keys=keys, size=64 << 10, seed=10)
        assert all(got["ok"]), got
    elif op == "put":
        assert a.put_pattern("st/after", 1 * MiB, seed=3, preferred_segment=on_b) == 0
        assert b.check_pattern("st/after", 1 * MiB, seed=3)
    else:
        ans = a.call("registered", keys=[f"st/zc/{j}" for j in range(4)], size=128 << 10, seed=20,
                     preferred_segment=on_b)
        assert ans["put"] == [0] * 4 and ans["get"] == [128 << 10] * 4 and ans["ok"], ans
    info = a.call("transport_info")["info"]
    with open(a.log_path) as f:  # the case this test is about was met
        # on every transport: over cma in UCX >= 1.16 (PyPI's 1.22), whose
        # one-sided ops bypass the owner's worker, by the canary read
        # before each op (gostore/ucx/bypass.go)
        assert "UCX descriptor was stale" in f.read(), "the stale descriptor was never refused"
    after = route_ops(info).get("ucx", 0)
    assert after > before  # the op went over UCX, not around it
    assert_ucx_route(a, tls, b)
