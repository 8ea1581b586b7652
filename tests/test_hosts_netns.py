"""Several hosts on one machine: a network namespace per "host", joined by
veth pairs to a bridge, the master in one and storage clients in others,
TCP between them (made by the test; it needs root and skips otherwise).

- A master restarted on its state directory serves objects held on other
  hosts, reached over TCP.
- A storage host cut off from the master (its link down) past client_ttl
  loses its segment at the master; healed, it mounts again and serves new
  objects; the other host's objects never stopped serving."""

from __future__ import annotations

import subprocess

from conftest import wait_until

# Fixtures from conftest: hosts (h0: the master; h1, h2: storage clients),
# secret.


def _run(*args: str) -> None:
    subprocess.run(args, check=True, capture_output=True)



def _peer(launcher, master, host, secret):
    # TCP between hosts: the namespaces share the machine's shared memory,
    # which a real second host would not.
    return launcher.peer(master.addr, hostname=host["ip"], transport="tcp", wrap=host["wrap"],
                         env={"GOSTORE_AUTH_SECRET_FILE": secret})


def test_a_restarted_master_serves_objects_held_on_other_hosts(launcher, hosts, secret, tmp_path):
    state = str(tmp_path / "state")
    h0, h1, h2 = hosts
    m = launcher.master(wrap=h0["wrap"], address=h0["ip"], snapshot_backup_dir=state, auth_secret_file=secret)
    assert m.rpc_host == h0["ip"]
    a, b = _peer(launcher, m, h1, secret), _peer(launcher, m, h2, secret)
    for i in range(20):
        assert (a, b)[i % 2].put_pattern(f"hosts/{i}", 50_000 + i, seed=i) == 0
    m.kill()
    m2 = launcher.master(wrap=h0["wrap"], address=h0["ip"], snapshot_backup_dir=state, rpc_port=m.rpc_port,
                          auth_secret_file=secret)
    # Each client fails calls fast from its first unanswered ping until one
    # is answered again (docs/python-api.md): wait for both to read.
    wait_until(lambda: b.check_pattern("hosts/0", 50_000, 0), timeout=30, what="b's read after the restart")
    wait_until(lambda: a.check_pattern("hosts/1", 50_001, 1), timeout=30, what="a's read after the restart")
    for i in range(20):
        assert (b, a)[i % 2].check_pattern(f"hosts/{i}", 50_000 + i, i), i  # from the other host
    assert m2.alive()


def test_a_host_cut_off_and_healed(launcher, hosts, secret):
    h0, h1, h2 = hosts
    m = launcher.master(wrap=h0["wrap"], address=h0["ip"], client_ttl=2, auth_secret_file=secret)
    a, b = _peer(launcher, m, h1, secret), _peer(launcher, m, h2, secret)
    assert a.put_pattern("cut/a", 40_000, seed=1, preferred_segment=a.hostname) == 0
    assert b.put_pattern("cut/b", 40_000, seed=2, preferred_segment=b.hostname) == 0
    _run("ip", "link", "set", h1["veth"], "down")  # h1 cut off
    # Past client_ttl the master drops h1's segment and the objects on it.
    wait_until(lambda: b.call("is_exist", key="cut/a")["rc"] == 0, timeout=30, what="h1's objects dropped")
    assert b.check_pattern("cut/b", 40_000, 2)  # h2 kept serving
    _run("ip", "link", "set", h1["veth"], "up")  # healed
    # h1 mounts again by itself and serves new objects.
    wait_until(lambda: a.put_pattern("cut/again", 30_000, seed=3, preferred_segment=a.hostname) == 0,
               timeout=30, interval=0.2, what="a put on h1 after the heal")
    assert b.check_pattern("cut/again", 30_000, 3)
