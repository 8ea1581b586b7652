"""What an operator meets first: a clean close, log levels, the master's
command line, a forked child, and an SSD tier the master does not accept.

Each test runs the real ``gostore-master`` binary or a fresh Python process
(the log level and fork tests need a process of their own: the level is
process-wide, and a fork must come from a process that loaded the library).
"""

from __future__ import annotations

import os
import re
import socket
import subprocess
import sys
import textwrap

import pytest

from conftest import MiB, ROOT, master_binary, wait_until


def run_python(code: str, env: dict, timeout: float = 60.0) -> subprocess.CompletedProcess:
    """Run ``code`` in a fresh interpreter; fail (with its output) if it fails."""
    penv = dict(os.environ)
    penv.update(env)
    proc = subprocess.run([sys.executable, "-c", textwrap.dedent(code)], capture_output=True,
                          text=True, timeout=timeout, env=penv, cwd=ROOT)
    assert proc.returncode == 0, f"exit {proc.returncode}\nstdout:\n{proc.stdout}\nstderr:\n{proc.stderr}"
    return proc


def log_levels(text: str) -> set:
    """The slog levels of the lines in ``text`` (logfmt ``level=X``)."""
    return set(re.findall(r"\blevel=(\w+)", text))


# ---------------------------------------------------------------------------
# close


@pytest.mark.parametrize("segment", [16 * MiB, 0], ids=["contributor", "consumer"])
def test_close_leaves_at_once_and_is_never_expired(master_factory, store_factory, segment):
    m = master_factory(client_ttl=5)
    s = store_factory(m, segment=segment)
    if segment:
        assert s.put("k", b"v" * 1000) == 0
    assert m.metric("gostore_master_clients") == 1
    assert s.close() == 0
    # At once, not a client_ttl later: the segment is gone and the master
    # counts no client any more, so nothing is left to expire.
    assert m.segment_names() == []
    assert m.metric("gostore_master_clients") == 0
    assert m.metric("gostore_master_clients_left_total") == 1
    assert m.metric("gostore_master_clients_expired_total") == 0
    assert "client expired" not in m.log()


# ---------------------------------------------------------------------------
# log levels

# A store next to an embedded master, with an SSD tier whose environment
# holds a value the storage package warns about (through slog's default
# logger), and a call the library warns about.
_LOGGING_SCRIPT = """
    import sys, tempfile
    import gostore
    m = gostore.EmbeddedMaster(rpc_port=0, metrics_port=-1, enable_offload=True)
    s = gostore.MooncakeDistributedStore()
    kwargs = {extra}
    rc = s.setup("127.0.0.1", "P2PHANDSHAKE", 16 << 20, 16 << 20, "tcp", "", m.address,
                 ssd_offload_path=tempfile.mkdtemp(), **kwargs)
    assert rc == 0, rc
    sys.stderr.write("-- set up --\\n")
    sys.stderr.flush()
    assert s.unregister_buffer(4096) == -600  # warned about by the library
    assert s.put("k", b"x") == 0
    s.close()
    m.stop()
    print("done")
"""

_BAD_SSD_ENV = {"MOONCAKE_OFFLOAD_TOTAL_KEYS_LIMIT": "lots", "MOONCAKE_OFFLOAD_LOCAL_BUFFER_SIZE_BYTES": "16777216"}


@pytest.mark.parametrize("env_level,kwargs,want", [
    ("error", "{}", set()),
    ("info", "{}", {"INFO", "WARN"}),
    ("info", "{'log_level': 'error'}", set()),
    ("error", "{'log_level': 'warn'}", {"WARN"}),
    ("debug", "{}", {"DEBUG", "INFO", "WARN"}),
], ids=["env-error", "env-info", "setup-error", "setup-warn", "env-debug"])
def test_log_level_governs_every_logger(env_level, kwargs, want):
    env = dict(_BAD_SSD_ENV, GOSTORE_LOG_LEVEL=env_level)
    proc = run_python(_LOGGING_SCRIPT.format(extra=kwargs), env)
    assert proc.stdout.strip() == "done"
    before, after = proc.stderr.split("-- set up --\n")
    # Before setup the environment's level rules (the embedded master logs
    # its start at info); from setup on, a log_level given there. "lots" is
    # warned about by the storage package through slog's default logger
    # (while setup opens the tier), the unregister by the bindings, the
    # master's segment lines at info.
    assert ("INFO" in log_levels(before)) == (env_level in ("info", "debug")), before
    got = log_levels(after) | (log_levels(before) - {"INFO"} if kwargs == "{}" else set())
    assert got == want, proc.stderr
    for line in proc.stderr.splitlines():
        assert line.startswith("time=") or line == "-- set up --", f"a line not from the process's logger: {line!r}"
    if "WARN" in want:
        assert "unregister_buffer rejected" in after
    if kwargs == "{}" and "WARN" in want:
        assert "MOONCAKE_OFFLOAD_TOTAL_KEYS_LIMIT" in before
    if "INFO" in want:
        assert "component=master" in after


