"""Harness of the integration suites: the real master executable, client
processes (``tests/peer.py``) and an in-process store.

Fixtures
--------
``master_factory(**flags)``  starts ``gostore-master`` with
    ``--rpc_address=127.0.0.1 --rpc_port=0 --metrics_port=0`` plus ``flags``
    (``client_ttl=1`` becomes ``--client_ttl=1``) and returns a
    :class:`Master`. At teardown every master a test did not kill on purpose
    must still be running (it did not crash), then it is killed.
``master``                   a master with default flags (per test).
``peer_factory(master, ...)`` starts a :class:`Peer` process.
``store_factory(master, ...)`` an in-process ``MooncakeDistributedStore``.
``no_lib``                     GOSTORE_LIB points at nothing and loading the library fails the test.
``client_process_factory(master, ...)`` starts a ``gostore-client`` process
    (standalone mode); its ``server_address`` is what ``setup_dummy`` takes.
``cluster``                  module-scoped: a master (``--default_kv_lease_ttl=3000``),
    two peers ``a``/``b`` (64 MiB each) and the test process' store ``store``
    (64 MiB). Tests sharing it use unique key prefixes (``uniq`` fixture;
    the prefix's objects are force-removed after the test).
``stuck_put(...)``           leaves a peer between PutStart and PutEnd (the
    replica's holder is suspended with ``Peer.suspended()`` and the writer
    reaches it over TCP): for preemption, takeover and dead-writer tests.
``Peer.send/recv``           run commands on several peers at once.
``netns_hosts(n)``           ``n`` "hosts": network namespaces joined by veth
    pairs to a bridge, addresses 10.77.i.1/16 (root only; skips otherwise);
    ``hosts`` is three of them. ``secret``: a pool secret file (every port
    of a namespace listens beyond loopback, so the pool authenticates).
``run_isolated(fn)``         runs ``fn(store, prefix)`` in a fresh client
    process against a master of its own (tests/isolated.py): for calls that
    could crash the native library, so a crash fails one test, not the run.

Logs: masters' and peers' stderr go to files under pytest's tmp dir; a
failing peer call or a crashed master quotes their tail.
"""

from __future__ import annotations

import contextlib
import ctypes
import itertools
import json
import os
import queue
import re
import signal
import subprocess
import sys
import sysconfig
import threading
import time
import urllib.error
import uuid
import urllib.request
from typing import Callable, Dict, List, Optional

import pytest

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
PEER_SCRIPT = os.path.join(HERE, "peer.py")
MiB = 1 << 20

# Quieter logs; must be set before the native library is loaded here, and
# peers inherit it.
os.environ.setdefault("GOSTORE_LOG_LEVEL", "warn")



import gostore  # noqa: E402
from gostore import MooncakeDistributedStore, _native  # noqa: E402

import peer as peer_mod  # noqa: E402  (tests/ is on sys.path: rootdir conftest)

pattern = peer_mod.pattern


def stuck_put(master: "Master", writer: "Peer", key: str, size: int, seed: int,
              holder: "Peer", op: str = "put_pattern") -> None:
    """Leave ``writer`` between PutStart and PutEnd: it starts ``op`` of
    ``key`` onto ``holder``'s segment, which must be suspended (see
    :meth:`Peer.suspended`) and reached over TCP (``writer`` started with
    ``transport="tcp"``), so the transfer blocks. Returns once the master
    shows the unfinished replica; ``writer.recv()`` collects the put's
    result after ``holder`` resumes."""
    writer.send(op, key=key, size=size, seed=seed, preferred_segment=holder.hostname)

    def unfinished():
        info = master.query_key(key)
        return bool(info and info["replicas"]
                    and all(r["status"] != "COMPLETE" for r in info["replicas"])
                    and {r["segment"] for r in info["replicas"]} == {holder.hostname})

    wait_until(unfinished, timeout=10, what=f"an unfinished put of {key} on {holder}")


def master_binary() -> str:
    path = gostore.master_binary_path()
    if os.path.exists(path):
        return path
    script = os.path.join(os.path.dirname(sys.executable), "gostore-master")
    if os.path.exists(script):
        return script
    pytest.fail(f"gostore-master not found ({path}); run `make install`")


