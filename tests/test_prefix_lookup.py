"""The master's prefix lookup for routers (POST /query_prefix,
docs/operations.md "Prefix lookup for routers"), with the real master
binary, real client processes on loopback and, for the disk tier, a real
SSD tier on real files.

A request's pages are objects; the master answers how many leading pages
are stored and readable, in all, per medium (CPU: host memory, DISK: the
SSD tier) and per instance (the segment or SSD tier holding them).
"""

from __future__ import annotations

import json
import os
import urllib.error
import urllib.request

from conftest import MiB, pattern, wait_until
from test_ssd_tier import OBJ, SEGMENT, disk_only, offload_master, on_disk, put_retrying, tier_env


def _secret(path) -> str:
    p = str(path)
    with open(p, "w") as f:
        f.write("prefix-lookup-secret-0123456789abcdef\n")
    os.chmod(p, 0o600)
    return p


def query_prefix(m, body, authenticate: bool = True):
    """``(status, answer)`` of ``POST /query_prefix``: the decoded JSON on
    200, the text otherwise. ``body`` is sent as JSON unless it is bytes."""
    data = body if isinstance(body, bytes) else json.dumps(body).encode()
    req = urllib.request.Request(f"http://{m.http_addr}/query_prefix", data=data, method="POST",
                                 headers={"Content-Type": "application/json"})
    if authenticate and m.bearer:
        req.add_header("Authorization", f"Bearer {m.bearer}")
    try:
        with urllib.request.urlopen(req, timeout=10) as r:
            return r.status, json.loads(r.read())
    except urllib.error.HTTPError as e:
        return e.code, e.read().decode("utf-8", "replace")


def tiers(longest: int, cpu: int, disk: int = 0) -> dict:
    return {"longest_matched": longest, "GPU": 0, "CPU": cpu, "DISK": disk}


def test_prefix_counts_and_locations(launcher, tmp_path):
    """Two holders, six pages: the answer counts the pages a reader gets
    (bytes checked), names who holds which, shortens when a page in the
    middle goes, and refuses bad input with 400 and one log line each."""
    secret = _secret(tmp_path / "secret")
    m = launcher.master(auth_secret_file=secret)
    env = {"GOSTORE_AUTH_SECRET_FILE": secret}
    a = launcher.peer(m, segment="16MB", env=env)
    b = launcher.peer(m, segment="16MB", env=env)
    reader = launcher.peer(m, segment="0", env=env)
    pages = [f"req/{i}" for i in range(6)]
    size = 64 << 10
    # p0 on both, p1..p3 on a, p4..p5 on b.
    assert a.put_pattern(pages[0], size, seed=0, replica_num=2) == 0
    for i in range(1, 6):
        holder = a if i < 4 else b
        assert a.put_pattern(pages[i], size, seed=i, preferred_segment=holder.hostname) == 0
    for i, k in enumerate(pages):
        assert reader.check_pattern(k, size, seed=i), f"{k} not readable"

    status, ans = query_prefix(m, {"keys": pages + ["req/missing", pages[0]]})
    assert status == 200, ans
    assert ans == {**tiers(6, 6), "instances": {a.hostname: tiers(4, 4), b.hostname: tiers(1, 1)}}, ans
    status, ans = query_prefix(m, {"keys": pages, "block_size": 16})
    assert status == 200 and ans["longest_matched"] == 96 and ans["instances"][a.hostname]["CPU"] == 64, ans

    # The same lookup without the secret is refused like the other endpoints.
    status, text = query_prefix(m, {"keys": pages}, authenticate=False)
    assert status == 401, (status, text)

    # A page in the middle removed: the prefix stops before it.
    assert a.remove(pages[2], force=True) == 0  # the reads above hold leases
    status, ans = query_prefix(m, {"keys": pages})
    assert status == 200, ans
    assert ans == {**tiers(2, 2), "instances": {a.hostname: tiers(2, 2), b.hostname: tiers(1, 1)}}, ans
    assert reader.check_pattern(pages[1], size, seed=1)

    # Bad input: 400 with what was wrong, one log line each, still serving.
    for body, want in [(b'{"keys": [', "not a JSON object"),
                       ({"keys": "req/0"}, '"keys" must be a list of strings'),
                       ({"keys": [0, 1]}, '"keys" must be a list of strings'),
                       ({"keys": ["x"] * 4097}, "4097 keys exceed the limit of 4096"),
                       ({"pages": pages}, 'unknown field "pages"')]:
        before = m.log().count("query_prefix refused")
        status, text = query_prefix(m, body)
        assert status == 400 and want in text, (body if isinstance(body, bytes) else str(body)[:80], status, text)
        wait_until(lambda: m.log().count("query_prefix refused") == before + 1, what="one log line")
    assert m.alive()
    assert query_prefix(m, {"keys": pages[:2]})[1]["longest_matched"] == 2


def test_disk_tier_pages_are_reported_as_disk(master_factory, peer_factory, store_factory, tmp_path):
    """Pages persisted by a holder's SSD tier count under DISK, for the
    holder (its segment's name, though the tier answers at an endpoint of
    its own); once eviction leaves the first page on disk only, the memory
    run (CPU) is 0 while every page still counts."""
    m = offload_master(master_factory)
    ssd = str(tmp_path / "ssd")
    os.mkdir(ssd)
    holder = peer_factory(m, segment=str(SEGMENT), ssd=ssd, env=tier_env("bucket_storage_backend", False))
    writer = store_factory(m, segment=0)  # every object lands on the holder
    pages = [f"disk/{i}" for i in range(4)]
    for i, k in enumerate(pages):
        put_retrying(writer, k, pattern(i, OBJ))
    wait_until(lambda: all(on_disk(m, k) for k in pages), timeout=20, what="every page on disk")
    endpoint = m.query_key(pages[0])["disk"]
    assert endpoint and endpoint != holder.hostname, endpoint

    # Fill the pool until eviction has taken the first page's memory.
    filler = 0
    while not disk_only(m, pages[0]):
        assert filler < 8 * SEGMENT // OBJ, "the first page never became disk-only"
        put_retrying(writer, f"fill/{filler}", pattern(100 + filler, OBJ))
        filler += 1
    for i, k in enumerate(pages):
        assert writer.get(k) == pattern(i, OBJ), f"{k} not readable"

    status, ans = query_prefix(m, {"keys": pages})
    assert status == 200, ans
    assert ans["longest_matched"] == 4 and ans["DISK"] == 4 and ans["CPU"] == 0, ans
    assert ans["instances"] == {holder.hostname: tiers(4, 0, 4)}, ans
