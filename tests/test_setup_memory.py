"""Memory taken up front is checked before it is taken (issue 32).

Every memory a call takes at once, the segment and the local buffer of
``setup``, a segment of ``allocate_and_mount_segment``, the segment of the
standalone ``gostore-client``, is weighed against what the host
(``MemAvailable``) and the process's memory cgroup can still give, and a
size beyond it is refused at once with -600 and one log line naming the
size and the bound, instead of a setup that blocks in reclaim or a process
the OOM killer ends without a word. Nothing here allocates more than the
tests' usual 64 MiB segments: every "too big" is refused before anything
is taken. The cgroup test runs a real peer process inside a real memory
cgroup of 1.5 GiB (made under this process's own, when it may be made).
"""

from __future__ import annotations

import os
import subprocess
import sys
import time

import pytest

from conftest import MiB, mem_available, pattern
from gostore import ErrorCode, MooncakeDistributedStore

GiB = 1 << 30
INVALID = int(ErrorCode.INVALID_PARAMS)


def refusals(err: str) -> list:
    return [line for line in err.splitlines() if "more than this process may take" in line]


def setup(store: MooncakeDistributedStore, master, segment, buffer=16 * MiB) -> int:
    return store.setup("127.0.0.1", "P2PHANDSHAKE", segment, buffer, "tcp", "", master.addr)


def test_segment_above_memavailable_is_refused_at_once(master, capfd):
    store = MooncakeDistributedStore()
    asked = mem_available() + 4 * GiB
    capfd.readouterr()
    t0 = time.monotonic()
    assert setup(store, master, asked) == INVALID
    took = time.monotonic() - t0
    err = capfd.readouterr().err
    assert took < 2.0, f"a refused setup took {took:.1f} s"
    (line,) = refusals(err)
    assert "setup rejected" in line and "global_segment_size" in line and f"({asked + 16 * MiB} bytes)" in line, line
    assert "MemAvailable" in line or "memory cgroup" in line, line
    assert master.segments() == []
    # the store is usable after, and closes
    assert setup(store, master, 16 * MiB) == 0
    value = pattern(MiB, 7)
    assert store.put("k", value) == 0 and store.get("k") == value
    assert store.close() == 0


def test_local_buffer_of_a_pebibyte_is_refused_with_one_line(master, capfd):
    store = MooncakeDistributedStore()
    capfd.readouterr()
    assert setup(store, master, 16 * MiB, buffer=1 << 50) == INVALID
    (line,) = refusals(capfd.readouterr().err)
    assert "local_buffer_size 1 PiB" in line and "global_segment_size 16 MiB" in line, line
    assert master.segments() == []
    assert store.close() == 0
    assert setup(store, master, 0, buffer=MiB) == 0
    assert store.close() == 0


def test_allocated_segment_refusal_names_size_and_bound(master, store_factory, capfd):
    store = store_factory(master, segment=0)
    asked = mem_available() + GiB
    capfd.readouterr()
    assert store.allocate_and_mount_segment(asked) == {"ret": -1, "segment_ids": [], "allocated_size": 0}
    lines = refusals(capfd.readouterr().err)
    assert len(lines) == 1 and "allocate_and_mount_segment" in lines[0], lines
    assert master.segments() == []
    r = store.allocate_and_mount_segment(MiB)
    assert r["ret"] == 0, r
    assert store.unmount_and_free_segment(r["segment_ids"]) == 0


def test_standalone_client_pool_above_memavailable_exits_at_once(master, logdir):
    asked = mem_available() + 4 * GiB
    t0 = time.monotonic()
    p = subprocess.run([sys.executable, "-m", "gostore.client_server", "--host=127.0.0.1", "--port=0",
                        f"--master_server_address={master.addr}", f"--global_segment_size={asked}",
                        f"--ipc_socket_path={logdir}/refused.sock"],
                       capture_output=True, text=True, timeout=60)
    took = time.monotonic() - t0
    assert p.returncode == 1 and '"ready"' not in p.stdout, (p.returncode, p.stdout)
    assert took < 20, f"gostore-client took {took:.1f} s to refuse"
    (line,) = refusals(p.stderr)
    assert f"global_segment_size {f'{asked / GiB:.2f}'.rstrip('0').rstrip('.')} GiB" in line, line
    assert "MemAvailable" in line or "memory cgroup" in line, line
    assert master.segments() == []


# ---- a real memory cgroup -------------------------------------------------------------


def _own_memory_cgroup():
    """(directory of this process's memory cgroup, version) or None."""
    own = {}
    with open("/proc/self/cgroup") as f:
        for line in f:
            h, ctrls, path = line.rstrip("\n").split(":", 2)
            if h == "0" and ctrls == "":
                own[2] = path
            elif "memory" in ctrls.split(","):
                own[1] = path
    with open("/proc/self/mountinfo") as f:
        for line in f:
            pre, _, post = line.partition(" - ")
            fields, rest = pre.split(), post.split()
            root, mount = fields[3], fields[4]
            if rest[0] == "cgroup" and "memory" in rest[2].split(",") and 1 in own:
                return os.path.join(mount, os.path.relpath(own[1], root)), 1
            if rest[0] == "cgroup2" and 2 in own:
                d = os.path.join(mount, os.path.relpath(own[2], root))
                if os.path.exists(os.path.join(d, "memory.max")):
                    return d, 2
    return None


@pytest.fixture
def cgroup_1_5_gib():
    """A child memory cgroup with a 1.5 GiB limit; skipped where none can be made."""
    found = _own_memory_cgroup()
    if found is None:
        pytest.skip("no memory cgroup hierarchy is mounted here")
    parent, version = found
    d = os.path.join(parent, f"gostore-test-{os.getpid()}")
    try:
        os.mkdir(d)
        limit = "memory.limit_in_bytes" if version == 1 else "memory.max"
        with open(os.path.join(d, limit), "w") as f:
            f.write(str(1536 * MiB))
    except OSError as e:
        if os.path.isdir(d):
            os.rmdir(d)
        pytest.skip(f"cannot make a memory cgroup under {parent}: {e}")
    yield d
    deadline = time.monotonic() + 10
    while True:
        try:
            os.rmdir(d)
            break
        except OSError:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.05)  # its last process is still exiting


def test_segment_beyond_the_memory_cgroup_is_refused(master, peer_factory, cgroup_1_5_gib):
    # The peer moves itself into the cgroup, then sets up a 2 GiB segment.
    # Before the check it was OOM-killed in the cgroup (no log line).
    join = ["sh", "-c", f'echo $$ > {cgroup_1_5_gib}/cgroup.procs && exec "$@"', "sh"]
    p = peer_factory(master, segment="2GB", wrap=join, expect_ready=False)
    try:
        assert p.setup_rc == INVALID, (p.setup_rc, p.log())
        (line,) = refusals(p.log())
        assert "global_segment_size 2 GiB" in line and "memory cgroup" in line and "1.5 GiB" in line, line
        assert master.segments() == []
    finally:
        p.kill()  # out of the cgroup before the fixture removes it
    ok = peer_factory(master, segment="64MB", wrap=join)
    try:  # a segment that fits the cgroup is taken
        assert ok.put("k", b"x" * 100) == 0 and ok.get("k") == b"x" * 100
    finally:
        ok.kill()