def mem_available() -> int:
    """The host's MemAvailable, in bytes."""
    with open("/proc/meminfo") as f:
        for line in f:
            if line.startswith("MemAvailable:"):
                return int(line.split()[1]) * 1024
    raise AssertionError("no MemAvailable")


def wait_until(pred: Callable[[], object], timeout: float = 10.0, interval: float = 0.05,
               what: str = "condition"):
    """Poll ``pred`` until it returns a truthy value; fail after ``timeout`` s."""
    deadline = time.monotonic() + timeout
    last = None
    while True:
        last = pred()
        if last:
            return last
        if time.monotonic() > deadline:
            pytest.fail(f"timed out after {timeout}s waiting for {what} (last={last!r})")
        time.sleep(interval)


def _tail(path: str, n: int = 3000) -> str:
    try:
        with open(path, "rb") as f:
            f.seek(0, os.SEEK_END)
            size = f.tell()
            f.seek(max(0, size - n))
            return f.read().decode("utf-8", "replace")
    except OSError:
        return ""


# ---------------------------------------------------------------------------
# the master executable


class Master:
    """A running ``gostore-master`` process."""

    def __init__(self, flags: Dict[str, object], logdir: str, wait: bool = True,
                 wrap: Optional[List[str]] = None, address: str = "127.0.0.1") -> None:
        args = list(wrap or []) + [master_binary(), f"--rpc_address={address}", "--rpc_port=0", "--metrics_port=0"]
        for k, v in flags.items():
            if isinstance(v, bool):
                v = "true" if v else "false"
            args.append(f"--{k}={v}")
        self.args = args
        # What an authenticated HTTP request to this master carries.
        self.bearer: Optional[str] = None
        self.ssl_context = None
        if flags.get("auth_secret_file"):
            with open(str(flags["auth_secret_file"])) as f:
                self.bearer = f.read().strip()
        if flags.get("tls_cert_file"):
            import ssl
            ctx = ssl.create_default_context(cafile=str(flags["tls_ca_file"]))
            ctx.check_hostname = False
            ctx.load_cert_chain(str(flags["tls_cert_file"]), str(flags["tls_key_file"]))
            self.ssl_context = ctx
        fd, self.log_path = _tempfile(logdir, "master")
        self.proc = subprocess.Popen(args, stdout=subprocess.PIPE, stderr=fd, text=True,
                                     preexec_fn=_die_with_parent)
        os.close(fd)
        self.killed_on_purpose = False
        if wait:
            self.ready()

    def ready(self, timeout: float = 15.0) -> "Master":
        """Wait for the "listening" line (a standby under --enable_ha
        prints it only once it leads) and read the addresses."""
        args = self.args
        line = _readline_with_timeout(self.proc.stdout, timeout)
        if not line or "rpc=" not in line:
            self.proc.kill()
            self.proc.wait()
            raise RuntimeError(f"gostore-master did not start ({args}): stdout={line!r} "
                               f"stderr={_tail(self.log_path)}")
        assert line.startswith("gostore-master listening"), line
        fields = dict(f.split("=", 1) for f in line.split() if "=" in f)
        self.rpc_addr: str = fields["rpc"]
        self.http_addr: str = fields["http"]
        host, port = self.rpc_addr.rsplit(":", 1)
        self.rpc_host, self.rpc_port = host, int(port)
        return self

    @property
    def addr(self) -> str:
        return self.rpc_addr

    def alive(self) -> bool:
        return self.proc.poll() is None

    def kill(self) -> None:
        """SIGKILL on purpose (teardown then does not count it as a crash)."""
        self.killed_on_purpose = True
        if self.alive():
            self.proc.kill()
        self.proc.wait()

    def http(self, path: str, timeout: float = 5.0, authenticate: bool = True):
        """``(status, body_text)`` of ``GET http://<http_addr><path>``
        (https with the master's own certificate under mutual TLS; with
        its shared secret as the bearer token; neither when not
        ``authenticate``)."""
        scheme = "https" if self.ssl_context else "http"
        req = urllib.request.Request(f"{scheme}://{self.http_addr}{path}")
        ctx = self.ssl_context
        if authenticate and self.bearer:
            req.add_header("Authorization", f"Bearer {self.bearer}")
        if ctx is not None and not authenticate:
            import ssl
            ctx = ssl.create_default_context()
            ctx.check_hostname, ctx.verify_mode = False, ssl.CERT_NONE
        try:
            with urllib.request.urlopen(req, timeout=timeout, context=ctx) as r:
                return r.status, r.read().decode("utf-8", "replace")
        except urllib.error.HTTPError as e:
            return e.code, e.read().decode("utf-8", "replace")

    def segments(self) -> List[dict]:
        status, body = self.http("/get_all_segments")
        assert status == 200, (status, body)
        return json.loads(body)

    def segment_names(self) -> List[str]:
        return [s["Name"] for s in self.segments()]

    def query_key(self, key: str) -> Optional[dict]:
        from urllib.parse import quote

        status, body = self.http("/query_key?key=" + quote(key, safe=""))
        if status == 404:
            return None
        assert status == 200, (status, body)
        return json.loads(body)

    def log(self) -> str:
        return _tail(self.log_path, 6000)

    def metric(self, name: str) -> float:
        """The value of an unlabelled series of ``/metrics``."""
        status, body = self.http("/metrics")
        assert status == 200, (status, body)
        m = re.search(rf"^{re.escape(name)} (\S+)$", body, re.M)
        assert m, f"{name} missing from /metrics"
        return float(m.group(1))

    def stop(self) -> Optional[str]:
        """Kill; returns an error text if it had died on its own."""
        err = None
        if not self.killed_on_purpose and not self.alive():
            err = (f"gostore-master exited on its own with {self.proc.returncode}; "
                   f"log tail:\n{self.log()}")
        if self.alive():
            self.proc.kill()
        self.proc.wait()
        if self.proc.stdout:
            self.proc.stdout.close()
        return err


