// old.go defines the earlier forms of wire messages.

package wiretest

// SegmentDescBeforeUCX is wire.SegmentDesc as it was before its UCX field
// (12 fields): what older clients send and older journal records and
// states hold.
type SegmentDescBeforeUCX struct {
	_msgpack     struct{} `msgpack:",as_array"`
	ID           uint64
	Name         string
	ClientID     string
	Size         uint64
	HostID       string
	ShmPath      string
	TransferAddr string
	Offload      bool
	Location     string
	IPC          []byte
	GPUPCI       string
	Base         uint64
}
