"""What gostore's engine connectors share: Mooncake's client
configuration, read the way the engines' Mooncake integrations read it
(explicit keys, the engine's extra config, first; then a JSON file named by
an environment variable; then ``MOONCAKE_*`` variables; then defaults), the
store set up from it, and the length of a stored prefix."""

from __future__ import annotations

import itertools
import json
import os
from typing import Any, Dict, Iterable, Mapping, Optional, Sequence

from ..store.distributed_store import MooncakeDistributedStore

#: key -> (environment variable, default)
_KEYS: Dict[str, tuple] = {
    "master_server_address": ("MOONCAKE_MASTER", "127.0.0.1:50051"),
    "local_hostname": ("MOONCAKE_LOCAL_HOSTNAME", "127.0.0.1"),
    "metadata_server": ("MOONCAKE_TE_META_DATA_SERVER", "P2PHANDSHAKE"),
    "protocol": ("MOONCAKE_PROTOCOL", "tcp"),
    "device_name": ("MOONCAKE_DEVICE", ""),
    "global_segment_size": ("MOONCAKE_GLOBAL_SEGMENT_SIZE", 4 << 30),
    "local_buffer_size": ("MOONCAKE_LOCAL_BUFFER_SIZE", 16 << 20),
    "client_server_address": ("MOONCAKE_CLIENT", ""),
    # An HA cluster's id (the masters' --cluster_id); "" leaves it to setup,
    # which reads MC_STORE_CLUSTER_ID itself.
    "cluster_id": ("MC_STORE_CLUSTER_ID", ""),
}

_UNITS = {"tb": 1 << 40, "gb": 1 << 30, "mb": 1 << 20, "kb": 1 << 10, "b": 1}


def parse_size(value: Any, name: str) -> int:
    """An int, or text like ``4gb``, ``512MB``, ``1.5 GB`` (powers of 1024)."""
    if isinstance(value, bool):
        raise TypeError(f"{name} must be a size, not bool")
    if isinstance(value, int):
        return value
    if not isinstance(value, str):
        raise TypeError(f"{name} must be a size (int or text like '4gb'), not {type(value).__name__}")
    text = value.strip().lower().replace(" ", "")
    for unit, mult in _UNITS.items():
        if text.endswith(unit) and text[: -len(unit)]:
            try:
                return int(float(text[: -len(unit)]) * mult)
            except ValueError:
                break
    try:
        return int(text)
    except ValueError:
        raise ValueError(f"{name}: {value!r} is not a size (say 4294967296 or '4gb')") from None


def load(explicit: Optional[Mapping[str, Any]] = None, file_vars: Sequence[str] = ("MOONCAKE_CONFIG_PATH",)) -> Dict[str, Any]:
    """The client configuration: ``explicit`` keys, then the JSON file the
    first set variable of ``file_vars`` names, then ``MOONCAKE_*``
    variables, then defaults. Sizes come back as ints."""
    from_file: Dict[str, Any] = {}
    for var in file_vars:
        path = os.environ.get(var)
        if path:
            with open(path) as f:
                from_file = json.load(f)
            if not isinstance(from_file, dict):
                raise ValueError(f"{path} ({var}) must hold a JSON object")
            break
    explicit = dict(explicit or {})
    out: Dict[str, Any] = {}
    for key, (var, default) in _KEYS.items():
        for source in (explicit, from_file):
            if source.get(key) not in (None, ""):
                out[key] = source[key]
                break
        else:
            out[key] = os.environ.get(var) or default
    for key in ("global_segment_size", "local_buffer_size"):
        out[key] = parse_size(out[key], key)
    return out


def open_store(cfg: Mapping[str, Any], segment_share: int = 1) -> MooncakeDistributedStore:
    """A store set up from ``cfg`` (see :func:`load`): against the master,
    contributing ``global_segment_size // segment_share`` bytes (one share
    per rank of the engine on this host), or, with ``client_server_address``,
    through that ``gostore-client`` (standalone mode). RuntimeError, with
    the code, when setup fails."""
    store = MooncakeDistributedStore()
    if cfg.get("client_server_address"):
        rc = store.setup_dummy(cfg["global_segment_size"] // segment_share, cfg["local_buffer_size"],
                               cfg["client_server_address"])
    else:
        extra = {"cluster_id": cfg["cluster_id"]} if cfg.get("cluster_id") else {}
        rc = store.setup(cfg["local_hostname"], cfg["metadata_server"], cfg["global_segment_size"] // segment_share,
                         cfg["local_buffer_size"], cfg["protocol"], cfg["device_name"], cfg["master_server_address"],
                         **extra)
    if rc != 0:
        raise RuntimeError(f"gostore: setting up the store failed ({rc}); configuration {dict(cfg)}")
    return store


def leading(hits: Iterable[bool]) -> int:
    """How many of ``hits`` are true before the first false: the prefix an
    engine can use (a KV prefix is only as long as its first miss)."""
    return sum(1 for _ in itertools.takewhile(bool, hits))
