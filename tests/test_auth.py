"""Authentication, with the real master binary and real client processes on
loopback, over TCP (GOSTORE_TRANSPORT=tcp, so that bytes cross the
authenticated transfer connections and not shared memory):

- With a shared secret, clients that hold it put and get; a client without
  it, or with another secret, is refused at setup and the master logs why
  in one line; the master's HTTP endpoints but /metrics and /health want
  the secret; a raw connection to a client's transfer port gets the
  challenge and nothing else, and a write it sends changes no byte.
- With mutual TLS (certificates made here with openssl), the same, and a
  client whose certificate another CA signed is refused.
- Without authentication, neither the master nor a client listens beyond
  loopback unless told it may (--allow_insecure / allow_insecure=True).
"""

from __future__ import annotations

import os
import shutil
import socket
import struct
import subprocess
from typing import Dict

import pytest

from conftest import master_binary, wait_until
from gostore import MooncakeDistributedStore

MiB = 1 << 20
INVALID_PARAMS = -600
RPC_FAIL = -900


def _secret(path, value: str) -> str:
    p = str(path)
    with open(p, "w") as f:
        f.write(value + "\n")
    os.chmod(p, 0o600)
    return p


def _openssl(*args: str) -> None:
    subprocess.run(["openssl", *args], check=True, capture_output=True)


def _ca(d, name: str) -> Dict[str, str]:
    ca = {"pem": str(d / f"{name}-ca.pem"), "key": str(d / f"{name}-ca.key")}
    _openssl("req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:P-256", "-nodes",
             "-keyout", ca["key"], "-out", ca["pem"], "-days", "1", "-subj", f"/CN={name}")
    return ca


def _issue(d, ca: Dict[str, str], name: str, trust: Dict[str, str]) -> Dict[str, str]:
    """A certificate for ``name`` signed by ``ca``, trusting ``trust``'s CA."""
    key, csr, pem = str(d / f"{name}.key"), str(d / f"{name}.csr"), str(d / f"{name}.pem")
    _openssl("req", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:P-256", "-nodes",
             "-keyout", key, "-out", csr, "-subj", f"/CN={name}")
    _openssl("x509", "-req", "-in", csr, "-CA", ca["pem"], "-CAkey", ca["key"], "-CAcreateserial",
             "-out", pem, "-days", "1")
    return {"tls_ca_file": trust["pem"], "tls_cert_file": pem, "tls_key_file": key}


def _env(files: Dict[str, str]) -> Dict[str, str]:
    return {"GOSTORE_" + k.upper(): v for k, v in files.items()}


def _setup(launcher, master, **kw) -> int:
    s = MooncakeDistributedStore()
    launcher.stores.append(s)
    return s.setup("127.0.0.1", "P2PHANDSHAKE", 16 * MiB, 16 * MiB, "tcp", "", master.addr, **kw)


def _master_log(m) -> str:
    with open(m.log_path) as f:
        return f.read()


def _http_refusals(m) -> None:
    assert m.http("/metrics", authenticate=False)[0] == 200
    assert m.http("/health", authenticate=False)[0] == 200
    for path in ("/get_all_segments", "/query_key?key=k"):
        status, body = m.http(path, authenticate=False)
        assert status == 401, (path, status, body)
    assert m.http("/get_all_segments")[0] == 200