def test_bad_log_level_is_refused():
    proc = run_python("""
        import gostore
        m = gostore.EmbeddedMaster(rpc_port=0, metrics_port=-1)
        s = gostore.MooncakeDistributedStore()
        print(s.setup("127.0.0.1", "P2PHANDSHAKE", 0, 16 << 20, "tcp", "", m.address, log_level="loud"))
        try:
            s.setup("127.0.0.1", "P2PHANDSHAKE", 0, 16 << 20, "tcp", "", m.address, log_level=3)
        except TypeError as e:
            print("TypeError", e)
    """, {"GOSTORE_LOG_LEVEL": "warn"})
    lines = proc.stdout.splitlines()
    assert lines[0] == "-600"
    assert lines[1].startswith("TypeError") and "log_level" in lines[1]
    rejected = [x for x in proc.stderr.splitlines() if "setup rejected" in x]
    assert len(rejected) == 1 and "loud" in rejected[0] and "want debug, info, warn or error" in rejected[0], proc.stderr


# ---------------------------------------------------------------------------
# the master's command line


def test_master_help_exits_zero():
    proc = subprocess.run([master_binary(), "--help"], capture_output=True, text=True, timeout=30)
    assert proc.returncode == 0, proc.stderr
    assert "-rpc_port" in proc.stderr and "-enable_offload" in proc.stderr
    bad = subprocess.run([master_binary(), "--no_such_flag"], capture_output=True, text=True, timeout=30)
    assert bad.returncode == 2 and "no_such_flag" in bad.stderr


def _free_port(host: str) -> int:
    with socket.socket() as s:
        s.bind((host, 0))
        return s.getsockname()[1]


def _accepts(host: str, port: int) -> bool:
    try:
        with socket.create_connection((host, port), timeout=2):
            return True
    except OSError:
        return False


def test_master_binds_only_the_rpc_address_and_logs_it(tmp_path):
    host = "127.0.0.2"  # loopback, but not 127.0.0.1
    rpc, http = _free_port(host), _free_port(host)
    log = tmp_path / "master.log"
    with open(log, "wb") as err:
        proc = subprocess.Popen([master_binary(), f"--rpc_address={host}", f"--rpc_port={rpc}",
                                 f"--metrics_port={http}"], stdout=subprocess.PIPE, stderr=err, text=True)
    try:
        line = proc.stdout.readline()
        assert f"rpc={host}:{rpc}" in line, line
        wait_until(lambda: "master serving" in log.read_text(), what="the master's start line")
        serving = next(x for x in log.read_text().splitlines() if "master serving" in x)
        assert f"rpc_listen={host}:{rpc}" in serving and f"http_listen={host}:{http}" in serving, serving
        assert _accepts(host, rpc) and _accepts(host, http)
        assert not _accepts("127.0.0.1", rpc) and not _accepts("127.0.0.1", http)
    finally:
        proc.kill()
        proc.wait()
        proc.stdout.close()


def test_master_listens_on_loopback_by_default(tmp_path):
    log = tmp_path / "master.log"
    with open(log, "wb") as err:
        proc = subprocess.Popen([master_binary(), "--rpc_port=0", "--metrics_port=0"],
                                stdout=subprocess.PIPE, stderr=err, text=True)
    try:
        proc.stdout.readline()
        wait_until(lambda: "master serving" in log.read_text(), what="the master's start line")
        serving = next(x for x in log.read_text().splitlines() if "master serving" in x)
        assert re.search(r"rpc_listen=127\.0\.0\.1:\d+ http_listen=127\.0\.0\.1:\d+", serving), serving
        assert "auth=off" in serving, serving
    finally:
        proc.kill()
        proc.wait()
        proc.stdout.close()


