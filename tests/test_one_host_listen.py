"""One host, no authentication, a local_hostname that is the host's own IP:
what vLLM's Mooncake connector sets up when run as its docs show (it passes
``get_ip()`` as local_hostname, the master is on 127.0.0.1).

The host is a network namespace made by the test, with loopback and a
veth interface holding 10.213.0.1 (it needs root and skips otherwise), so
the addresses and listeners are the test's own.

- The same on this machine as it is, with the address vLLM's ``get_ip()``
  finds (the source address of its route to the internet), without root.
- With the master on loopback, ``setup`` succeeds: the segment is named
  ``10.213.0.1:port`` and its transfer server listens on 127.0.0.1 only;
  nothing listens on 10.213.0.1. Peers of the host reach it (bytes checked,
  over TCP too).
- With a master that other hosts can reach (``--allow_insecure`` on
  10.213.0.1), the same client is refused (-600, one log line naming the
  ways out): other hosts could be in that pool.
- With a shared secret, the transfer server listens on 10.213.0.1 as asked:
  the multi-host way.
"""

from __future__ import annotations

import os
import socket
import subprocess
import uuid

import pytest

IP = "10.213.0.1"


def _run(*args: str) -> str:
    return subprocess.run(args, check=True, capture_output=True, text=True).stdout


@pytest.fixture
def host():
    if os.geteuid() != 0:
        pytest.skip("network namespaces need root")
    ns = f"gs1h{uuid.uuid4().hex[:6]}"
    try:
        _run("ip", "netns", "add", ns)
    except (subprocess.CalledProcessError, FileNotFoundError) as e:
        pytest.skip(f"cannot make a network namespace here: {e}")
    try:
        _run("ip", "-n", ns, "link", "set", "lo", "up")
        # A veth pair inside the namespace: the host's "NIC" (a dummy
        # interface needs a kernel module that containers often lack).
        _run("ip", "-n", ns, "link", "add", "nic0", "type", "veth", "peer", "name", "nic1")
        _run("ip", "-n", ns, "addr", "add", f"{IP}/24", "dev", "nic0")
        _run("ip", "-n", ns, "link", "set", "nic0", "up")
        _run("ip", "-n", ns, "link", "set", "nic1", "up")
    except subprocess.CalledProcessError as e:
        subprocess.run(["ip", "netns", "del", ns], capture_output=True)
        pytest.skip(f"cannot make an interface in the namespace here: {e.stderr}")
    yield ["ip", "netns", "exec", ns]
    subprocess.run(["ip", "netns", "del", ns], capture_output=True)


def _listeners(wrap, pid: int) -> set:
    """The TCP addresses ``pid`` listens on, as ``ss`` prints them."""
    out = _run(*wrap, "ss", "-ltnpH")
    return {line.split()[3] for line in out.splitlines() if f"pid={pid}," in line}


def _connects(wrap, addr: str) -> bool:
    host, port = addr.rsplit(":", 1)
    code = (f"import socket; s=socket.socket(); s.settimeout(2)\n"
            f"try: s.connect(({host!r}, {port})); print('yes')\nexcept OSError: print('no')")
    return _run(*wrap, "python3", "-c", code).strip() == "yes"


def _route_ip() -> str:
    """This host's address as vLLM's get_ip() finds it: the source address
    of a UDP socket connected towards the internet (no packet is sent)."""
    s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    try:
        s.connect(("8.8.8.8", 80))
        return s.getsockname()[0]
    except OSError:
        return ""
    finally:
        s.close()


def test_one_host_engine_with_the_address_vllm_finds(launcher):
    ip = _route_ip()
    if not ip or ip.startswith("127."):
        pytest.skip("this host has no route, so no address for vLLM's get_ip() to find")
    m = launcher.master()  # on 127.0.0.1, no authentication: the engines' docs' first try
    a = launcher.peer(m, hostname=ip, expect_ready=False)
    assert a.setup_rc == 0, f"setup with local_hostname={ip} returned {a.setup_rc}:\n{a.log()}"
    assert a.hostname.startswith(ip + ":"), a.hostname
    listening = _listeners([], a.pid)
    assert listening and all(x.startswith("127.0.0.1:") for x in listening), listening
    b = launcher.peer(m, transport="tcp")
    assert b.put_pattern("vllm/0", 100_000, seed=3, preferred_segment=a.hostname) == 0
    assert a.check_pattern("vllm/0", 100_000, 3)