_libc = ctypes.CDLL(None, use_errno=True)


def _die_with_parent() -> None:
    """In the forked child, before exec: SIGKILL it if pytest dies (a crash of
    the test process must not leave masters behind). Peers need nothing: they
    exit when their stdin closes."""
    _libc.prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG


def _readline_with_timeout(stream, timeout: float) -> str:
    box: list = []
    t = threading.Thread(target=lambda: box.append(stream.readline()), daemon=True)
    t.start()
    t.join(timeout)
    return box[0] if box else ""


_counter = itertools.count()


def _tempfile(logdir: str, prefix: str):
    path = os.path.join(logdir, f"{prefix}-{os.getpid()}-{next(_counter)}.log")
    fd = os.open(path, os.O_CREAT | os.O_WRONLY | os.O_TRUNC, 0o644)
    return fd, path


# ---------------------------------------------------------------------------
# client processes


class PeerError(AssertionError):
    pass


class Peer:
    """A client process running ``tests/peer.py`` (JSON lines on stdin/stdout)."""

    def __init__(self, master_addr: str, logdir: str, segment="64MB", buffer="16MB",
                 transport: Optional[str] = None, hostname: str = "127.0.0.1",
                 expect_ready: bool = True, timeout: float = 30.0,
                 ssd: Optional[str] = None, env: Optional[Dict[str, str]] = None,
                 wrap: Optional[List[str]] = None, protocol: str = "tcp",
                 tenant: Optional[str] = None) -> None:
        """``ssd``: a directory for the peer's SSD tier; ``env``: extra
        environment (e.g. MOONCAKE_OFFLOAD_* settings); ``wrap``: a command
        the peer runs under (``ip netns exec h2``: another "host");
        ``protocol``: setup's protocol (``"ucx"``: the UCX route)."""
        penv = dict(os.environ)
        penv.pop("GOSTORE_TRANSPORT", None)
        if transport:
            penv["GOSTORE_TRANSPORT"] = transport
        penv.update(env or {})
        self.transport = transport or "default"
        args = list(wrap or []) + [sys.executable, PEER_SCRIPT, "--master", master_addr,
                                   "--segment", str(segment), "--buffer", str(buffer), "--hostname", hostname]
        if ssd is not None:
            args += ["--ssd", ssd]
        if protocol != "tcp":
            args += ["--protocol", protocol]
        if tenant is not None:
            args += ["--tenant", tenant]
        fd, self.log_path = _tempfile(logdir, "peer")
        self.proc = subprocess.Popen(args, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                     stderr=fd, text=True, env=penv, cwd=ROOT)
        os.close(fd)
        self._lines: "queue.Queue[Optional[str]]" = queue.Queue()
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()
        self.pid = self.proc.pid
        hello = self._next(timeout)
        self.setup_rc = hello.get("rc")
        self.hostname = hello.get("hostname", "")
        if expect_ready and not hello.get("ready"):
            self.kill()
            raise PeerError(f"peer setup failed: {hello} stderr:\n{self.log()}")

    def _read(self) -> None:
        for line in self.proc.stdout:
            self._lines.put(line)
        self._lines.put(None)

    def _next(self, timeout: float) -> dict:
        try:
            line = self._lines.get(timeout=timeout)
        except queue.Empty:
            raise PeerError(f"peer {self.pid} did not answer within {timeout}s; "
                            f"stderr:\n{self.log()}") from None
        if line is None:
            self.proc.wait(timeout=5)
            raise PeerError(f"peer {self.pid} exited ({self.proc.returncode}); "
                            f"stderr:\n{self.log()}")
        return json.loads(line)

    def log(self) -> str:
        return _tail(self.log_path)

    def call(self, op: str, timeout: float = 60.0, **kw) -> dict:
        self.send(op, **kw)
        return self.recv(op, timeout)

    def send(self, op: str, **kw) -> None:
        """Start a command without waiting: several peers can then work at
        once; collect each answer, in order, with :meth:`recv`."""
        if self.proc.poll() is not None:
            raise PeerError(f"peer {self.pid} is not running ({self.proc.returncode}); "
                            f"stderr:\n{self.log()}")
        self.proc.stdin.write(json.dumps(dict(op=op, **kw)) + "\n")
        self.proc.stdin.flush()

    def recv(self, op: str = "?", timeout: float = 60.0) -> dict:
        """The answer to the oldest command sent and not yet received."""
        ans = self._next(timeout)
        if "error" in ans:
            raise PeerError(f"peer {self.pid} failed on {op}: {ans['error']}")
        return ans

    def answered(self) -> bool:
        """True when an answer is waiting (:meth:`recv` will not block)."""
        return not self._lines.empty()

    # convenience wrappers ---------------------------------------------------
    def put(self, key: str, value: bytes, replica_num: int = 1, preferred_segment: str = "") -> int:
        return self.call("put", key=key, hex=value.hex(), replica_num=replica_num,
                         preferred_segment=preferred_segment)["rc"]

    def get(self, key: str) -> bytes:
        return bytes.fromhex(self.call("get", key=key)["hex"])

    def upsert(self, key: str, value: bytes, replica_num: int = 1, preferred_segment: str = "",
               hard_pin: bool = False) -> int:
        return self.call("upsert", key=key, hex=value.hex(), replica_num=replica_num,
                         preferred_segment=preferred_segment, hard_pin=hard_pin)["rc"]

    def upsert_pattern(self, key: str, size: int, seed: int, replica_num: int = 1,
                       preferred_segment: str = "", hard_pin: bool = False) -> int:
        return self.call("upsert_pattern", key=key, size=size, seed=seed, replica_num=replica_num,
                         preferred_segment=preferred_segment, hard_pin=hard_pin)["rc"]

    def is_exist(self, key: str) -> int:
        return self.call("is_exist", key=key)["rc"]

    def get_size(self, key: str) -> int:
        return self.call("get_size", key=key)["rc"]

    def remove(self, key: str, force: bool = False) -> int:
        return self.call("remove", key=key, force=force)["rc"]

    def put_pattern(self, key: str, size: int, seed: int, replica_num: int = 1,
                    preferred_segment: str = "") -> int:
        return self.call("put_pattern", key=key, size=size, seed=seed, replica_num=replica_num,
                         preferred_segment=preferred_segment)["rc"]

    def check_pattern(self, key: str, size: int, seed: int) -> bool:
        ans = self.call("check_pattern", key=key, size=size, seed=seed)
        return bool(ans["ok"])

    def get_hostname(self) -> str:
        return self.call("hostname")["hostname"]

    def health_check(self) -> int:
        return self.call("health")["rc"]

    def mapped_segments(self) -> List[str]:
        return self.call("mapped_segments")["names"]

    def close(self) -> int:
        return self.call("close")["rc"]

    # process control --------------------------------------------------------
    def alive(self) -> bool:
        return self.proc.poll() is None

    def kill(self) -> None:
        """SIGKILL: no close(), no unmount; the master must notice by itself."""
        if self.alive():
            os.kill(self.proc.pid, signal.SIGKILL)
        self.proc.wait()
        self._close_pipes()

    @contextlib.contextmanager
    def suspended(self):
        """SIGSTOP the peer for the ``with`` block (SIGCONT after, whatever
        happens). Its segment stays mounted and mapped, but nothing it serves
        over TCP moves: a TCP transfer to or from it blocks until the block
        ends. Keep it short (the master expires a client silent for
        ``client_ttl``)."""
        os.kill(self.proc.pid, signal.SIGSTOP)
        try:
            yield self
        finally:
            if self.alive():
                os.kill(self.proc.pid, signal.SIGCONT)

    def stop(self, timeout: float = 15.0) -> None:
        """Ask the peer to exit (it closes its store); SIGKILL if it hangs."""
        if self.alive():
            try:
                self.proc.stdin.write(json.dumps({"op": "exit"}) + "\n")
                self.proc.stdin.flush()
                self.proc.stdin.close()
            except (BrokenPipeError, OSError, ValueError):
                pass
            try:
                self.proc.wait(timeout=timeout)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        self._close_pipes()

    def _close_pipes(self) -> None:
        for s in (self.proc.stdin, self.proc.stdout):
            try:
                if s:
                    s.close()
            except (OSError, ValueError):
                pass

    def __repr__(self) -> str:
        return f"<Peer pid={self.pid} {self.hostname} {self.transport}>"