def test_shared_secret(launcher, tmp_path):
    secret = _secret(tmp_path / "secret", "s3cret-shared-by-the-pool-0123456789")
    m = launcher.master(auth_secret_file=secret)
    env = {"GOSTORE_AUTH_SECRET_FILE": secret}
    a = launcher.peer(m, transport="tcp", env=env)
    b = launcher.peer(m, transport="tcp", env=env)
    assert a.put_pattern("k", 3 * MiB, seed=7, preferred_segment=a.hostname) == 0
    assert b.check_pattern("k", 3 * MiB, seed=7)  # b read a's segment over TCP, both authenticated

    assert _setup(launcher, m) == RPC_FAIL  # no secret: refused at the first RPC
    wait_until(lambda: "spoke without authenticating" in _master_log(m), what="the master's log line")
    wrong = _secret(tmp_path / "wrong", "another-secret-entirely-9876543210")
    assert _setup(launcher, m, auth_secret_file=wrong) == RPC_FAIL
    wait_until(lambda: "does not hold the shared secret" in _master_log(m), what="the master's log line")
    assert sum("rpc: peer refused" in line for line in _master_log(m).splitlines()) == 2

    _http_refusals(m)
    seg = next(s for s in m.segments() if s["Name"] == a.hostname)
    host, port = seg["TransferAddr"].rsplit(":", 1)

    # A stranger on a's transfer port: the challenge, then the end.
    for request in (struct.pack("<BQQQ", 2, 1, 0, 4096),  # read 4 KiB at 0
                    struct.pack("<BQQQ", 1, 2, 0, 3 * MiB) + b"\xee" * (3 * MiB)):  # overwrite everything
        with socket.create_connection((host, int(port)), timeout=10) as c:
            try:
                c.sendall(request)
            except OSError:
                pass  # closed while we wrote: refused early
            got = b""
            while True:
                try:
                    chunk = c.recv(65536)
                except ConnectionResetError:
                    break
                if not chunk:
                    break
                got += chunk
        assert got.startswith(b"GSAUTH1\n") and len(got) == 40, got[:64]
    wait_until(lambda: a.log().count("transfer: peer refused") >= 2, what="a's log lines")
    assert b.check_pattern("k", 3 * MiB, seed=7)  # not a byte changed


@pytest.mark.skipif(shutil.which("openssl") is None, reason="needs the openssl command to make certificates")
def test_mutual_tls(launcher, tmp_path):
    ca, rogue = _ca(tmp_path, "pool"), _ca(tmp_path, "rogue")
    mfiles = _issue(tmp_path, ca, "master", ca)
    m = launcher.master(**mfiles)
    a = launcher.peer(m, transport="tcp", env=_env(_issue(tmp_path, ca, "a", ca)))
    b = launcher.peer(m, transport="tcp", env=_env(_issue(tmp_path, ca, "b", ca)))
    assert a.put_pattern("k", 5 * MiB, seed=3, preferred_segment=a.hostname) == 0
    assert b.check_pattern("k", 5 * MiB, seed=3)

    # Trusts our CA, but its own certificate is the rogue CA's.
    assert _setup(launcher, m, **_issue(tmp_path, rogue, "impostor", ca)) == RPC_FAIL
    wait_until(lambda: "does not chain to our CA" in _master_log(m), what="the master's log line")
    assert _setup(launcher, m) == RPC_FAIL  # no TLS at all
    wait_until(lambda: "does not speak TLS" in _master_log(m), what="the master's log line")
    _http_refusals(m)
    assert b.check_pattern("k", 5 * MiB, seed=3)


def test_no_unauthenticated_port_beyond_loopback(launcher, tmp_path):
    r = subprocess.run([master_binary(), "--rpc_address=0.0.0.0", "--rpc_port=0", "--metrics_port=-1"],
                       capture_output=True, text=True, timeout=30)
    assert r.returncode != 0 and "without authentication" in r.stderr and "--allow_insecure" in r.stderr, r.stderr
    m = launcher.master(address="0.0.0.0", allow_insecure=True)
    assert _setup(launcher, m) == 0  # a loopback client needs nothing

    s = MooncakeDistributedStore()
    launcher.stores.append(s)
    assert s.setup("0.0.0.0", "P2PHANDSHAKE", 16 * MiB, 16 * MiB, "tcp", "", m.addr) == INVALID_PARAMS
    s2 = MooncakeDistributedStore()
    launcher.stores.append(s2)
    assert s2.setup("0.0.0.0", "P2PHANDSHAKE", 16 * MiB, 16 * MiB, "tcp", "", m.addr, allow_insecure=True) == 0
    with pytest.raises(TypeError):
        MooncakeDistributedStore().setup("127.0.0.1", "P2PHANDSHAKE", MiB, MiB, "tcp", "", m.addr,
                                         auth_secret_file=3)