def test_one_host_engine_with_the_hosts_ip(launcher, host):
    m = launcher.master(wrap=host)  # on 127.0.0.1, no authentication
    a = launcher.peer(m, hostname=IP, wrap=host, expect_ready=False, env={"GOSTORE_LOG_LEVEL": "info"})
    assert a.setup_rc == 0, f"setup with local_hostname={IP} returned {a.setup_rc}:\n{a.log()}"
    assert a.hostname.startswith(IP + ":"), a.hostname
    port = a.hostname.rsplit(":", 1)[1]
    listening = _listeners(host, a.pid)
    assert f"127.0.0.1:{port}" in listening, listening
    beyond = {x for x in listening if not x.startswith("127.0.0.1:")}
    assert not beyond, f"the client listens beyond loopback without authentication: {beyond}"
    assert not _connects(host, f"{IP}:{port}"), f"{IP}:{port} accepts connections"
    assert "listen on loopback only" in a.log(), a.log()
    # Peers of the host, over shared memory and over TCP, read what a holds.
    b = launcher.peer(m, hostname=IP, wrap=host)
    c = launcher.peer(m, hostname=IP, wrap=host, transport="tcp")
    for i, writer in enumerate((a, b, c)):
        assert writer.put_pattern(f"one/{i}", 300_000 + i, seed=i, preferred_segment=a.hostname) == 0
    for reader in (a, b, c):
        for i in range(3):
            assert reader.check_pattern(f"one/{i}", 300_000 + i, i), (reader, i)
    assert all(p.hostname.startswith(IP + ":") for p in (b, c)), (b.hostname, c.hostname)


def test_a_master_other_hosts_reach_still_needs_authentication(launcher, host):
    m = launcher.master(wrap=host, address=IP, allow_insecure=True)
    a = launcher.peer(m, hostname=IP, wrap=host, expect_ready=False)
    assert a.setup_rc == -600, a.setup_rc
    refusals = [line for line in a.log().splitlines() if "without authentication" in line]
    assert len(refusals) == 1, a.log()
    assert "auth_secret_file" in refusals[0] and "allow_insecure" in refusals[0], refusals[0]


def test_with_a_secret_the_transfer_server_listens_on_the_hosts_ip(launcher, host, tmp_path):
    secret = tmp_path / "secret"
    secret.write_text(uuid.uuid4().hex + uuid.uuid4().hex)
    m = launcher.master(wrap=host, address=IP, auth_secret_file=str(secret))
    env = {"GOSTORE_AUTH_SECRET_FILE": str(secret)}
    a = launcher.peer(m, hostname=IP, wrap=host, env=env)
    b = launcher.peer(m, hostname=IP, wrap=host, env=env, transport="tcp")
    port = a.hostname.rsplit(":", 1)[1]
    assert f"{IP}:{port}" in _listeners(host, a.pid)
    assert b.put_pattern("multi/0", 200_000, seed=7, preferred_segment=a.hostname) == 0
    assert a.check_pattern("multi/0", 200_000, 7)


def test_one_host_ssd_tier_listens_on_loopback_too(launcher, host, tmp_path):
    """The SSD tier's servers (staging buffer, RPC endpoint) follow the
    segment's: loopback only."""
    m = launcher.master(wrap=host, enable_offload=True)
    ssd = tmp_path / "ssd"
    ssd.mkdir()
    a = launcher.peer(m, hostname=IP, wrap=host, ssd=str(ssd))
    listening = _listeners(host, a.pid)
    assert len(listening) >= 3, listening  # segment, SSD staging, SSD RPC
    assert all(x.startswith("127.0.0.1:") for x in listening), listening
    assert a.put_pattern("ssd/0", 100_000, seed=5) == 0 and a.check_pattern("ssd/0", 100_000, 5)