class ClientProcess:
    """A running ``gostore-client`` (standalone mode's server), started with
    ``--port=0`` and its own IPC socket; ``server_address`` is what
    ``setup_dummy`` takes."""

    def __init__(self, master_addr: str, logdir: str, segment: str = "64MB",
                 ipc_path: str = "", **flags) -> None:
        fd, self.log_path = _tempfile(logdir, "gostore-client")
        self.ipc_path = ipc_path or self.log_path[:-4] + ".sock"
        args = [sys.executable, "-m", "gostore.client_server", "--host=127.0.0.1", "--port=0",
                f"--master_server_address={master_addr}", f"--global_segment_size={segment}",
                "--metadata_server=P2PHANDSHAKE", f"--ipc_socket_path={self.ipc_path}"]
        args += [f"--{k}={v}" for k, v in flags.items()]
        self.args = args
        self.proc = subprocess.Popen(args, stdout=subprocess.PIPE, stderr=fd, text=True,
                                     preexec_fn=_die_with_parent)
        os.close(fd)
        line = _readline_with_timeout(self.proc.stdout, 30.0)
        if '"ready"' not in line:
            self.kill()
            raise RuntimeError(f"gostore-client did not start: {line!r} {_tail(self.log_path)}")
        info = json.loads(line)
        self.port: int = info["port"]
        self.segment: str = info["segment"]
        self.server_address = f"127.0.0.1:{self.port}"

    def alive(self) -> bool:
        return self.proc.poll() is None

    def kill(self) -> None:
        if self.alive():
            self.proc.kill()
        self.proc.wait()

    def log(self) -> str:
        return _tail(self.log_path, 20000)


