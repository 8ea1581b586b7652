#!/usr/bin/env python3
"""Chaos soak (make soak): a real gostore-master on a state directory,
storage clients, writers and readers on loopback, and random faults for a
bounded time; then every read is judged and the report printed.

    python tools/soak.py --duration 10m [--seed N] [--json FILE]

* the master: ``gostore-master`` with ``--snapshot_backup_dir`` in a
  temporary directory, a short ``--client_ttl`` (3 s) so that reclaiming a
  dead client's space is seen, fixed free ports so that a restart takes
  them again;
* ``--storage`` storage clients (tools/soak_roles.py storage), each
  contributing ``--segment`` MiB and nothing else;
* ``--writers`` writers owning ``--keys`` keys each, and ``--readers``
  readers, none contributing memory; odd-numbered ones move bytes over TCP,
  the others over shared memory. Every value names its key and version
  and every byte of it derives from both (soak_roles.make_value);
* faults at random gaps from a seeded schedule (the seed is printed;
  ``--seed`` repeats the schedule): kill -9 of a storage client (started
  again after up to 3 s, on the same host:port half of the times), SIGSTOP
  and SIGCONT of one (short, or past client_ttl), kill -9 of the master
  (started again on the same port and state directory);
* the final phase: faults stop, every process is back, each writer
  upserts a fresh version of each of its keys, reads it back and removes
  it; then the master must hold no object and no byte.

It fails (exit status 1) on a wrong byte, a read of a version the history
does not allow, a miss no loss explains, a stuck key, a crash, a
killed client's segment the master still lists client_ttl + 5 s later,
bytes the master still counts once everything is removed, an allocator
error, anonymous RSS growth past the threshold, or shared memory past
the live pool (dead segments kept mapped). soak_model.py defines the
judging; docs/operations.md#chaos-soak explains the report.
"""

from __future__ import annotations

import argparse
import json
import os
import queue
import random
import re
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request
from collections import Counter, defaultdict
from typing import Dict, List, Optional, Tuple

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import soak_model as model  # noqa: E402

ROLES = os.path.join(HERE, "soak_roles.py")
MiB = 1 << 20
POLL_S = 0.25  # the monitor's period: segments every poll, metrics and RSS every 4th


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def parse_duration(text: str) -> float:
    m = re.fullmatch(r"\s*([0-9.]+)\s*(s|m|h)?\s*", text)
    if not m:
        raise argparse.ArgumentTypeError(f"not a duration: {text!r} (90, 90s, 1.5m, 1h)")
    return float(m.group(1)) * {"s": 1, "m": 60, "h": 3600, None: 1}[m.group(2)]


class Child:
    """One incarnation of a child process; its stdout lines are queued."""

    def __init__(self, label: str, argv: List[str], log_path: str, env: Dict[str, str],
                 stdin: bool = True) -> None:
        self.label = label
        self.log_path = log_path
        with open(log_path, "a") as log:
            log.write(f"---- {label} started\n")
            log.flush()
            self.proc = subprocess.Popen(argv, stdin=subprocess.PIPE if stdin else subprocess.DEVNULL,
                                         stdout=subprocess.PIPE, stderr=log, env=env, text=True,
                                         start_new_session=True)
        self.pid = self.proc.pid
        self.started = time.monotonic()
        self.ended: Optional[float] = None
        self.killed = False  # on purpose
        self.stopped = False
        self.name = ""  # a storage client's segment
        self.ready = threading.Event()
        self.hello: dict = {}
        self.lines: "queue.Queue[Optional[str]]" = queue.Queue()
        threading.Thread(target=self._read, daemon=True).start()

    finished = False  # a worker that said it is done

    def _read(self) -> None:
        for line in self.proc.stdout:
            self.lines.put(line)
        self.lines.put(None)

    def line(self, timeout: float) -> str:
        try:
            return self.lines.get(timeout=timeout) or ""
        except queue.Empty:
            return ""

    def json_line(self, timeout: float) -> dict:
        text = self.line(timeout)
        try:
            return json.loads(text) if text.startswith("{") else {}
        except ValueError:
            return {}

    def alive(self) -> bool:
        return self.proc.poll() is None

    def send(self, text: str) -> None:
        try:
            self.proc.stdin.write(text + "\n")
            self.proc.stdin.flush()
        except (OSError, ValueError, AttributeError):
            pass

    def kill(self) -> None:
        if self.alive():
            self.proc.kill()
        self.proc.wait()
        self.ended = self.ended or time.monotonic()


