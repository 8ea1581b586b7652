"""setup()'s arguments as Mooncake 0.3.13's binding takes them: thirteen
positional parameters in its order, its keyword names, its type checks
(TypeError before any native code) and the keys of its dict form. Pure
Python: no libgostore.so, no master."""

import pytest

from gostore import MooncakeDistributedStore
from gostore.store.distributed_store import _setup_params

REQUIRED = ("127.0.0.1", "P2PHANDSHAKE", 16 << 20, 16 << 20, "tcp", "", "127.0.0.1:50051")
# engine, enable_ssd_offload, ssd_offload_path, tenant_id,
# enable_client_http_server, client_http_port
OPTIONAL = (None, False, "", "default", False, 9300)
NAMES = ("local_hostname", "metadata_server", "global_segment_size", "local_buffer_size",
         "protocol", "rdma_devices", "master_server_addr", "engine", "enable_ssd_offload",
         "ssd_offload_path", "tenant_id", "enable_client_http_server", "client_http_port")


def with_arg(name, value):
    """The thirteen positional arguments with ``name`` set to ``value``."""
    args = list(REQUIRED + OPTIONAL)
    args[NAMES.index(name)] = value
    return tuple(args)


def test_thirteen_positional_arguments_in_mooncakes_order():
    p = _setup_params(REQUIRED + (None, True, "/ssd", "team-a", True, 9301), {})
    assert p["enable_ssd_offload"] is True and p["ssd_offload_path"] == "/ssd"
    assert p["tenant_id"] == "team-a"
    assert p["enable_client_http_server"] is True and p["client_http_port"] == 9301
    # the same by name
    assert _setup_params((), dict(zip(NAMES, REQUIRED + (None, True, "/ssd", "team-a", True, 9301)))) == p
    # and split between the two
    assert _setup_params(REQUIRED, {"tenant_id": "team-a", "client_http_port": 9301,
                                    "enable_client_http_server": True,
                                    "enable_ssd_offload": True, "ssd_offload_path": "/ssd"}) == p


def test_defaults_are_not_sent():
    """Go applies Mooncake's defaults to what is left out."""
    p = _setup_params(REQUIRED, {})
    for k in NAMES[7:]:
        assert k not in p


def test_fourteen_positional_arguments_raise(no_lib):
    with pytest.raises(TypeError, match="at most 13"):
        MooncakeDistributedStore().setup(*REQUIRED, *OPTIONAL, 1)


@pytest.mark.parametrize("name,value", [
    ("client_http_port", "x"),
    ("client_http_port", 1.5),
    ("client_http_port", None),
    ("client_http_port", 2**31),
    ("client_http_port", -(2**31) - 1),
    ("enable_client_http_server", "y"),
    ("enable_client_http_server", []),
    ("enable_ssd_offload", "extra"),
    ("enable_ssd_offload", {}),
    ("ssd_offload_path", None),
    ("ssd_offload_path", 5),
    ("tenant_id", None),
    ("tenant_id", 5),
])
def test_wrong_types_raise_before_native(no_lib, name, value):
    s = MooncakeDistributedStore()
    with pytest.raises(TypeError):
        s.setup(*with_arg(name, value))
    with pytest.raises(TypeError):
        s.setup(*REQUIRED, **{name: value})


@pytest.mark.parametrize("name,value,sent", [
    # bool parameters convert as the binding converts them
    ("enable_client_http_server", None, False),
    ("enable_client_http_server", 1, True),
    ("enable_client_http_server", 0.0, False),
    ("enable_ssd_offload", None, False),
    ("enable_ssd_offload", 2, True),
    # the port is any integer that fits 32 bits; its range is Go's to check
    ("client_http_port", True, 1),
    ("client_http_port", -1, -1),
    ("client_http_port", 70000, 70000),
    ("client_http_port", 2**31 - 1, 2**31 - 1),
])
def test_conversions_the_binding_accepts(name, value, sent):
    p = _setup_params(with_arg(name, value), {})
    assert p[name] == sent and type(p[name]) is type(sent)


def test_engine_is_accepted_and_unused():
    assert "engine" not in _setup_params(with_arg("engine", object()), {})


def test_extensions_stay_keyword_only(no_lib):
    p = _setup_params(REQUIRED, {"segment_location": "cpu", "log_level": "info",
                                 "put_space_wait_ms": 10, "cluster_id": "blue"})
    assert (p["segment_location"], p["log_level"], p["put_space_wait_ms"]) == ("cpu", "info", 10)
    assert p["cluster_id"] == "blue"
    assert _setup_params(({"cluster_id": "blue"},), {})["cluster_id"] == "blue"  # the dict form too
    with pytest.raises(TypeError, match="cluster_id"):
        _setup_params(REQUIRED, {"cluster_id": 5})
    with pytest.raises(TypeError, match="unexpected keyword"):
        MooncakeDistributedStore().setup(*REQUIRED, ipc_socket_path="/tmp/s")


def test_dict_form_reads_mooncakes_keys():
    d = _setup_params(({
        "local_hostname": "10.0.0.1", "metadata_server": "P2PHANDSHAKE",
        "global_segment_size": "1GB", "local_buffer_size": 1 << 20, "protocol": "tcp",
        "rdma_devices": "mlx5_0", "master_server_addr": "10.0.0.2:50051",
        "ipc_socket_path": "/tmp/mc.sock", "enable_ssd_offload": False,
        "ssd_offload_path": "/ssd", "tenant_id": "team-a",
        "enable_client_http_server": True, "client_http_port": 9301,
        "not_a_key": object(),
    },), {})
    assert d == {
        "local_hostname": "10.0.0.1", "metadata_server": "P2PHANDSHAKE",
        "global_segment_size": "1GB", "local_buffer_size": 1 << 20, "protocol": "tcp",
        "rdma_devices": "mlx5_0", "master_server_addr": "10.0.0.2:50051",
        "ipc_socket_path": "/tmp/mc.sock", "enable_ssd_offload": False,
        "ssd_offload_path": "/ssd", "tenant_id": "team-a",
        "enable_client_http_server": True, "client_http_port": 9301,
    }


@pytest.mark.parametrize("key,value,sent", [
    # Mooncake reads these from the text of any value; Go parses the text
    ("tenant_id", 7, "7"),
    ("enable_client_http_server", "yes", "yes"),
    ("enable_client_http_server", 1, "1"),
    ("enable_client_http_server", False, False),
    ("enable_ssd_offload", "no", "no"),
    ("enable_ssd_offload", True, True),
    ("client_http_port", "9301", "9301"),
    ("client_http_port", 9301, 9301),
    ("client_http_port", True, "True"),   # Go: not an integer, -600
    ("client_http_port", None, "None"),   # likewise
    ("client_http_port", 9301.0, "9301.0"),
])
def test_dict_form_passes_text_values_to_go(key, value, sent):
    p = _setup_params(({"local_hostname": "h", "metadata_server": "m", key: value},), {})
    assert p[key] == sent and type(p[key]) is type(sent)