# ---------------------------------------------------------------------------
# fixtures


class _Launcher:
    """Starts masters/peers/stores and cleans up in reverse order."""

    def __init__(self, logdir: str) -> None:
        self.logdir = logdir
        self.masters: List[Master] = []
        self.peers: List[Peer] = []
        self.stores: List[MooncakeDistributedStore] = []
        self.clients: List[ClientProcess] = []

    def master(self, wait: bool = True, wrap: Optional[List[str]] = None, address: str = "127.0.0.1",
               **flags) -> Master:
        """A master; with wait=False it is returned as soon as it runs
        (call its ready() later: a standby becomes ready when it leads);
        ``wrap``/``address``: run it in another network namespace."""
        m = Master(flags, self.logdir, wait=wait, wrap=wrap, address=address)
        self.masters.append(m)
        return m

    def peer(self, master, **kw) -> Peer:
        addr = master.addr if isinstance(master, Master) else master
        p = Peer(addr, self.logdir, **kw)
        self.peers.append(p)
        return p

    def store(self, master, segment=64 * MiB, buffer=16 * MiB, hostname="127.0.0.1",
              check: bool = True) -> MooncakeDistributedStore:
        addr = master.addr if isinstance(master, Master) else master
        s = MooncakeDistributedStore()
        self.stores.append(s)
        rc = s.setup(hostname, "P2PHANDSHAKE", segment, buffer, "tcp", "", addr)
        if check:
            assert rc == 0, f"in-process setup against {addr} returned {rc}"
        return s

    def client_process(self, master, **kw) -> ClientProcess:
        addr = master.addr if isinstance(master, Master) else master
        c = ClientProcess(addr, self.logdir, **kw)
        self.clients.append(c)
        return c

    def teardown(self) -> List[str]:
        for s in self.stores:
            try:
                s.close()
            except Exception:
                pass
        for c in self.clients:
            c.kill()
        for p in self.peers:
            p.kill()
        errors = []
        for m in self.masters:
            err = m.stop()
            if err:
                errors.append(err)
        return errors


