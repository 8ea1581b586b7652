"""The master as a drop-in for Mooncake 0.3.13's ``mooncake_master``: its
flags (names, gflags' syntax, durations), its config file, the one warning
about what this master does not implement, and the ``master_*`` series
Mooncake's dashboards read (docs/master-flags.md).

The lists of Mooncake's flags and series are test data of the Go package,
taken once from the wheel's binary.
"""

from __future__ import annotations

import json
import os
import re
import subprocess

import pytest

from conftest import MiB, ROOT, master_binary

TESTDATA = os.path.join(ROOT, "gostore", "master", "server", "testdata")


def _rows(name: str):
    with open(os.path.join(TESTDATA, name)) as f:
        return [line.rstrip("\n").split("\t") for line in f if line.strip() and not line.startswith("#")]


WHEEL_FLAGS = _rows("mooncake-0.3.13-master-flags.txt")  # name, type, default, origin
WHEEL_METRICS = dict(_rows("mooncake-0.3.13-master-metrics.txt"))  # name -> type


def warnings(master) -> list:
    return [line for line in master.log().splitlines() if "level=WARN" in line]


def serving(master) -> str:
    """The master's start line (it logs the TTLs and offload in effect)."""
    lines = [line for line in master.log().splitlines() if 'msg="master serving"' in line]
    assert len(lines) == 1, master.log()
    return lines[0]


def test_every_mooncake_flag_is_accepted_at_its_default(master_factory):
    assert len(WHEEL_FLAGS) == 134
    flags = {name: default.strip('"') for name, _type, default, _origin in WHEEL_FLAGS}
    # Where the wheel's default would bind a fixed port or every address.
    flags.update(rpc_address="127.0.0.1", metrics_host="127.0.0.1", metrics_port=0)
    m = master_factory(**flags)
    # Defaults ask for nothing missing, but enable_metric_reporting=true:
    # Mooncake's periodic metric log, which this master does not write.
    warned = warnings(m)
    assert len(warned) == 1 and "flags=enable_metric_reporting" in warned[0], warned
    assert "lease_ttl=10s client_ttl=10s" in serving(m)


@pytest.mark.parametrize("args, lease, client", [
    ({"default_kv_lease_ttl": 2500, "client_ttl": 3}, "2.5s", "3s"),  # the wheel's units
    ({"default_kv_lease_ttl": "2s", "client_ttl": "1500ms"}, "2s", "1.5s"),
    ({"default_kv_lease_ttl": "2m", "client_ttl": "1m"}, "2m0s", "1m0s"),
    ({"default_kv_lease_ttl": "1h", "client_ttl": "1m30s"}, "1h0m0s", "1m30s"),
], ids=["plain", "ms-s", "m", "h-go"])
def test_durations_in_each_form(master_factory, args, lease, client):
    m = master_factory(**args)
    assert f"lease_ttl={lease} client_ttl={client}" in serving(m)
    assert warnings(m) == []


def run_master(*args) -> subprocess.CompletedProcess:
    return subprocess.run([master_binary(), "--rpc_address=127.0.0.1", "--rpc_port=0", "--metrics_port=-1", *args],
                          capture_output=True, text=True, timeout=30)


@pytest.mark.parametrize("arg, says", [
    ("--default_kv_lease_ttl=5sec", "default_kv_lease_ttl"),
    ("--client_ttl=-5s", "negative"),
    ("--enable_ha=maybe", "not a boolean"),
    ("--no_such_flag=1", "unknown flag --no_such_flag"),
    ("--noclient_ttl", "not a boolean"),
])
def test_bad_flags_fail_naming_the_flag(arg, says):
    proc = run_master(arg)
    assert proc.returncode == 2, proc.stderr
    assert says in proc.stderr and "INVALID_PARAMS" in proc.stderr, proc.stderr


def test_one_warning_names_the_unimplemented_flags(master_factory):
    m = master_factory(enable_oplog=True, enable_cxl=True, cxl_size=1, enable_snapshot=True, logtostderr=True)
    warned = warnings(m)
    assert len(warned) == 1, warned
    # enable_snapshot is accepted without a word (a state directory turns
    # the journal on).
    assert "flags=cxl_size,enable_cxl,enable_oplog" in warned[0], warned


@pytest.mark.parametrize("fmt", ["json", "yaml"])
def test_config_file_and_command_line_precedence(master_factory, tmp_path, fmt):
    conf = {"client_live_ttl_sec": 33, "default_kv_lease_ttl": "7s", "enable_offload": True,
            "rpc_port": 1, "metrics_port": 1, "enable_oplog": True, "not_a_flag": 5}
    path = tmp_path / f"master.{fmt}"
    if fmt == "json":
        path.write_text(json.dumps(conf))
    else:
        path.write_text("".join(f"{k}: {str(v).lower() if isinstance(v, bool) else v}\n" for k, v in conf.items()))
    # The harness gives --rpc_port=0 --metrics_port=0 on the command line:
    # they win over the file's ports (1, which could not be bound).
    m = master_factory(config_path=str(path))
    assert "offload=true lease_ttl=7s client_ttl=33s" in serving(m)
    warned = warnings(m)
    assert len(warned) == 1 and "flags=enable_oplog" in warned[0], warned
    assert "unknown_config_keys=not_a_flag" in warned[0], warned
    # A flag wins over the file even at its default value.
    m2 = master_factory(config_path=str(path), client_ttl=10, enable_offload=False, enable_oplog=False)
    assert "offload=false lease_ttl=7s client_ttl=10s" in serving(m2)
    assert "flags=" not in "".join(warnings(m2))


