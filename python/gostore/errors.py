"""Error codes shared with Mooncake.

Every store method returns ``0`` (or a count/size) on success and one of these
negative numbers on failure; the numbers are part of the Python contract and
travel unchanged from the Go side (``gostore/wire``) through the C ABI.
"""

from __future__ import annotations

import enum

__all__ = ["ErrorCode"]


class ErrorCode(enum.IntEnum):
    """Mooncake's error numbers (``ErrorCode.OBJECT_NOT_FOUND == -704``)."""

    OK = 0
    INTERNAL_ERROR = -1
    BUFFER_OVERFLOW = -10
    SEGMENT_NOT_FOUND = -101
    SEGMENT_ALREADY_EXISTS = -102
    CLIENT_NOT_FOUND = -103
    NO_AVAILABLE_HANDLE = -200
    INVALID_VERSION = -300
    INVALID_KEY = -400
    WRITE_FAIL = -500
    INVALID_PARAMS = -600
    ILLEGAL_CLIENT = -601
    INVALID_WRITE = -700
    INVALID_READ = -701
    INVALID_REPLICA = -702
    REPLICA_IS_NOT_READY = -703
    OBJECT_NOT_FOUND = -704
    OBJECT_ALREADY_EXISTS = -705
    OBJECT_HAS_LEASE = -706
    LEASE_EXPIRED = -707
    OBJECT_HAS_REPLICATION_TASK = -708
    OBJECT_NO_REPLICATION_TASK = -709
    REPLICA_NOT_FOUND = -710
    REPLICA_ALREADY_EXISTS = -711
    REPLICA_IS_GONE = -712
    OBJECT_REPLICA_BUSY = -714
    TRANSFER_FAIL = -800
    CHECKSUM_MISMATCH = -801
    RPC_FAIL = -900
    RPC_TIMEOUT = -901
    ETCD_OPERATION_ERROR = -1000
    ETCD_KEY_NOT_EXIST = -1001
    ETCD_TRANSACTION_FAIL = -1002
    FILE_NOT_FOUND = -1100
    FILE_OPEN_FAIL = -1101
    FILE_READ_FAIL = -1102
    FILE_WRITE_FAIL = -1103
    FILE_INVALID_BUFFER = -1104
    BUCKET_NOT_FOUND = -1200
    UNABLE_OFFLOAD = -1300
    TENANT_QUOTA_EXCEEDED = -1700
    TENANT_NOT_REGISTERED = -1701

    @classmethod
    def name_of(cls, code: int) -> str:
        """The contract name of ``code``, or ``"UNKNOWN(<code>)"``."""
        try:
            return cls(code).name
        except ValueError:
            return f"UNKNOWN({code})"