@pytest.fixture(scope="session")
def logdir(tmp_path_factory) -> str:
    return str(tmp_path_factory.mktemp("gostore-logs"))


@pytest.fixture
def launcher(logdir):
    lau = _Launcher(logdir)
    yield lau
    errors = lau.teardown()
    assert not errors, "master crashed during the test:\n" + "\n".join(errors)


@pytest.fixture
def master_factory(launcher) -> Callable[..., Master]:
    return launcher.master


@pytest.fixture
def master(master_factory) -> Master:
    return master_factory()


@pytest.fixture
def peer_factory(launcher) -> Callable[..., Peer]:
    return launcher.peer


@pytest.fixture
def store_factory(launcher) -> Callable[..., MooncakeDistributedStore]:
    return launcher.store


@pytest.fixture
def no_lib(monkeypatch, tmp_path):
    """Point GOSTORE_LIB at nothing; fail loudly if anything tries to load
    the native library (tests of argument checks that run before it)."""
    monkeypatch.setenv("GOSTORE_LIB", str(tmp_path / "does-not-exist.so"))
    monkeypatch.setattr(_native, "_lib", None)

    def boom():
        raise AssertionError("native library touched during argument validation")

    monkeypatch.setattr(_native, "lib", boom)


@pytest.fixture
def client_process_factory(launcher) -> Callable[..., ClientProcess]:
    """Starts ``gostore-client`` processes (standalone mode) on a master."""
    return launcher.client_process


CLUSTER_LEASE_MS = 3000


class Cluster:
    """A master, two peer processes and the test process' own store."""

    def __init__(self, lau: _Launcher) -> None:
        # Leases long enough that "still leased" checks cannot race their
        # expiry on a loaded machine; expiry itself is tested on a master
        # with a 500 ms lease.
        self.master = lau.master(default_kv_lease_ttl=CLUSTER_LEASE_MS)
        self.a = lau.peer(self.master, segment="64MB")
        self.b = lau.peer(self.master, segment="64MB")
        self.store = lau.store(self.master, segment=64 * MiB)
        self.hostname = self.store.get_hostname()


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    lau = _Launcher(str(tmp_path_factory.mktemp("cluster")))
    c = Cluster(lau)
    yield c
    for p in (c.a, c.b):
        assert p.alive(), f"shared peer {p} died during the module:\n{p.log()}"
    errors = lau.teardown()
    assert not errors, "master crashed during the module:\n" + "\n".join(errors)


@pytest.fixture
def store(cluster) -> MooncakeDistributedStore:
    """The test process' store in the shared cluster."""
    return cluster.store


_uniq = itertools.count()


@pytest.fixture
def uniq(request):
    """A key prefix no other test uses."""
    name = "".join(c if c.isalnum() else "_" for c in request.node.name)
    prefix = f"{name}-{os.getpid()}-{next(_uniq)}/"
    yield prefix
    if "cluster" in request.fixturenames:
        # keep the shared pool from filling up across a module
        c = request.getfixturevalue("cluster")
        if c.store.health_check() == 0:
            c.store.remove_by_regex("^" + re.escape(prefix), force=True)


ISOLATED_SCRIPT = os.path.join(HERE, "isolated.py")