@pytest.mark.parametrize("arg, says", [
    ("--client_ttl=0", "--client_ttl=0s: ttls, timeouts and the tick interval must be positive"),
    ("--default_kv_lease_ttl=0", "--default_kv_lease_ttl=0s: ttls"),
    ("--eviction_ratio=2", "--eviction_ratio=2: eviction ratios must lie in (0, 1]"),
    ("--rpc_max_inflight_per_ip=0", "--rpc_max_inflight_per_ip=0: must be positive"),
    ("--rpc_port=70000", "--rpc_port=70000 (or --port): out of range"),
])
def test_invalid_values_name_the_flag_and_value(arg, says):
    proc = run_master(arg)
    assert proc.returncode == 2, proc.stderr
    assert says in proc.stderr and "INVALID_PARAMS" in proc.stderr, proc.stderr


def test_a_mistyped_config_key_is_called_unknown_with_the_nearest_key(master_factory, tmp_path):
    path = tmp_path / "master.yaml"
    path.write_text("enable_ofload: true\n")
    m = master_factory(config_path=str(path))
    warned = warnings(m)
    assert len(warned) == 1, warned
    assert "unknown_config_keys=\"enable_ofload (did you mean enable_offload?)\"" in warned[0], warned
    assert "not implement" not in warned[0], warned
    assert "offload=false" in serving(m)


@pytest.mark.parametrize("flag, says", [
    ("--metrics_port", "--metrics_port={port} on --metrics_host (else --rpc_address)=127.0.0.1"),
    ("--rpc_port", "--rpc_port={port} on --rpc_address=127.0.0.1"),
])
def test_a_port_in_use_names_its_flag(flag, says):
    import socket
    with socket.socket() as held:
        held.bind(("127.0.0.1", 0))
        held.listen(1)
        port = held.getsockname()[1]
        proc = run_master(f"--metrics_port=0", f"{flag}={port}")
    assert proc.returncode == 1, proc.stderr
    assert says.format(port=port) in proc.stderr and "another process holds that port" in proc.stderr, proc.stderr


def test_version_is_the_package_version():
    from importlib.metadata import version
    proc = subprocess.run([master_binary(), "--version"], capture_output=True, text=True, timeout=30)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.startswith(f"gostore-master {version('gostore')} go"), proc.stdout


def test_config_file_format_follows_the_extension(tmp_path):
    path = tmp_path / "master.conf"
    path.write_text("{}")
    proc = run_master(f"--config_path={path}")
    assert proc.returncode == 2 and ".json, .yaml or .yml" in proc.stderr, proc.stderr


def test_mooncake_series_are_served_and_move(master_factory, store_factory):
    m = master_factory()
    status, body = m.http("/metrics")
    assert status == 200
    served = dict(re.findall(r"^# TYPE (\S+) (\S+)$", body, re.M))
    ours = {n: t for n, t in served.items() if not n.startswith("gostore_")}
    assert len(ours) == 89, sorted(ours)
    assert all(WHEEL_METRICS.get(n) == t for n, t in ours.items()), \
        {n: t for n, t in ours.items() if WHEEL_METRICS.get(n) != t}
    assert m.metric("master_key_count") == 0 and m.metric("master_total_capacity_bytes") == 0

    s = store_factory(m, segment=16 * MiB)
    assert m.metric("master_active_clients") == 1
    assert m.metric("master_total_capacity_bytes") == 16 * MiB
    assert m.metric("master_mount_segment_requests_total") == 1

    before = {n: m.metric(n) for n in ("master_put_start_requests_total", "master_put_end_requests_total",
                                       "master_get_replica_list_requests_total", "valid_get_nums_",
                                       "mem_cache_hit_bytes_total", "master_batch_put_start_items_total",
                                       "master_remove_requests_total", "master_exist_key_requests_total")}
    assert s.put("k", b"v" * 1000) == 0
    assert m.metric("master_key_count") == 1
    assert m.metric("master_allocated_bytes") >= 1000
    assert m.metric("mem_cache_nums_") == 1
    assert m.metric("master_put_start_requests_total") == before["master_put_start_requests_total"] + 1
    assert m.metric("master_put_end_requests_total") == before["master_put_end_requests_total"] + 1

    assert s.get("k") == b"v" * 1000
    assert m.metric("master_get_replica_list_requests_total") == before["master_get_replica_list_requests_total"] + 1
    assert m.metric("valid_get_nums_") == before["valid_get_nums_"] + 1
    assert m.metric("mem_cache_hit_bytes_total") == before["mem_cache_hit_bytes_total"] + 1000

    assert s.put_batch(["b1", "b2", "b3"], [b"x"] * 3) == 0
    assert m.metric("master_batch_put_start_items_total") == before["master_batch_put_start_items_total"] + 3
    assert m.metric("master_key_count") == 4

    assert s.is_exist("nope") == 0
    assert m.metric("master_exist_key_requests_total") == before["master_exist_key_requests_total"] + 1
    assert m.metric("master_exist_key_failures_total") == 0  # a missing key is no failure

    assert s.remove("b1") == 0  # not k: the get leased it
    assert m.metric("master_remove_requests_total") == before["master_remove_requests_total"] + 1
    assert m.metric("master_key_count") == 3


def test_a_state_directory_that_cannot_be_used_names_its_flag(tmp_path):
    blocker = tmp_path / "a-file"
    blocker.write_text("")
    proc = run_master(f"--snapshot_backup_dir={blocker}/state")
    assert proc.returncode == 1, proc.stderr
    assert f"--snapshot_backup_dir={blocker}/state: " in proc.stderr, proc.stderr