class Soak:
    """The processes, the fault executor and the monitor of one run."""

    def __init__(self, args: argparse.Namespace) -> None:
        self.args = args
        self.dir = tempfile.mkdtemp(prefix="gostore-soak-")
        self.rpc = f"127.0.0.1:{free_port()}"
        self.http = f"127.0.0.1:{free_port()}"
        self.env = dict(os.environ, GOSTORE_LOG_LEVEL="warn")
        self.env.pop("GOSTORE_TRANSPORT", None)
        self.children: List[Child] = []
        self.master: Optional[Child] = None
        self.storage: List[Child] = []
        self.writers: List[Child] = []
        self.readers: List[Child] = []
        self.lock = threading.Lock()
        self.t0 = time.monotonic()
        self.faults: List[Tuple[float, str, str]] = []  # (t, kind, detail)
        self.problems: List[str] = []  # crashes, refused restarts, ...
        self.losses = model.Losses()
        self.pending: Dict[str, dict] = {}  # segment name -> the fault waiting for its drop
        self.reclaims: List[dict] = []
        self.drops: List[dict] = []  # segment drops no fault explains
        self.master_kills: List[float] = []
        self.evicted = 0.0
        self.metrics_lock = threading.Lock()
        self.metrics_t = time.monotonic()  # the start of the last read of the eviction counter
        self.evictions = 0  # polls that saw the evicted-object count rise
        self.max_used = 0.0  # the highest used/capacity the metrics showed
        self.rss: Dict[Child, List[Tuple[float, int, int, int]]] = defaultdict(list)  # (t, anon, rss, shmem)
        self.stop_monitor = threading.Event()

    # ---- processes -------------------------------------------------------

    def spawn(self, label: str, argv: List[str], env: Optional[Dict[str, str]] = None,
              stdin: bool = True) -> Child:
        log = os.path.join(self.dir, label.split("#")[0] + ".log")
        c = Child(label, argv, log, env or self.env, stdin=stdin)
        with self.lock:
            self.children.append(c)
        return c

    def role(self, role: str, *flags: str) -> List[str]:
        return [sys.executable, ROLES, role, "--parent", str(os.getpid()), "--master", self.rpc, *flags]

    def start_master(self) -> Child:
        from gostore import master_binary_path

        a = self.args
        argv = [sys.executable, ROLES, "exec", "--parent", str(os.getpid()), "--", master_binary_path(),
                "--rpc_address=127.0.0.1", f"--rpc_port={self.rpc.rsplit(':', 1)[1]}",
                f"--metrics_port={self.http.rsplit(':', 1)[1]}", f"--client_ttl={a.client_ttl}",
                f"--snapshot_backup_dir={os.path.join(self.dir, 'master-state')}",
                "--default_kv_lease_ttl=1000", "--put_start_discard_timeout_sec=3",
                "--put_start_release_timeout_sec=10", "--log_level=warn"]
        m = self.spawn(f"master#{len(self.master_kills)}", argv, stdin=False)
        self.master = m
        threading.Thread(target=self._master_ready, args=(m,), daemon=True).start()
        return m

    def _master_ready(self, m: Child) -> None:
        line = m.line(30)
        if line.startswith("gostore-master listening"):
            m.ready.set()
        elif not m.killed:
            self.problem(f"master did not start: {line.strip()!r}")

    def start_storage(self, i: int, port: int) -> Child:
        c = self.spawn(f"storage{i}#{port}", self.role("storage", "--port", str(port),
                                                       "--segment", str(self.args.segment * MiB)))
        c.name = f"127.0.0.1:{port}"
        if i < len(self.storage):
            self.storage[i] = c
        else:
            self.storage.append(c)
        threading.Thread(target=self._storage_ready, args=(i, c), daemon=True).start()
        return c

    def _storage_ready(self, i: int, c: Child) -> None:
        hello = c.json_line(60)
        if hello.get("ready"):
            c.hello = hello
            c.ready.set()
            if hello.get("refused"):
                self.fault("setup refused (-102) while the old segment was listed", f"{c.name} x{hello['refused']}")
        elif not c.killed:
            self.problem(f"storage{i} ({c.name}) did not start: {hello or 'no answer'}; log {c.log_path}")

    def start_worker(self, kind: str, i: int) -> Child:
        a = self.args
        env = dict(self.env)
        if i % 2:
            env["GOSTORE_TRANSPORT"] = "tcp"
        flags = ["--id", str(i), "--keys", str(a.keys), "--seed", str(a.seed * 1000 + (1 if kind == "writer" else 101) + i),
                 "--log", os.path.join(self.dir, f"{kind}{i}.jsonl")]
        if kind == "writer":
            flags += ["--http", self.http, "--final-bound", str(a.final_bound)]
        else:
            flags += ["--writers", str(a.writers)]
        c = self.spawn(f"{kind}{i}", self.role(kind, *flags), env=env)
        hello = c.json_line(60)
        if not hello.get("ready"):
            raise RuntimeError(f"{kind}{i} did not start: {hello or 'no answer'}; {tail(c.log_path)}")
        c.ready.set()
        return c

    def problem(self, text: str) -> None:
        with self.lock:
            self.problems.append(f"{self.rel():7.1f}s {text}")

    def rel(self, t: Optional[float] = None) -> float:
        return (time.monotonic() if t is None else t) - self.t0

    def fault(self, kind: str, detail: str) -> None:
        with self.lock:
            self.faults.append((time.monotonic(), kind, detail))

    # ---- master endpoints ------------------------------------------------

    def get(self, path: str, timeout: float = 1.0) -> Optional[str]:
        try:
            with urllib.request.urlopen(f"http://{self.http}{path}", timeout=timeout) as r:
                return r.read().decode()
        except (OSError, ValueError):
            return None

    def segments(self) -> Optional[Dict[str, Tuple[str, int]]]:
        """name -> (ClientID, segment ID) of the segments the master lists
        (None: no answer). The ID tells a segment its client remounted
        after the master dropped it (same client, new ID) from the one it
        had: the drop lost what the old one held."""
        body = self.get("/get_all_segments")
        try:
            return None if body is None else {s["Name"]: (s["ClientID"], s["ID"]) for s in json.loads(body)}
        except (ValueError, KeyError, TypeError):
            return None

    def read_metrics(self) -> Optional[Dict[str, float]]:
        body = self.get("/metrics", timeout=2.0)
        if body is None:
            return None
        out = {}
        for m in re.finditer(r"^gostore_master_(\w+) (\S+)$", body, re.M):
            out[m.group(1)] = float(m.group(2))
        return out

    # ---- the monitor -----------------------------------------------------

    def monitor(self) -> None:
        """Every POLL_S: which segments the master lists (a segment gone, or
        mounted again under another ID, is a loss event; matched to the
        fault that caused it, it measures the reclaim); every 4th: metrics
        (evictions) and every process's RSS."""
        seen: Dict[str, Tuple[str, int]] = {}
        seen_t = time.monotonic()
        n = 0
        while not self.stop_monitor.wait(POLL_S):
            n += 1
            now = time.monotonic()
            cur = self.segments()
            if cur is not None:
                for name, ident in seen.items():
                    if cur.get(name) != ident:
                        self.dropped(name, seen_t, time.monotonic())
                seen, seen_t = cur, now
            if n % 4:
                continue
            self.check_evictions()
            self.sample_rss(now)

    def check_evictions(self) -> bool:
        """Read the master's eviction counter: objects it evicted since the
        last read were lost between that read's start and this one's end.
        Reports whether the counter moved."""
        with self.metrics_lock:  # the monitor's and a master kill's reads, one at a time
            return self._check_evictions()

    def _check_evictions(self) -> bool:
        start = time.monotonic()
        m = self.read_metrics()
        if m is None:
            return False
        with self.lock:
            ev = m.get("evicted_object_total", 0.0)
            # a restarted master counts from 0: any count is new then
            moved = ev > self.evicted or 0 < ev < self.evicted
            if moved:
                self.losses.add_eviction(self.metrics_t, time.monotonic())
                self.evictions += 1
            self.evicted = ev
            self.metrics_t = start
            if m.get("capacity_bytes"):
                self.max_used = max(self.max_used, m.get("used_bytes", 0) / m["capacity_bytes"])
        return moved

    def dropped(self, name: str, last_seen: float, now: float) -> None:
        with self.lock:
            self.losses.add(name, last_seen, now)
            f = self.pending.pop(name, None)
            if f is not None:
                across = any(f["t"] <= k <= now for k in self.master_kills)
                self.reclaims.append(dict(f, seconds=now - f["t"], across_master_restart=across))
                return
            stopped = [c for c in self.storage if c.name == name and c.stopped]
            self.drops.append({"t": self.rel(last_seen), "segment": name,
                               "while": "a short SIGSTOP" if stopped else "running"})

    def sample_rss(self, now: float) -> None:
        with self.lock:
            live = [c for c in self.children if c.ended is None]
        for c in live:
            try:
                with open(f"/proc/{c.pid}/status") as f:
                    st = dict(line.split(":", 1) for line in f if ":" in line)
                anon = int(st["RssAnon"].split()[0]) * 1024
                rss = int(st["VmRSS"].split()[0]) * 1024
                shmem = int(st["RssShmem"].split()[0]) * 1024
            except (OSError, KeyError, ValueError):
                continue
            self.rss[c].append((now, anon, rss, shmem))

    # ---- faults ----------------------------------------------------------

    def apply(self, a: model.Action) -> None:
        now = time.monotonic()
        if a.kind in ("kill", "stop"):
            c = self.storage[a.target]
            if not c.ready.wait(30):  # a restart still starting: its segment must exist to be lost
                self.problem(f"{c.label} not ready 30 s after its start; {a.kind} skipped")
                return
            now = time.monotonic()
            if a.kind == "kill":
                c.killed = True
                c.kill()
                self.fault("kill -9 client", c.name)
            else:
                os.kill(c.pid, signal.SIGSTOP)
                c.stopped = True
                self.fault("SIGSTOP past client_ttl" if a.long else "SIGSTOP short", c.name)
            if a.kind == "kill" or a.long:
                with self.lock:
                    self.losses.add(c.name, now)
                    self.pending[c.name] = {"t": now, "kind": "kill -9" if a.kind == "kill" else "SIGSTOP",
                                            "segment": c.name, "at": self.rel(now)}
        elif a.kind == "cont":
            c = self.storage[a.target]
            os.kill(c.pid, signal.SIGCONT)
            c.stopped = False
            with self.lock:
                f = self.pending.get(c.name)
                if f is not None and f["kind"] == "SIGSTOP":
                    f["until"] = now
        elif a.kind == "restart":
            old = self.storage[a.target]
            port = int(old.name.rsplit(":", 1)[1]) if a.same_name else free_port()
            self.start_storage(a.target, port)
            self.fault("restart client, same host:port" if a.same_name else "restart client, new port",
                       self.storage[a.target].name)
        elif a.kind == "kill_master":
            # The restarted master counts evictions from 0: read what this
            # one evicted first. While it is evicting, what it evicts
            # between that read and its death is never counted: that
            # short span is an eviction span.
            evicting = self.check_evictions()
            m = self.master
            m.killed = True
            now = time.monotonic()
            if evicting:
                with self.lock:
                    self.losses.add_eviction(self.metrics_t, now)
            with self.lock:
                self.master_kills.append(now)
            m.kill()
            self.fault("kill -9 master", f"pid {m.pid}")
        elif a.kind == "restart_master":
            self.start_master()
            self.fault("restart master", "same port and state directory")

    def check_crashes(self) -> None:
        """A process that exited without being killed is a crash: counted,
        its tail kept, and a storage client or master started again."""
        for i, c in enumerate(self.storage):
            if not c.killed and c.ready.is_set() and not c.alive():
                c.killed = True
                c.ended = time.monotonic()
                self.problem(f"crash: storage{i} ({c.name}) exited {c.proc.returncode}: {tail(c.log_path)}")
                with self.lock:
                    self.losses.add(c.name, c.ended)
                self.start_storage(i, int(c.name.rsplit(":", 1)[1]))
        m = self.master
        if m is not None and not m.killed and not m.alive():
            m.killed = True
            m.ended = time.monotonic()
            self.problem(f"crash: master exited {m.proc.returncode}: {tail(m.log_path)}")
            self.start_master()
        for c in self.writers + self.readers:
            if c.ended is None and not c.finished and not c.alive():
                c.ended = time.monotonic()
                self.problem(f"crash: {c.label} exited {c.proc.returncode}: {tail(c.log_path)}")

    def until(self, deadline: float) -> None:
        """Wait until ``deadline``, checking for crashes."""
        while True:
            self.check_crashes()
            left = deadline - time.monotonic()
            if left <= 0:
                return
            time.sleep(min(left, 0.05))

    def wait_for(self, what: str, pred, timeout: float) -> bool:
        deadline = time.monotonic() + timeout
        while not pred():
            if time.monotonic() > deadline:
                self.problem(f"timed out after {timeout:.0f}s waiting for {what}")
                return False
            self.check_crashes()
            time.sleep(0.1)
        return True

    def settled(self) -> bool:
        segs = self.segments() or {}
        return (self.master is not None and self.master.ready.is_set()
                and all(c.ready.is_set() and c.name in segs for c in self.storage))

    # ---- the run ---------------------------------------------------------

    def run(self) -> dict:
        a = self.args
        self.start_master()
        if not self.master.ready.wait(30):
            raise RuntimeError(f"master did not start: {tail(self.master.log_path)}")
        for i in range(a.storage):
            self.start_storage(i, free_port())
        if not self.wait_for("the storage clients' segments", self.settled, 60):
            raise RuntimeError("storage clients did not register")
        threading.Thread(target=self.monitor, daemon=True).start()
        self.writers = [self.start_worker("writer", i) for i in range(a.writers)]
        self.readers = [self.start_worker("reader", i) for i in range(a.readers)]

        load0 = time.monotonic()
        load_end = load0 + a.duration
        schedule = model.fault_schedule(a.seed, 5.0, a.duration, a.storage, a.client_ttl,
                                        master_gap=(a.master_gap * 0.5, a.master_gap * 1.5),
                                        same_port=a.same_port)
        print(f"soak: seed {a.seed}, {a.duration:.0f} s of load, {len(schedule)} scheduled actions; "
              f"logs in {self.dir}", flush=True)
        for act in schedule:
            self.until(load0 + act.t)
            self.apply(act)
        self.until(load_end)

        # the final phase: every process back, readers stopped, writers' final pass
        final0 = time.monotonic()
        for i, c in enumerate(self.storage):
            if c.stopped:
                os.kill(c.pid, signal.SIGCONT)
                c.stopped = False
        self.wait_for("every storage client and the master back", self.settled, 60)
        for r in self.readers:
            r.send("stop")
        reader_done = [r.json_line(60) for r in self.readers]
        for w in self.writers:
            w.send("final")
        writer_done = [w.json_line(a.final_bound + 60) for w in self.writers]
        for w, d in zip(self.writers + self.readers, writer_done + reader_done):
            w.finished = bool(d.get("done"))
            if not w.finished:
                self.problem(f"{w.label} did not finish: {tail(w.log_path)}")
        t_empty = time.monotonic()
        emptied = self.wait_for("the master to hold no object and no byte",
                                lambda: (lambda m: m is not None and m.get("objects") == 0
                                         and m.get("used_bytes") == 0)(self.read_metrics()), 30)
        empty_s = time.monotonic() - t_empty
        final_metrics = self.read_metrics() or {}
        self.stop_monitor.set()
        end = time.monotonic()
        return self.report(load0, load_end, final0, end, writer_done, final_metrics, emptied, empty_s)

    # ---- the report ------------------------------------------------------

    def report(self, load0: float, load_end: float, final0: float, end: float, writer_done: List[dict],
               final_metrics: Dict[str, float], emptied: bool, empty_s: float) -> dict:
        a = self.args
        key_ops: Dict[str, List[model.Op]] = defaultdict(list)
        reads: List[Tuple[str, model.Read, int, str]] = []
        counts: Dict[str, Counter] = defaultdict(Counter)
        finals: Dict[str, list] = {}
        write_events: Dict[str, List[Tuple[float, bool]]] = defaultdict(list)
        for name in sorted(os.listdir(self.dir)):
            if not name.endswith(".jsonl"):
                continue
            with open(os.path.join(self.dir, name)) as f:
                for line in f:
                    rec = json.loads(line)
                    kind = rec[0]
                    t_start = {"w": 4, "x": 2, "r": 3}.get(kind)
                    phase = "final " if t_start is not None and rec[t_start] >= load_end else ""
                    if kind == "w":
                        _, op, key, v, t0, t1, rc, segs = rec
                        key_ops[key].append(model.Op(t0, t1, rc == 0, v, segs=segs))
                        counts[phase + op]["ok" if rc == 0 else "error"] += 1
                        if t0 < load_end:
                            write_events[key].append((t0, rc == 0))
                    elif kind == "x":
                        _, key, t0, t1, rc = rec
                        key_ops[key].append(model.Op(t0, t1, rc in (0, model.NOT_FOUND), remove=True))
                        counts[phase + "remove"]["ok" if rc in (0, model.NOT_FOUND) else
                                                 "refused (leased)" if rc == -706 else "error"] += 1
                        if t0 < load_end and rc != -706:
                            write_events[key].append((t0, rc in (0, model.NOT_FOUND)))
                    elif kind == "r":
                        _, op, key, t0, t1, rc, v, wrong, why = rec
                        reads.append((op, model.Read(key, t0, t1, rc, v), wrong, why))
                        counts[phase + op]["ok" if rc > 0 else "miss" if rc == model.NOT_FOUND else "error"] += 1
                    elif kind == "f":
                        finals[rec[1]] = rec
        for v in key_ops.values():
            v.sort(key=lambda op: op.t0)

        verdicts: Counter = Counter()
        samples: Dict[str, List[str]] = defaultdict(list)
        wrong_bytes = 0
        read_events: Dict[str, List[Tuple[float, bool]]] = defaultdict(list)
        for op, r, wrong, why in reads:
            if wrong:  # bytes that are no version of the key, or not all of one
                v = model.Verdict("corrupt", f"v{r.version} {why}")
                wrong_bytes += wrong
            else:
                v = model.judge(r, key_ops.get(r.key, []), self.losses)
            verdicts[v.kind] += 1
            if v.kind in ("stale", "phantom"):  # a whole version, of the wrong one
                wrong_bytes += r.rc
            if v.kind in ("corrupt", "stale", "phantom", "unexplained_miss"):
                line = f"{op} {r.key} at {self.rel(r.t0):.2f}-{self.rel(r.t1):.2f}s: {v.detail}"
                if v.kind == "unexplained_miss":
                    line += self.miss_context(r, key_ops.get(r.key, []))
                samples[v.kind].append(line)
            if r.t0 < load_end and op != "query_key":
                read_events[r.key].append((r.t0, r.rc > 0 or r.rc == model.NOT_FOUND))

        stuck: List[str] = []
        keys = [f"w{w}/k{j:04d}" for w in range(a.writers) for j in range(a.keys)]
        for key in keys:
            for what, events in (("writes failed", write_events[key]), ("reads erred", sorted(read_events[key]))):
                for first, last, n in model.failure_streaks(events, a.stuck_after):
                    stuck.append(f"{key}: {what} {n} times from {self.rel(first):.1f}s to {self.rel(last):.1f}s")
            f = finals.get(key)
            if f is None or not f[2]:
                stuck.append(f"{key}: final phase not done ({'last codes ' + str(f[4]) if f else 'no record'})")
        stuck_keys = len({s.split(":", 1)[0] for s in stuck})

        kills = [r for r in self.reclaims if not r["across_master_restart"]]
        secs = [r["seconds"] for r in kills]
        # A master restarted while a client was stopped counts the client's
        # silence from its restart (it cannot know how long it was): a
        # client continued within client_ttl of that keeps its segment.
        kept = [f for f in self.pending.values() if f["kind"] == "SIGSTOP"
                and any(f["t"] <= k <= f.get("until", end) for k in self.master_kills)]
        unreclaimed = [dict(f, seconds=end - f["t"]) for f in self.pending.values()
                       if end - f["t"] > a.client_ttl + 5 and f not in kept]

        # RSS growth: anonymous memory of each process from the warm-up's end
        # (the load's first fifth, at least 15 s; 10 s after its start for a
        # process started later) to the load's end or its own, if that span
        # is at least a quarter of the load. Shared memory (segments: the own
        # one, peers' mapped over shm) may not exceed the pool's live
        # segments plus one (a segment's worth of slack).
        warm_end = load0 + max(15.0, 0.2 * a.duration)
        shm_bound = (a.storage + 1) * a.segment * MiB
        rss_rows = []
        for c, s in self.rss.items():
            lo, hi = max(warm_end, c.started + 10), min(load_end, c.ended or load_end)
            g = model.rss_growth([(t, anon) for t, anon, _, _ in s], lo, hi, max(30.0, a.duration / 4))
            live = [x for x in s if x[0] <= load_end]
            shmem = live[-1][3] if live else 0
            row = {"process": f"{c.label} pid {c.pid}", "samples": len(s), "max_rss_mib": max(x[2] for x in s) / MiB,
                   "max_anon_mib": max(x[1] for x in s) / MiB, "shmem_at_load_end_mib": shmem / MiB,
                   "shmem_past_live_pool": shmem > shm_bound}
            if g is not None:
                base, last = g
                row.update(base_anon_mib=base / MiB, last_anon_mib=last / MiB, growth_mib=(last - base) / MiB,
                           too_much=last - base > max(a.rss_growth_mib * MiB, a.rss_growth_ratio * base))
            rss_rows.append(row)

        faults = Counter(kind for _, kind, _ in self.faults)
        failures = []
        if wrong_bytes:
            failures.append(f"{wrong_bytes} wrong bytes")
        for kind in ("corrupt", "stale", "phantom", "unexplained_miss"):
            if verdicts[kind]:
                failures.append(f"{verdicts[kind]} {kind.replace('_', ' ')} reads")
        if stuck_keys:
            failures.append(f"{stuck_keys} stuck keys")
        if self.problems:
            failures.append(f"{len(self.problems)} crashes or processes that did not start or finish")
        if unreclaimed:
            failures.append(f"{len(unreclaimed)} dead clients' segments not reclaimed within client_ttl + 5 s")
        if not emptied:
            failures.append(f"the master holds {final_metrics.get('objects')} objects and "
                            f"{final_metrics.get('used_bytes')} bytes after every key was removed")
        if final_metrics.get("free_error_total"):
            failures.append(f"free_error_total {final_metrics['free_error_total']:.0f} (allocator invariant)")
        grown = [r["process"] for r in rss_rows if r.get("too_much")]
        if grown:
            failures.append(f"anonymous RSS grew past the threshold: {', '.join(grown)}")
        mapped = [r["process"] for r in rss_rows if r["shmem_past_live_pool"]]
        if mapped:
            failures.append(f"shared memory past the live pool ({shm_bound // MiB} MiB; dead segments kept mapped): "
                            f"{', '.join(mapped)}")
        return {
            "seed": a.seed, "load_s": a.duration, "final_phase_s": end - final0, "dir": self.dir,
            "config": {"storage": a.storage, "segment_mib": a.segment, "writers": a.writers, "readers": a.readers,
                       "keys_per_writer": a.keys, "client_ttl_s": a.client_ttl},
            "operations": {k: dict(v) for k, v in sorted(counts.items())},
            "faults": dict(faults), "reads": dict(verdicts), "wrong_bytes": wrong_bytes,
            "stuck_keys": stuck_keys, "stuck": stuck[:20],
            "samples": {k: v[:10] for k, v in samples.items()},
            "reclaim": {"measured": len(secs), "within_client_ttl": sum(1 for s in secs if s <= a.client_ttl),
                        "within_client_ttl_plus_1s": sum(1 for s in secs if s <= a.client_ttl + 1),
                        "max_s": max(secs, default=None), "mean_s": sum(secs) / len(secs) if secs else None,
                        "across_master_restart": len(self.reclaims) - len(kills), "unreclaimed": unreclaimed,
                        "kept_across_master_restart": len(kept)},
            "unexpected_segment_drops": self.drops,
            "master": {"eviction_polls": self.evictions, "max_used_ratio": self.max_used, "free_error_total": final_metrics.get("free_error_total"),
                       "emptied_after_removal_s": empty_s if emptied else None,
                       "objects_left": final_metrics.get("objects"), "used_bytes_left": final_metrics.get("used_bytes")},
            "problems": self.problems, "rss": rss_rows, "failures": failures,
            "timeline": [f"{self.rel(t):7.2f}s {kind} {detail}" for t, kind, detail in self.faults],
            "loss_events": {seg: [(round(self.rel(lo), 2), round(self.rel(hi), 2)) for lo, hi in spans]
                            for seg, spans in self.losses.by_segment.items()},
            "eviction_events": [(round(self.rel(lo), 2), round(self.rel(hi), 2)) for lo, hi in self.losses.evictions],
            "t0_monotonic": self.t0,
            "writers": writer_done,
        }

    def miss_context(self, r: model.Read, ops: List[model.Op]) -> str:
        """What an unexplained miss needs to be understood: the key's
        writes that may be what the read should have seen (when, where the
        master put them) and the loss events of those segments."""
        out = []
        for v in sorted(model.possible_states(ops, r.t0, r.t1) - {model.ABSENT}):
            op = next((o for o in ops if not o.remove and o.version == v), None)
            if op is None:
                continue
            spans = {seg: [f"{self.rel(lo):.2f}-{self.rel(hi):.2f}" for lo, hi in self.losses.by_segment.get(seg, [])]
                     for seg in op.segs or []}
            out.append(f"v{v} written {self.rel(op.t0):.2f}-{self.rel(op.t1):.2f}s on {op.segs}, losses {spans}")
        return "; " + "; ".join(out) if out else ""

    def close(self) -> None:
        """Every child killed (stopped ones too), the directory removed
        unless asked to keep it."""
        self.stop_monitor.set()
        with self.lock:
            children = list(self.children)
        for c in children:
            if c.alive():
                try:
                    os.kill(c.pid, signal.SIGKILL)
                except ProcessLookupError:
                    pass
            c.proc.wait()
        if self.args.keep:
            print(f"soak: logs kept in {self.dir}")
        else:
            shutil.rmtree(self.dir, ignore_errors=True)