@pytest.fixture
def run_isolated(master_factory, uniq):
    """``run_isolated(fn)``: run ``fn(store, prefix)`` in a fresh client process
    (see tests/isolated.py) against a master of its own, so that a crash
    leaves no dead segment behind in a shared cluster; fail with the
    process' output if it fails or crashes (a Go panic aborts the process)."""

    def run(fn, timeout: float = 60.0) -> None:
        m = master_factory()
        proc = subprocess.run(
            [sys.executable, ISOLATED_SCRIPT, fn.__module__, fn.__name__, m.addr, uniq],
            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, timeout=timeout,
            cwd=ROOT,
        )
        if proc.returncode != 0:
            how = (f"was killed by signal {-proc.returncode}" if proc.returncode < 0
                   else f"exited with {proc.returncode}")
            pytest.fail(f"isolated client process running {fn.__name__} {how}:\n"
                        f"{proc.stdout[-6000:]}", pytrace=False)

    return run


# ---------------------------------------------------------------------------
# hosts: network namespaces


def _ip(*args: str) -> None:
    subprocess.run(args, check=True, capture_output=True)


@pytest.fixture
def netns_hosts():
    """``make(n)``: ``n`` "hosts" on this machine, each a network namespace
    with a veth to one bridge (10.77.i.1/16); a list of ``{"ns", "ip",
    "wrap" (the command prefix that runs in it), "veth" (its outer end, to
    cut the link), "dev" (its inner end, the host's NIC)}``. Needs root; skips saying why where namespaces cannot
    be made. Everything made is deleted at teardown."""
    made: List[str] = []
    bridges: List[str] = []

    def make(n: int) -> List[dict]:
        if os.geteuid() != 0:
            pytest.skip("network namespaces need root")
        tag = uuid.uuid4().hex[:6]
        bridge = f"gsbr{tag}"
        names = [f"gs{tag}h{i}" for i in range(n)]
        try:
            _ip("ip", "link", "add", bridge, "type", "bridge")
            bridges.append(bridge)
            _ip("ip", "link", "set", bridge, "up")
            for i, ns in enumerate(names):
                _ip("ip", "netns", "add", ns)
                made.append(ns)
                outer, inner = f"gsv{tag}{i}", f"gsi{tag}{i}"
                _ip("ip", "link", "add", outer, "type", "veth", "peer", "name", inner)
                _ip("ip", "link", "set", inner, "netns", ns)
                _ip("ip", "link", "set", outer, "master", bridge)
                _ip("ip", "link", "set", outer, "up")
                _ip("ip", "netns", "exec", ns, "ip", "addr", "add", f"10.77.{i}.1/16", "dev", inner)
                _ip("ip", "netns", "exec", ns, "ip", "link", "set", inner, "up")
                _ip("ip", "netns", "exec", ns, "ip", "link", "set", "lo", "up")
        except (subprocess.CalledProcessError, FileNotFoundError) as e:
            pytest.skip(f"cannot make network namespaces here: {e}")
        return [{"ns": ns, "ip": f"10.77.{i}.1", "wrap": ["ip", "netns", "exec", ns], "veth": f"gsv{tag}{i}",
                 "dev": f"gsi{tag}{i}"} for i, ns in enumerate(names)]

    yield make
    for ns in made:
        subprocess.run(["ip", "netns", "del", ns], capture_output=True)
    for b in bridges:
        subprocess.run(["ip", "link", "del", b], capture_output=True)


@pytest.fixture
def hosts(netns_hosts):
    """Three namespaces (see :func:`netns_hosts`)."""
    return netns_hosts(3)


@pytest.fixture
def secret(tmp_path):
    """The pool's shared secret: every port in a namespace listens beyond
    loopback, so the master and the clients authenticate (docs/security.md)."""
    p = tmp_path / "pool-secret"
    p.write_text(uuid.uuid4().hex + uuid.uuid4().hex)
    return str(p)


def socket_inodes(pid: int) -> set:
    """The inodes of process ``pid``'s sockets (its /proc/PID/fd links),
    to find its rows in /proc/PID/net/tcp{,6}."""
    out = set()
    for fd in os.listdir(f"/proc/{pid}/fd"):
        try:
            link = os.readlink(f"/proc/{pid}/fd/{fd}")
        except OSError:
            continue
        if link.startswith("socket:["):
            out.add(link[8:-1])
    return out
