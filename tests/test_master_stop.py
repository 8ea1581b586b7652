"""A master that stops answering (SIGSTOP) must not freeze the application.

Each test runs a real client process (a child Python that imports gostore
and sets up a store against the real ``gostore-master``), stops the master
with SIGSTOP and checks, from the outside, what the calls do: they end
within their documented bound, fail fast with one log line once the client
knows the master is gone, give way to Ctrl-C (SIGINT, KeyboardInterrupt)
within a fraction of a second, and work again, bytes verified, once the
master is continued (SIGCONT).
"""

from __future__ import annotations

import os
import queue
import signal
import subprocess
import sys
import threading
import time
from typing import Dict, List, Optional

import pytest

from conftest import ROOT

# The child: reads one command a line, answers one line each. Calls run on
# its main thread, where Python delivers KeyboardInterrupt.
CHILD = r'''
import os, random, signal, sys, time
# Ctrl-C as in a terminal, however the suite was started: a shell starts a
# background job (`make test &`) with SIGINT ignored, and children inherit
# that; Python then installs no KeyboardInterrupt handler.
signal.signal(signal.SIGINT, signal.default_int_handler)
from gostore import MooncakeDistributedStore

def say(*a):
    print(*a, flush=True)

def value(seed, size=64 << 10):
    return random.Random(seed).randbytes(size)

s = MooncakeDistributedStore()
if sys.argv[1].startswith("dummy:"):  # standalone mode: calls go to a gostore-client
    rc = s.setup_dummy(64 << 20, 16 << 20, sys.argv[1][len("dummy:"):])
else:
    seg = int(os.environ.get("CHILD_SEGMENT", 16 << 20))
    rc = s.setup("127.0.0.1", "P2PHANDSHAKE", seg, 16 << 20, "tcp", "", sys.argv[1])
say("ready", rc)
for line in sys.stdin:
    cmd = line.split()
    op = cmd[0]
    if op == "quit":
        break
    if op == "put":
        say("put", s.put(cmd[1], value(int(cmd[2]))))
    elif op == "check":
        got = s.get(cmd[1])
        say("check", got == value(int(cmd[2])), len(got))
    elif op == "check_p0":
        got = s.get("p0")
        say("check", got == value(5), len(got))
    elif op == "health":
        say("health", s.health_check())
    elif op == "wait_health":
        want, end = int(cmd[1]), time.monotonic() + 20
        while s.health_check() != want and time.monotonic() < end:
            time.sleep(0.02)
        say("wait_health", s.health_check())
    elif op == "block":
        # a call that waits on the stopped master, interrupted by SIGINT
        call = cmd[1]
        say("calling", call)
        try:
            if call == "get":
                r = s.get("k0")
            elif call == "put":
                r = s.put(cmd[2], value(7))
            elif call == "is_exist":
                r = s.is_exist("k0")
            elif call == "batch_get":
                r = s.get_batch(["k0", "k1"])
            elif call == "get_p0":
                r = s.get("p0")
            elif call == "remove":
                r = s.remove("nothing-here")
            say("returned", call, repr(r)[:40])
        except KeyboardInterrupt:
            say("interrupted", call, repr(time.monotonic()))
    elif op == "storm":
        # calls on a master the client knows is gone: each fails fast
        worst, codes = 0.0, set()
        for i in range(int(cmd[1])):
            for call in ("get", "put", "is_exist"):
                t = time.monotonic()
                if call == "get":
                    r = s.get("k0")
                    codes.add("get:" + repr(r))
                elif call == "put":
                    codes.add("put:%d" % s.put("storm%d" % i, b"x" * 100))
                else:
                    codes.add("is_exist:%d" % s.is_exist("k0"))
                worst = max(worst, time.monotonic() - t)
        say("storm", "%.3f" % worst, ";".join(sorted(codes)))
    elif op == "setup":
        # a second store's setup, on the main thread
        say("calling", "setup")
        try:
            s2 = MooncakeDistributedStore()
            r = s2.setup("127.0.0.1", "P2PHANDSHAKE", 16 << 20, 16 << 20, "tcp", "", sys.argv[1])
            if r == 0:
                r = "%d %d %s" % (r, s2.put("s2", value(11)), s2.get("s2") == value(11))
                s2.close()
            say("returned", "setup", r)
        except KeyboardInterrupt:
            say("interrupted", "setup", repr(time.monotonic()))
    elif op == "close":
        t = time.monotonic()
        r = s.close()
        say("close", r, "%.3f" % (time.monotonic() - t))
'''