def test_master_logs_a_wildcard_as_a_wildcard(tmp_path):
    log = tmp_path / "master.log"
    with open(log, "wb") as err:
        proc = subprocess.Popen([master_binary(), "--rpc_address=0.0.0.0", "--allow_insecure", "--rpc_port=0",
                                 "--metrics_port=-1"], stdout=subprocess.PIPE, stderr=err, text=True)
    try:
        line = proc.stdout.readline()
        port = int(re.search(r"rpc=\S+:(\d+)", line).group(1))
        wait_until(lambda: "master serving" in log.read_text(), what="the master's start line")
        text = log.read_text()
        assert f"rpc_listen=0.0.0.0:{port}" in text and "http_listen=disabled" in text, text
    finally:
        proc.kill()
        proc.wait()
        proc.stdout.close()


# ---------------------------------------------------------------------------
# fork

_FORK_SCRIPT = """
    import json, os, sys, time
    import numpy as np
    from gostore import MooncakeDistributedStore, ReplicateConfig
    s = MooncakeDistributedStore()
    assert s.setup("127.0.0.1", "P2PHANDSHAKE", 16 << 20, 16 << 20, "tcp", "", sys.argv[1]) == 0
    assert s.put("k", b"parent") == 0
    buf = bytearray(64)
    r, w = os.pipe()
    pid = os.fork()
    if pid == 0:
        os.close(r)
        fresh = MooncakeDistributedStore()
        out = {
            "put": s.put("k2", b"child"),
            "get": s.get("k").decode(),
            "is_exist": s.is_exist("k"),
            "batch_is_exist": s.batch_is_exist(["k", "k2"]),
            "put_batch": s.put_batch(["a", "b"], [b"1", b"2"]),
            "batch_put_from": s.batch_put_from(["c"], [0], [1]),
            "get_size": s.get_size("k"),
            "remove": s.remove("k"),
            "batch_remove": s.batch_remove(["k"]),
            "get_batch": [v.decode() for v in s.get_batch(["k"])],
            "get_buffer": s.get_buffer("k") is None,
            "tensor": s.get_tensor("k") is None,
            "put_tensor": s.put_tensor("t", np.zeros(4)),
            "register": s.register_buffer(0, 0),
            "health": s.health_check(),
            "close": s.close(),
            "fresh_setup": fresh.setup("127.0.0.1", "P2PHANDSHAKE", 0, 16 << 20, "tcp", "", sys.argv[1]),
        }
        os.write(w, json.dumps(out).encode())
        sys.exit(0)  # atexit runs the stores' finalizers: silent, no hang
    os.close(w)
    data = b""
    while chunk := os.read(r, 65536):
        data += chunk
    _, status = os.waitpid(pid, 0)
    print(data.decode())
    # The parent's store is untouched by the child's calls.
    assert s.get("k") == b"parent" and s.is_exist("k2") == 0 and s.is_exist("a") == 0
    print("parent ok")
"""


def test_forked_child_gets_errors_not_a_hang(master):
    proc = subprocess.run([sys.executable, "-c", textwrap.dedent(_FORK_SCRIPT), master.addr],
                          capture_output=True, text=True, timeout=60, cwd=ROOT)
    assert proc.returncode == 0, f"stdout:\n{proc.stdout}\nstderr:\n{proc.stderr}"
    import json

    lines = proc.stdout.splitlines()
    assert lines[-1] == "parent ok"
    out = json.loads(lines[0])
    assert out == {
        "put": -1, "get": "", "is_exist": -1, "batch_is_exist": [-1, -1], "put_batch": -1,
        "batch_put_from": [-1], "get_size": -1, "remove": -1, "batch_remove": [-1],
        "get_batch": [""], "get_buffer": True, "tensor": True, "put_tensor": -1, "register": -1,
        "health": -1, "close": -1, "fresh_setup": -1,
    }, out
    forked = [x for x in proc.stderr.splitlines() if "forked" in x]
    assert len(forked) == 1, proc.stderr  # one line, at the first call
    assert "spawn" in forked[0] and "level=ERROR" in forked[0]


# ---------------------------------------------------------------------------
# an SSD tier the master does not accept


def test_ssd_tier_against_a_master_without_offload(master_factory, tmp_path):
    m = master_factory()  # no --enable_offload
    proc = run_python(f"""
        from gostore import MooncakeDistributedStore
        s = MooncakeDistributedStore()
        print(s.setup("127.0.0.1", "P2PHANDSHAKE", 16 << 20, 16 << 20, "tcp", "", {m.addr!r},
                      enable_ssd_offload=True, ssd_offload_path={str(tmp_path)!r}))
        print(s.health_check())
    """, {"GOSTORE_LOG_LEVEL": "info"})
    assert proc.stdout.split() == ["-1300", "1"], proc.stdout
    assert "--enable_offload" in proc.stderr and "level=ERROR" in proc.stderr, proc.stderr
    assert m.segment_names() == []  # nothing was mounted
