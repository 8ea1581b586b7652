package wire

import (
	"errors"
	"fmt"
)

// Code is a Mooncake error code. The numbers are part of the Python contract
// (PYTHON_API.md) and travel unchanged from the master through the client and
// the C ABI to gostore.ErrorCode.
type Code int32

const (
	OK                          Code = 0
	ErrInternal                 Code = -1
	ErrBufferOverflow           Code = -10
	ErrSegmentNotFound          Code = -101
	ErrSegmentAlreadyExists     Code = -102
	ErrClientNotFound           Code = -103
	ErrNoAvailableHandle        Code = -200
	ErrInvalidVersion           Code = -300
	ErrInvalidKey               Code = -400
	ErrWriteFail                Code = -500
	ErrInvalidParams            Code = -600
	ErrIllegalClient            Code = -601
	ErrInvalidWrite             Code = -700
	ErrInvalidRead              Code = -701
	ErrInvalidReplica           Code = -702
	ErrReplicaIsNotReady        Code = -703
	ErrObjectNotFound           Code = -704
	ErrObjectAlreadyExists      Code = -705
	ErrObjectHasLease           Code = -706
	ErrLeaseExpired             Code = -707
	ErrObjectHasReplicationTask Code = -708
	ErrObjectNoReplicationTask  Code = -709
	ErrReplicaNotFound          Code = -710
	ErrReplicaAlreadyExists     Code = -711
	ErrReplicaIsGone            Code = -712
	ErrObjectReplicaBusy        Code = -714
	ErrTransferFail             Code = -800
	ErrChecksumMismatch         Code = -801
	ErrRPCFail                  Code = -900
	ErrRPCTimeout               Code = -901
	ErrEtcdOperation            Code = -1000
	ErrEtcdKeyNotExist          Code = -1001
	ErrEtcdTransactionFail      Code = -1002
	ErrFileNotFound             Code = -1100
	ErrFileOpenFail             Code = -1101
	ErrFileReadFail             Code = -1102
	ErrFileWriteFail            Code = -1103
	ErrFileInvalidBuffer        Code = -1104
	ErrBucketNotFound           Code = -1200
	ErrUnableOffload            Code = -1300
	ErrTenantQuotaExceeded      Code = -1700
	ErrTenantNotRegistered      Code = -1701
)

var codeNames = map[Code]string{
	OK: "OK", ErrInternal: "INTERNAL_ERROR", ErrBufferOverflow: "BUFFER_OVERFLOW",
	ErrSegmentNotFound: "SEGMENT_NOT_FOUND", ErrSegmentAlreadyExists: "SEGMENT_ALREADY_EXISTS",
	ErrClientNotFound: "CLIENT_NOT_FOUND", ErrNoAvailableHandle: "NO_AVAILABLE_HANDLE",
	ErrInvalidVersion: "INVALID_VERSION", ErrInvalidKey: "INVALID_KEY", ErrWriteFail: "WRITE_FAIL",
	ErrInvalidParams: "INVALID_PARAMS", ErrIllegalClient: "ILLEGAL_CLIENT",
	ErrInvalidWrite: "INVALID_WRITE", ErrInvalidRead: "INVALID_READ", ErrInvalidReplica: "INVALID_REPLICA",
	ErrReplicaIsNotReady: "REPLICA_IS_NOT_READY", ErrObjectNotFound: "OBJECT_NOT_FOUND",
	ErrObjectAlreadyExists: "OBJECT_ALREADY_EXISTS", ErrObjectHasLease: "OBJECT_HAS_LEASE",
	ErrLeaseExpired: "LEASE_EXPIRED", ErrObjectHasReplicationTask: "OBJECT_HAS_REPLICATION_TASK",
	ErrObjectNoReplicationTask: "OBJECT_NO_REPLICATION_TASK", ErrReplicaNotFound: "REPLICA_NOT_FOUND",
	ErrReplicaAlreadyExists: "REPLICA_ALREADY_EXISTS", ErrReplicaIsGone: "REPLICA_IS_GONE",
	ErrObjectReplicaBusy: "OBJECT_REPLICA_BUSY", ErrTransferFail: "TRANSFER_FAIL",
	ErrChecksumMismatch: "CHECKSUM_MISMATCH", ErrRPCFail: "RPC_FAIL", ErrRPCTimeout: "RPC_TIMEOUT",
	ErrEtcdOperation: "ETCD_OPERATION_ERROR", ErrEtcdKeyNotExist: "ETCD_KEY_NOT_EXIST",
	ErrEtcdTransactionFail: "ETCD_TRANSACTION_FAIL", ErrFileNotFound: "FILE_NOT_FOUND",
	ErrFileOpenFail: "FILE_OPEN_FAIL", ErrFileReadFail: "FILE_READ_FAIL",
	ErrFileWriteFail: "FILE_WRITE_FAIL", ErrFileInvalidBuffer: "FILE_INVALID_BUFFER",
	ErrBucketNotFound: "BUCKET_NOT_FOUND", ErrUnableOffload: "UNABLE_OFFLOAD",
	ErrTenantQuotaExceeded: "TENANT_QUOTA_EXCEEDED", ErrTenantNotRegistered: "TENANT_NOT_REGISTERED",
}

// String returns the contract's name of the code, e.g. "OBJECT_NOT_FOUND".
func (c Code) String() string {
	if n, ok := codeNames[c]; ok {
		return n
	}
	return fmt.Sprintf("CODE(%d)", int32(c))
}

// Known reports whether c is one of the contract's codes.
func (c Code) Known() bool { _, ok := codeNames[c]; return ok }

// Error is an error that carries a contract code. Functions anywhere in
// gostore return it (possibly wrapped with %w) so that the number reaches
// Python without string matching.
type Error struct {
	Code Code
	Msg  string
}

func (e *Error) Error() string {
	if e.Msg == "" {
		return e.Code.String()
	}
	return e.Code.String() + ": " + e.Msg
}

// Is makes errors.Is(err, wire.ErrObjectNotFound.Err()) match on the code alone.
func (e *Error) Is(target error) bool {
	t, ok := target.(*Error)
	return ok && t.Code == e.Code
}

// Err returns an *Error for c without a message; nil for OK.
func (c Code) Err() error {
	if c == OK {
		return nil
	}
	return &Error{Code: c}
}

// Errorf returns an *Error for c with a formatted message.
func Errorf(c Code, format string, args ...any) error {
	return &Error{Code: c, Msg: fmt.Sprintf(format, args...)}
}

// Coded is an error of another package that knows its contract code (the
// storage package's sentinels): CodeOf reads it through any wrapping.
type Coded interface {
	error
	WireCode() Code
}

// CodeOf extracts the contract code from err: OK for nil, the carried code
// for a (wrapped) *Error or Coded error, ErrInternal for anything else. It
// is the one mapping from errors to codes.
func CodeOf(err error) Code {
	if err == nil {
		return OK
	}
	var e *Error
	if errors.As(err, &e) {
		return e.Code
	}
	var c Coded
	if errors.As(err, &c) {
		return c.WireCode()
	}
	return ErrInternal
}

// Fill sets every entry of out to v (a whole batch failing one way) and
// returns out.
func Fill[T any](out []T, v T) []T {
	for i := range out {
		out[i] = v
	}
	return out
}