class Child:
    """The child process: ``ask`` writes a command and returns its answer."""

    def __init__(self, master_addr: str, logdir: str, env: Dict[str, str]) -> None:
        penv = dict(os.environ)
        penv.update(env)
        self.log_path = os.path.join(logdir, f"stopchild-{os.getpid()}-{time.monotonic_ns()}.log")
        self.err = open(self.log_path, "w")
        self.proc = subprocess.Popen([sys.executable, "-c", CHILD, master_addr], stdin=subprocess.PIPE,
                                     stdout=subprocess.PIPE, stderr=self.err, text=True, env=penv, cwd=ROOT)
        self.lines: "queue.Queue[Optional[str]]" = queue.Queue()
        threading.Thread(target=self._read, daemon=True).start()
        ready = self.next(30)
        assert ready == ["ready", "0"], f"{ready} {self.log()}"

    def _read(self) -> None:
        for line in self.proc.stdout:
            self.lines.put(line)
        self.lines.put(None)

    def next(self, timeout: float) -> List[str]:
        try:
            line = self.lines.get(timeout=timeout)
        except queue.Empty:
            raise AssertionError(f"no answer within {timeout} s; child log:\n{self.log()}") from None
        assert line is not None, f"child ended; log:\n{self.log()}"
        return line.split()

    def send(self, cmd: str) -> None:
        self.proc.stdin.write(cmd + "\n")
        self.proc.stdin.flush()

    def ask(self, cmd: str, timeout: float = 10) -> List[str]:
        self.send(cmd)
        return self.next(timeout)

    def log(self) -> str:
        with open(self.log_path) as f:
            return f.read()

    def end(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
        self.proc.wait()
        self.err.close()


def _state(pid: int, tid: str) -> str:
    """A thread's state letter (/proc/PID/task/TID/stat); "T" when stopped,
    "" when it is gone."""
    try:
        with open(f"/proc/{pid}/task/{tid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0]
    except OSError:
        return ""


@pytest.fixture
def stopper(master):
    """The master, with ``stop()``/``cont()``; continued at teardown."""
    pid = master.proc.pid

    class S:
        def stop(self) -> None:
            """SIGSTOP, and wait until every thread of the master is stopped
            (the signal reaches them one by one)."""
            os.kill(pid, signal.SIGSTOP)
            end = time.monotonic() + 10
            while not all(_state(pid, t) in ("T", "") for t in os.listdir(f"/proc/{pid}/task")):
                assert time.monotonic() < end, "the master did not stop"
                time.sleep(0.005)

        def cont(self) -> None:
            os.kill(pid, signal.SIGCONT)

    s = S()
    yield s
    s.cont()


@pytest.fixture
def child_factory(master, logdir):
    made: List[Child] = []

    def make(target: str = "", **env: str) -> Child:
        c = Child(target or master.addr, logdir, env)
        made.append(c)
        return c

    yield make
    for c in made:
        c.end()


# How long a waiting call may take to give way to SIGINT (the bound is
# 100 ms; process scheduling on a loaded test machine gets the rest).
INTERRUPT_BOUND_S = 0.5


@pytest.mark.parametrize("call", ["get", "put", "is_exist", "batch_get", "remove"])
def test_ctrl_c_interrupts_a_call_waiting_on_a_stopped_master(master, stopper, child_factory, call):
    # Pings that wait a minute: the client does not learn the master is
    # gone, so the call really waits (for MC_RPC_TIMEOUT_MS, 30 s).
    child = child_factory(GOSTORE_PING_TIMEOUT_MS="60000")
    assert child.ask("put k0 1") == ["put", "0"]
    assert child.ask("put k1 2") == ["put", "0"]
    stopper.stop()
    assert child.ask(f"block {call} k9") == ["calling", call]
    time.sleep(0.3)  # into the wait (nothing to wait on: the call never returns by itself)
    sent = time.monotonic()
    child.proc.send_signal(signal.SIGINT)
    got = child.next(10)
    assert got[:2] == ["interrupted", call], f"{got} {child.log()}"
    assert float(got[2]) - sent < INTERRUPT_BOUND_S, f"KeyboardInterrupt {float(got[2]) - sent:.3f} s after SIGINT"
    # Usable afterwards: once the master answers, bytes come back, new
    # writes work, and an interrupted put's key can be written again.
    stopper.cont()
    assert child.ask("check k0 1") == ["check", "True", str(64 << 10)]
    assert child.ask("put k9 9") == ["put", "0"]
    assert child.ask("check k9 9") == ["check", "True", str(64 << 10)]
    assert child.ask("put k2 3") == ["put", "0"]
    assert child.ask("check k2 3") == ["check", "True", str(64 << 10)]


def test_rpc_timeout_bounds_a_call(master, stopper, child_factory):
    # MC_RPC_TIMEOUT_MS, Mooncake's name, bounds the call; get logs why it
    # answers b"".
    child = child_factory(GOSTORE_PING_TIMEOUT_MS="60000", MC_RPC_TIMEOUT_MS="400")
    assert child.ask("put k0 1") == ["put", "0"]
    stopper.stop()
    t = time.monotonic()
    assert child.ask("storm 1", timeout=15)[0] == "storm"
    assert time.monotonic() - t < 3 * 0.4 + 1.5
    stopper.cont()
    log = child.log()
    assert log.count("could not reach the master") == 1, log
    assert "RPC_TIMEOUT" in log or "-901" in log, log


def test_calls_fail_fast_with_one_log_line_while_the_master_is_gone(master, stopper, child_factory):
    child = child_factory(GOSTORE_PING_INTERVAL_MS="100", GOSTORE_PING_TIMEOUT_MS="300")
    assert child.ask("put k0 1") == ["put", "0"]
    stopper.stop()
    assert child.ask("wait_health 2", timeout=30) == ["wait_health", "2"]
    got = child.ask("storm 20", timeout=60)
    assert got[0] == "storm", got
    worst, codes = float(got[1]), got[2].split(";")
    assert worst < 0.2, f"a call took {worst} s with the master known gone"
    assert sorted(codes) == ["get:b''", "is_exist:-900", "put:-900"], codes
    log = child.log()
    assert log.count("could not reach the master") == 1, log
    # The master back: calls work again, bytes verified.
    stopper.cont()
    assert child.ask("wait_health 0", timeout=30) == ["wait_health", "0"]
    assert child.ask("check k0 1") == ["check", "True", str(64 << 10)]
    assert child.ask("put k5 5") == ["put", "0"]
    assert child.ask("check k5 5") == ["check", "True", str(64 << 10)]
    assert "the master answers calls again" in child.log()


@pytest.mark.parametrize("known", [False, True], ids=["just-stopped", "known-gone"])
def test_close_with_a_stopped_master_is_bounded(master, stopper, child_factory, known):
    env = {"GOSTORE_PING_INTERVAL_MS": "100", "GOSTORE_PING_TIMEOUT_MS": "300"} if known else {}
    child = child_factory(**env)
    assert child.ask("put k0 1") == ["put", "0"]
    stopper.stop()
    if known:
        assert child.ask("wait_health 2", timeout=30) == ["wait_health", "2"]
    got = child.ask("close", timeout=30)
    assert got[:2] == ["close", "0"], got
    # GOSTORE_CLOSE_TIMEOUT_MS's default, 2 s, plus the release.
    assert float(got[2]) < (0.5 if known else 3.0), got


def test_ctrl_c_interrupts_a_standalone_call(master, stopper, child_factory, client_process_factory, monkeypatch):
    # Standalone mode: the application waits on gostore-client's socket,
    # gostore-client on the stopped master.
    monkeypatch.setenv("GOSTORE_PING_TIMEOUT_MS", "60000")
    server = client_process_factory(master)
    child = child_factory(target="dummy:" + server.server_address)
    assert child.ask("put k0 1") == ["put", "0"]
    assert child.ask("put k1 2") == ["put", "0"]
    stopper.stop()
    assert child.ask("block batch_get") == ["calling", "batch_get"]
    time.sleep(0.3)
    sent = time.monotonic()
    child.proc.send_signal(signal.SIGINT)
    got = child.next(10)
    assert got[:2] == ["interrupted", "batch_get"], f"{got} {child.log()}"
    assert float(got[2]) - sent < INTERRUPT_BOUND_S
    stopper.cont()
    # The next calls get their own answers, not the interrupted call's.
    assert child.ask("check k1 2") == ["check", "True", str(64 << 10)]
    assert child.ask("put k3 3") == ["put", "0"]
    assert child.ask("check k3 3") == ["check", "True", str(64 << 10)]


def test_bounds_from_setup_and_their_bad_values(master, stopper, monkeypatch, capfd):
    from gostore import MooncakeDistributedStore

    args = ("127.0.0.1", "P2PHANDSHAKE", 16 << 20, 16 << 20, "tcp", "", master.addr)
    s = MooncakeDistributedStore()
    with pytest.raises(TypeError):
        s.setup(*args, rpc_timeout_ms="400")
    monkeypatch.setenv("MC_RPC_TIMEOUT_MS", "soon")
    assert s.setup(*args) == -600
    assert "MC_RPC_TIMEOUT_MS" in capfd.readouterr().err
    assert s.setup(*args, close_timeout_ms=-1) == -600
    # setup's key outranks the environment (which is wrong here, unread).
    monkeypatch.setenv("GOSTORE_PING_TIMEOUT_MS", "60000")
    assert s.setup(*args, rpc_timeout_ms=300) == 0
    try:
        assert s.put("bound", b"v" * 1000) == 0
        stopper.stop()
        t = time.monotonic()
        assert s.is_exist("bound") == -901  # RPC_TIMEOUT, at the bound
        assert time.monotonic() - t < 2.0
        stopper.cont()
        assert s.get("bound") == b"v" * 1000
    finally:
        stopper.cont()
        s.close()


def test_ctrl_c_interrupts_a_setup_waiting_on_a_stopped_master(master, stopper, child_factory):
    child = child_factory()
    stopper.stop()
    assert child.ask("setup") == ["calling", "setup"]
    time.sleep(0.3)
    sent = time.monotonic()
    child.proc.send_signal(signal.SIGINT)
    got = child.next(15)
    assert got[:2] == ["interrupted", "setup"], f"{got} {child.log()}"
    assert float(got[2]) - sent < INTERRUPT_BOUND_S
    stopper.cont()
    assert child.ask("setup", timeout=30)[:2] == ["calling", "setup"]
    assert child.next(30) == ["returned", "setup", "0", "0", "True"]


def test_ctrl_c_interrupts_a_transfer_from_a_stopped_peer(master, peer_factory, child_factory):
    # Not the master this time: the object's holder stops, and the get
    # waits for its bytes over TCP.
    holder = peer_factory(master, segment="32MB")
    value = peer_mod_value(5)
    assert holder.put("p0", value) == 0
    child = child_factory(CHILD_SEGMENT="0", GOSTORE_TRANSPORT="tcp", GOSTORE_PING_TIMEOUT_MS="60000")
    assert child.ask("check_p0") == ["check", "True", str(64 << 10)]
    with holder.suspended():
        end = time.monotonic() + 10
        while not all(_state(holder.pid, t) in ("T", "") for t in os.listdir(f"/proc/{holder.pid}/task")):
            assert time.monotonic() < end
            time.sleep(0.005)
        assert child.ask("block get_p0") == ["calling", "get_p0"]
        time.sleep(0.3)
        sent = time.monotonic()
        child.proc.send_signal(signal.SIGINT)
        got = child.next(10)
        assert got[:2] == ["interrupted", "get_p0"], f"{got} {child.log()}"
        assert float(got[2]) - sent < INTERRUPT_BOUND_S
    assert child.ask("check_p0") == ["check", "True", str(64 << 10)]


def peer_mod_value(seed: int) -> bytes:
    """The child's value(seed)."""
    import random
    return random.Random(seed).randbytes(64 << 10)
