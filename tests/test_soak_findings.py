"""What the chaos soak (tools/soak.py) found, each reduced to a test that
failed before its fix:

- A new process on a dead client's host:port served reads and took writes
  meant for the dead client's segment (the TCP requests named no
  segment). Fixed by bounded writes: every request carries a grant signed
  with the segment's own key, which the new process does not hold (it
  now takes the dead client's segment name over, with a key of its own).
- A client kept a same-host peer's segment mapped after the master dropped
  it, so every peer that ever left stayed allocated in every process that
  had read from it. Fixed by the heartbeat's pruning of the peer cache
  (gostore/client/peers.go, prunePeers).
"""

import os
import socket
import subprocess
import sys
import time

import pytest

from conftest import pattern

# A storage client that keeps calling setup on one host:port until the
# master takes its segment, as a supervisor restarting an engine would.
RETRYING_STORAGE = """
import sys, time
from gostore import MooncakeDistributedStore
while True:
    s = MooncakeDistributedStore()
    rc = s.setup(sys.argv[2], "P2PHANDSHAKE", 16 << 20, 4 << 20, "tcp", "", sys.argv[1])
    print(rc, flush=True)
    if rc == 0:
        break
    s.close()
    time.sleep(0.1)
sys.stdin.read()
"""


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_a_new_process_on_a_dead_clients_port_serves_none_of_its_objects(master_factory, peer_factory, logdir):
    master = master_factory(client_ttl=10)
    hostname = f"127.0.0.1:{_free_port()}"
    holder = peer_factory(master, segment="16MB", hostname=hostname)
    reader = peer_factory(master, segment="0", transport="tcp")
    assert reader.put_pattern("k", 100_000, seed=1, preferred_segment=holder.hostname) == 0
    assert reader.check_pattern("k", 100_000, 1)
    holder.kill()
    with open(os.path.join(logdir, "impostor.log"), "w") as log:
        impostor = subprocess.Popen([sys.executable, "-c", RETRYING_STORAGE, master.addr, hostname],
                                    stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=log, text=True)
    try:
        # It takes the dead client's segment over (the dead one has been
        # silent past the master's takeover silence); the dead memory's
        # objects go with it. Reads racing that, from a reader that knew
        # the old segment, must never get the new process's bytes.
        deadline = time.monotonic() + 3  # within client_ttl
        while time.monotonic() < deadline:
            got = bytes.fromhex(reader.call("get", key="k")["hex"])
            wrong = bool(got) and got != pattern(1, 100_000)
            assert not wrong, f"get returned {len(got)} bytes of another process ({got.count(0)} zeros)"
            time.sleep(0.05)
        while (rc := impostor.stdout.readline().strip()) != "0":  # a supervisor's retries, should setup refuse
            assert rc == "-102", rc
        assert reader.call("get", key="k")["hex"] == ""  # gone with the dead process's memory
    finally:
        impostor.kill()
        impostor.wait()


@pytest.mark.parametrize("leave", ["kill", "close"])
def test_a_dead_peers_segment_is_unmapped(master_factory, peer_factory, leave):
    master = master_factory(client_ttl=1)
    holder = peer_factory(master, segment="16MB")
    reader = peer_factory(master, segment="0")
    assert reader.put_pattern("k", 4096, seed=2, preferred_segment=holder.hostname) == 0
    assert reader.check_pattern("k", 4096, 2)
    assert holder.hostname in reader.mapped_segments()
    holder.kill() if leave == "kill" else holder.stop()
    deadline = time.monotonic() + 10
    while holder.hostname in master.segment_names() and time.monotonic() < deadline:
        time.sleep(0.1)
    assert holder.hostname not in master.segment_names()
    assert reader.get("k") == b""  # the reader asks the master again: nothing there
    deadline = time.monotonic() + 3
    while holder.hostname in reader.mapped_segments() and time.monotonic() < deadline:
        time.sleep(0.1)
    assert holder.hostname not in reader.mapped_segments(), "the dead peer's segment is still mapped"