def tail(path: str, n: int = 1500) -> str:
    try:
        with open(path, "rb") as f:
            f.seek(0, os.SEEK_END)
            f.seek(max(0, f.tell() - n))
            return f.read().decode("utf-8", "replace")
    except OSError:
        return ""


def print_report(r: dict) -> None:
    def mib(x: Optional[float]) -> str:
        return "-" if x is None else f"{x:8.1f}"

    print(f"\nchaos soak: seed {r['seed']}, {r['load_s']:.0f} s of load, final phase {r['final_phase_s']:.1f} s; "
          f"{r['config']}")
    print("\noperations                       ok     miss    error  refused")
    for op, c in r["operations"].items():
        print(f"  {op:<26} {c.get('ok', 0):8d} {c.get('miss', 0):8d} {c.get('error', 0):8d} "
              f"{c.get('refused (leased)', 0):8d}")
    print("\nfaults injected")
    for kind, n in sorted(r["faults"].items()):
        print(f"  {kind:<36} {n:6d}")
    print("\nreads judged against the history")
    for kind, n in sorted(r["reads"].items()):
        print(f"  {kind:<36} {n:8d}")
    print(f"\n  wrong bytes                          {r['wrong_bytes']:8d} (must be 0)")
    print(f"  stuck keys                           {r['stuck_keys']:8d} (must be 0)")
    rc = r["reclaim"]
    mx = "-" if rc["max_s"] is None else f"{rc['max_s']:.2f}"
    mean = "-" if rc["mean_s"] is None else f"{rc['mean_s']:.2f}"
    print(f"\nspace of a dead client reclaimed (segment dropped by the master; client_ttl {r['config']['client_ttl_s']} s)")
    print(f"  measured {rc['measured']}, within client_ttl {rc['within_client_ttl']}, within client_ttl + 1 s "
          f"{rc['within_client_ttl_plus_1s']}, mean {mean} s, max {mx} s; across a master restart "
          f"{rc['across_master_restart']}; not reclaimed {len(rc['unreclaimed'])} "
          f"(and {rc['kept_across_master_restart']} kept: stopped past client_ttl across a master restart)")
    print(f"  segments dropped without a fault: {len(r['unexpected_segment_drops'])}")
    m = r["master"]
    print(f"  pool use up to {100 * m['max_used_ratio']:.0f}%; evictions seen by {m['eviction_polls']} polls of the "
          f"metrics; after removing every key: objects "
          f"{m['objects_left']}, used bytes {m['used_bytes_left']}, free_error_total {m['free_error_total']}")
    print("\nRSS in MiB: the largest; shared memory (segments) at the load's end; anonymous memory after warm-up:")
    print("the median of the first fifth (base) and of the last (last) of the process' span, and their difference")
    print(f"  {'process':<30} {'samples':>7} {'max RSS':>8} {'shmem':>8} {'base':>8} {'last':>8} {'growth':>8}")
    for row in sorted(r["rss"], key=lambda x: x["process"]):
        flags = ("  ANON GREW" if row.get("too_much") else "") + ("  SHMEM PAST LIVE POOL" if row["shmem_past_live_pool"] else "")
        print(f"  {row['process']:<30} {row['samples']:7d} {row['max_rss_mib']:8.1f} {row['shmem_at_load_end_mib']:8.1f} "
              f"{mib(row.get('base_anon_mib'))} {mib(row.get('last_anon_mib'))} {mib(row.get('growth_mib'))}{flags}")
    if r["failures"]:
        print("\nfault timeline (--seed {} schedules it again):".format(r["seed"]))
        for line in r["timeline"]:
            print(f"  {line}")
    # Last, so that the tail of a log (a CI's) shows what failed.
    for kind, lines in r["samples"].items():
        print(f"\n{kind}:")
        for line in lines:
            print(f"  {line}")
    for title, lines in (("stuck", r["stuck"]), ("problems", r["problems"])):
        if lines:
            print(f"\n{title}:")
            for line in lines:
                print(f"  {line[:600]}")
    print("\nresult: " + ("PASS" if not r["failures"] else "FAIL: " + "; ".join(r["failures"])))


