"""``MooncakeDistributedNoFRegister``: Mooncake's registration of NVMe over
Fabrics SSD segments with the master.

gostore has no NVMe-oF transport (its SSD tier is each client's local
disk, see ``setup``'s ``ssd_offload_path``), so both calls log why and fail
with Mooncake's ``OPERATION_FAILED`` (-1); the class is here so code that
names it imports and learns that at run time, not at import.
"""

from __future__ import annotations

import logging

__all__ = ["MooncakeDistributedNoFRegister"]

_log = logging.getLogger("gostore")
OPERATION_FAILED = -1


class MooncakeDistributedNoFRegister:
    """Mooncake's NVMe-oF segment registrar; unsupported here (see the module)."""

    def real_register(self, nqn: str = "", nsid: int = 1, traddr: str = "", trsvcid: int = 4420,
                      base: int = 0, size: int = 1024, master_server_addr: str = "127.0.0.1:50051") -> int:
        _log.error("NVMe-oF segment %s ns %d at %s:%d not registered: gostore has no NVMe-oF transport",
                   nqn, nsid, traddr, trsvcid)
        return OPERATION_FAILED

    def real_unregister_by_endpoint(self, nqn: str = "", nsid: int = 1, traddr: str = "", trsvcid: int = 4420,
                                    master_server_addr: str = "127.0.0.1:50051") -> int:
        _log.error("NVMe-oF segment %s ns %d at %s:%d not unregistered: gostore has no NVMe-oF transport",
                   nqn, nsid, traddr, trsvcid)
        return OPERATION_FAILED