def main() -> int:
    ap = argparse.ArgumentParser(description=" ".join(__doc__.split("\n\n")[0].split()))
    ap.add_argument("--duration", type=parse_duration, default=600.0, help="load time: 90, 90s, 1.5m (default 10m)")
    ap.add_argument("--seed", type=int, default=None, help="the fault schedule's seed (default: random, printed)")
    ap.add_argument("--storage", type=int, default=4, help="storage clients (at least 3)")
    ap.add_argument("--segment", type=int, default=64, help="MiB each storage client contributes")
    ap.add_argument("--writers", type=int, default=2)
    ap.add_argument("--readers", type=int, default=2)
    ap.add_argument("--keys", type=int, default=100, help="keys per writer")
    ap.add_argument("--client-ttl", type=int, default=3, help="the master's --client_ttl, seconds")
    ap.add_argument("--master-gap", type=float, default=30.0, help="mean seconds between master kills")
    ap.add_argument("--same-port", type=float, default=0.5,
                    help="the share of killed clients started again on their old host:port")
    ap.add_argument("--stuck-after", type=float, default=30.0,
                    help="a key failing longer than this during the load is stuck")
    ap.add_argument("--final-bound", type=float, default=30.0,
                    help="seconds a writer's final phase may take (upsert, read back, remove each key)")
    ap.add_argument("--rss-growth-mib", type=float, default=16.0,
                    help="anonymous RSS may grow by this much after warm-up, or by --rss-growth-ratio, whichever is more")
    ap.add_argument("--rss-growth-ratio", type=float, default=0.25)
    ap.add_argument("--json", default="", help="write the report here too")
    ap.add_argument("--keep", action="store_true", help="keep the logs' directory")
    args = ap.parse_args()
    if args.storage < 3:
        ap.error("--storage must be at least 3 (faults leave 2 untouched)")
    if args.seed is None:
        args.seed = random.SystemRandom().randrange(1 << 31)
    soak = Soak(args)
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    try:
        report = soak.run()
    except KeyboardInterrupt:
        print("soak: interrupted; every process it started is killed", file=sys.stderr)
        return 130
    finally:
        soak.close()
    print_report(report)
    if args.json:
        with open(args.json, "w") as f:
            json.dump(report, f, indent=2)
    return 1 if report["failures"] else 0


if __name__ == "__main__":
    sys.exit(main())
