// codec.go hand-writes the msgpack encoding of the hot messages.

package wire

import (
	"fmt"

	"github.com/vmihailenco/msgpack/v5"
)

// The messages on every put and get path implement msgpack's CustomEncoder
// and CustomDecoder with exactly the array layout the struct tags describe,
// so the bytes are unchanged; they skip reflection and its type-cache
// lookups, which were a fifth of the master's CPU on batched puts.

// encodeList writes xs as an array, one element with each.
func encodeList[T any](e *msgpack.Encoder, xs []T, each func(T) error) error {
	if err := e.EncodeArrayLen(len(xs)); err != nil {
		return err
	}
	for _, x := range xs {
		if err := each(x); err != nil {
			return err
		}
	}
	return nil
}

// decodeList reads an array, one element with each; the slice grows as
// elements arrive (see allocCap). A nil or empty array gives nil.
func decodeList[T any](d *msgpack.Decoder, each func(*T) error) ([]T, error) {
	n, err := d.DecodeArrayLen()
	if err != nil || n <= 0 {
		return nil, err
	}
	out := make([]T, 0, allocCap(n))
	for range n {
		var v T
		if err := each(&v); err != nil {
			return nil, err
		}
		out = append(out, v)
	}
	return out, nil
}

func encodeStrings(e *msgpack.Encoder, ss []string) error {
	return encodeList(e, ss, e.EncodeString)
}

func decodeStrings(d *msgpack.Decoder) ([]string, error) {
	return decodeList(d, func(v *string) (err error) { *v, err = d.DecodeString(); return })
}

func encodeUints(e *msgpack.Encoder, vs []uint64) error {
	return encodeList(e, vs, e.EncodeUint)
}

func decodeUints(d *msgpack.Decoder) ([]uint64, error) {
	return decodeList(d, func(v *uint64) (err error) { *v, err = d.DecodeUint64(); return })
}

// allocCap bounds what a length read from a peer may allocate up front; a
// longer list grows as its elements actually arrive, so a 30-byte frame
// claiming 4 billion elements fails on the missing bytes, not by exhausting
// memory (which no recover() could catch).
func allocCap(n int) int { return max(0, min(n, 1<<12)) }

// arrayOf reads an array header and checks it has at least want fields;
// extra trailing fields (from a newer peer) are skipped by skipRest.
func arrayOf(d *msgpack.Decoder, want int) (int, error) {
	n, err := d.DecodeArrayLen()
	if err != nil {
		return 0, err
	}
	if n < want {
		return 0, errShortArray(n, want)
	}
	return n, nil
}

func skipRest(d *msgpack.Decoder, n, used int) error {
	for ; used < n; used++ {
		if err := d.Skip(); err != nil {
			return err
		}
	}
	return nil
}

type shortArray struct{ got, want int }

func (s shortArray) Error() string {
	return fmt.Sprintf("msgpack array of %d fields, the message needs %d", s.got, s.want)
}

func errShortArray(got, want int) error { return shortArray{got, want} }

var (
	_ msgpack.CustomEncoder = (*KeysReq)(nil)
	_ msgpack.CustomDecoder = (*KeysReq)(nil)
)

func (m *KeysReq) EncodeMsgpack(e *msgpack.Encoder) error {
	if err := e.EncodeArrayLen(6 + hasTenant(m.Tenant)); err != nil {
		return err
	}
	if err := e.EncodeString(m.ClientID); err != nil {
		return err
	}
	if err := encodeStrings(e, m.Keys); err != nil {
		return err
	}
	if err := encodeUints(e, m.Epochs); err != nil {
		return err
	}
	if err := e.EncodeBool(m.ForRead); err != nil {
		return err
	}
	if err := e.EncodeBool(m.Peek); err != nil {
		return err
	}
	if err := e.EncodeUint(m.HoldMS); err != nil {
		return err
	}
	return encodeTenant(e, m.Tenant)
}

// hasTenant is 1 when a request names a tenant: the field goes last and
// only then, so a request of the default tenant is the bytes it was before
// tenants (and an older master reads it as it did).
func hasTenant(t string) int {
	if t == "" {
		return 0
	}
	return 1
}

func encodeTenant(e *msgpack.Encoder, t string) error {
	if t == "" {
		return nil
	}
	return e.EncodeString(t)
}

func (m *KeysReq) DecodeMsgpack(d *msgpack.Decoder) error {
	n, err := arrayOf(d, 4)
	if err != nil {
		return err
	}
	if m.ClientID, err = d.DecodeString(); err != nil {
		return err
	}
	if m.Keys, err = decodeStrings(d); err != nil {
		return err
	}
	if m.Epochs, err = decodeUints(d); err != nil {
		return err
	}
	if m.ForRead, err = d.DecodeBool(); err != nil {
		return err
	}
	used := 4
	if n > 4 { // Peek came later: older peers send four fields
		if m.Peek, err = d.DecodeBool(); err != nil {
			return err
		}
		used++
	}
	if n > 5 { // HoldMS came later still
		if m.HoldMS, err = d.DecodeUint64(); err != nil {
			return err
		}
		used++
	}
	if n > 6 { // Tenant: only when not the default
		if m.Tenant, err = d.DecodeString(); err != nil {
			return err
		}
		used++
	}
	return skipRest(d, n, used)
}

func (m *ReplicaConfig) EncodeMsgpack(e *msgpack.Encoder) error {
	if err := e.EncodeArrayLen(5); err != nil {
		return err
	}
	if err := e.EncodeInt(int64(m.ReplicaNum)); err != nil {
		return err
	}
	if err := e.EncodeBool(m.SoftPin); err != nil {
		return err
	}
	if err := e.EncodeBool(m.HardPin); err != nil {
		return err
	}
	if err := encodeStrings(e, m.Preferred); err != nil {
		return err
	}
	return e.EncodeBool(m.SameNode)
}

func (m *ReplicaConfig) DecodeMsgpack(d *msgpack.Decoder) error {
	n, err := arrayOf(d, 5)
	if err != nil {
		return err
	}
	if m.ReplicaNum, err = d.DecodeInt(); err != nil {
		return err
	}
	if m.SoftPin, err = d.DecodeBool(); err != nil {
		return err
	}
	if m.HardPin, err = d.DecodeBool(); err != nil {
		return err
	}
	if m.Preferred, err = decodeStrings(d); err != nil {
		return err
	}
	if m.SameNode, err = d.DecodeBool(); err != nil {
		return err
	}
	return skipRest(d, n, 5)
}

func (m *PutStartReq) EncodeMsgpack(e *msgpack.Encoder) error {
	if err := e.EncodeArrayLen(5 + hasTenant(m.Tenant)); err != nil {
		return err
	}
	if err := e.EncodeString(m.ClientID); err != nil {
		return err
	}
	if err := encodeStrings(e, m.Keys); err != nil {
		return err
	}
	if err := encodeUints(e, m.Sizes); err != nil {
		return err
	}
	if err := m.Config.EncodeMsgpack(e); err != nil {
		return err
	}
	if err := e.EncodeString(m.HostID); err != nil {
		return err
	}
	return encodeTenant(e, m.Tenant)
}

func (m *PutStartReq) DecodeMsgpack(d *msgpack.Decoder) error {
	n, err := arrayOf(d, 5)
	if err != nil {
		return err
	}
	if m.ClientID, err = d.DecodeString(); err != nil {
		return err
	}
	if m.Keys, err = decodeStrings(d); err != nil {
		return err
	}
	if m.Sizes, err = decodeUints(d); err != nil {
		return err
	}
	if err = m.Config.DecodeMsgpack(d); err != nil {
		return err
	}
	if m.HostID, err = d.DecodeString(); err != nil {
		return err
	}
	if n > 5 {
		if m.Tenant, err = d.DecodeString(); err != nil {
			return err
		}
		return skipRest(d, n, 6)
	}
	return skipRest(d, n, 5)
}

var (
	_ msgpack.CustomEncoder = (*Replica)(nil)
	_ msgpack.CustomDecoder = (*Replica)(nil)
	_ msgpack.CustomDecoder = (*MountReq)(nil)
	_ msgpack.CustomEncoder = SegmentDesc{}
	_ msgpack.CustomDecoder = (*SegmentDesc)(nil)
)

// EncodeMsgpack writes a replica as three fields; Grant came later, and an
// empty one is written as nil.
func (r *Replica) EncodeMsgpack(e *msgpack.Encoder) error {
	if err := e.EncodeArrayLen(3); err != nil {
		return err
	}
	if err := e.EncodeUint(r.SegID); err != nil {
		return err
	}
	if err := e.EncodeUint(r.Offset); err != nil {
		return err
	}
	if len(r.Grant) == 0 {
		return e.EncodeNil()
	}
	return e.EncodeBytes(r.Grant)
}

// DecodeMsgpack reads a replica of two fields (an older master's: no
// grant) or more.
func (r *Replica) DecodeMsgpack(d *msgpack.Decoder) error {
	m, err := arrayOf(d, 2)
	if err != nil {
		return err
	}
	if r.SegID, err = d.DecodeUint64(); err != nil {
		return err
	}
	if r.Offset, err = d.DecodeUint64(); err != nil {
		return err
	}
	r.Grant = nil
	if m < 3 {
		return nil
	}
	if r.Grant, err = d.DecodeBytes(); err != nil {
		return err
	}
	if len(r.Grant) == 0 {
		r.Grant = nil // one form for "none", so values survive a round trip
	}
	return skipRest(d, m, 3)
}

func encodeReplicas(e *msgpack.Encoder, rs []Replica) error {
	return encodeList(e, rs, func(r Replica) error { return r.EncodeMsgpack(e) })
}

func decodeReplicas(d *msgpack.Decoder) ([]Replica, error) {
	return decodeList(d, func(r *Replica) error { return r.DecodeMsgpack(d) })
}

// DecodeMsgpack reads a MountReq of one field (an older client's: no
// grant key) or more. It is encoded by reflection.
func (m *MountReq) DecodeMsgpack(d *msgpack.Decoder) error {
	n, err := arrayOf(d, 1)
	if err != nil {
		return err
	}
	if err := d.Decode(&m.Seg); err != nil {
		return err
	}
	m.GrantKey = nil
	if n < 2 {
		return nil
	}
	if m.GrantKey, err = d.DecodeBytes(); err != nil {
		return err
	}
	if len(m.GrantKey) == 0 {
		m.GrantKey = nil
	}
	return skipRest(d, n, 2)
}

// segmentDescFields is how many fields a SegmentDesc had before UCX: what
// older clients send and older journals and states hold.
const segmentDescFields = 12

// EncodeMsgpack (a value receiver: State holds descs in a map) writes a
// SegmentDesc as reflection would, in 12 fields
// when it has no UCX desc: the bytes of such a desc stay those journals
// and older peers know, and an older master still reads it.
func (s SegmentDesc) EncodeMsgpack(e *msgpack.Encoder) error {
	n := segmentDescFields
	if len(s.UCX) > 0 {
		n++
	}
	if err := e.EncodeArrayLen(n); err != nil {
		return err
	}
	for _, f := range [...]func() error{
		func() error { return e.EncodeUint64(s.ID) },
		func() error { return e.EncodeString(s.Name) },
		func() error { return e.EncodeString(s.ClientID) },
		func() error { return e.EncodeUint64(s.Size) },
		func() error { return e.EncodeString(s.HostID) },
		func() error { return e.EncodeString(s.ShmPath) },
		func() error { return e.EncodeString(s.TransferAddr) },
		func() error { return e.EncodeBool(s.Offload) },
		func() error { return e.EncodeString(s.Location) },
		func() error { return e.EncodeBytes(s.IPC) },
		func() error { return e.EncodeString(s.GPUPCI) },
		func() error { return e.EncodeUint64(s.Base) },
	} {
		if err := f(); err != nil {
			return err
		}
	}
	if n > segmentDescFields {
		return e.EncodeBytes(s.UCX)
	}
	return nil
}

// DecodeMsgpack reads a SegmentDesc of 12 fields (from before UCX) or
// more; msgpack's reflection wants the exact count. A nil decodes as the
// zero desc, as reflection does; an empty UCX desc as none.
func (s *SegmentDesc) DecodeMsgpack(d *msgpack.Decoder) error {
	n, err := d.DecodeArrayLen()
	if err != nil {
		return err
	}
	*s = SegmentDesc{}
	if n == -1 {
		return nil
	}
	if n < segmentDescFields {
		return errShortArray(n, segmentDescFields)
	}
	for _, f := range [...]func() error{
		func() (err error) { s.ID, err = d.DecodeUint64(); return },
		func() (err error) { s.Name, err = d.DecodeString(); return },
		func() (err error) { s.ClientID, err = d.DecodeString(); return },
		func() (err error) { s.Size, err = d.DecodeUint64(); return },
		func() (err error) { s.HostID, err = d.DecodeString(); return },
		func() (err error) { s.ShmPath, err = d.DecodeString(); return },
		func() (err error) { s.TransferAddr, err = d.DecodeString(); return },
		func() (err error) { s.Offload, err = d.DecodeBool(); return },
		func() (err error) { s.Location, err = d.DecodeString(); return },
		func() (err error) { s.IPC, err = d.DecodeBytes(); return },
		func() (err error) { s.GPUPCI, err = d.DecodeString(); return },
		func() (err error) { s.Base, err = d.DecodeUint64(); return },
	} {
		if err := f(); err != nil {
			return err
		}
	}
	if n == segmentDescFields {
		return nil
	}
	if s.UCX, err = d.DecodeBytes(); err != nil {
		return err
	}
	if len(s.UCX) == 0 {
		s.UCX = nil
	}
	return skipRest(d, n, segmentDescFields+1)
}

// A response is a one-field array holding its list of results.

func (m *PutStartResp) EncodeMsgpack(e *msgpack.Encoder) error {
	if err := e.EncodeArrayLen(1); err != nil {
		return err
	}
	return encodeList(e, m.Results, func(r PutStartResult) error {
		if err := e.EncodeArrayLen(4); err != nil {
			return err
		}
		if err := e.EncodeInt(int64(r.Code)); err != nil {
			return err
		}
		if err := encodeReplicas(e, r.Replicas); err != nil {
			return err
		}
		if err := e.EncodeUint(r.Epoch); err != nil {
			return err
		}
		if r.NoSpace == nil {
			return e.EncodeNil()
		}
		return e.Encode(r.NoSpace) // refusals only: reflection is fine
	})
}

func (m *PutStartResp) DecodeMsgpack(d *msgpack.Decoder) error {
	n, err := arrayOf(d, 1)
	if err != nil {
		return err
	}
	m.Results, err = decodeList(d, func(r *PutStartResult) error {
		f, err := arrayOf(d, 3)
		if err != nil {
			return err
		}
		if r.Code, err = decodeCode(d); err != nil {
			return err
		}
		if r.Replicas, err = decodeReplicas(d); err != nil {
			return err
		}
		if r.Epoch, err = d.DecodeUint64(); err != nil {
			return err
		}
		if f < 4 { // an older master's three fields
			return skipRest(d, f, 3)
		}
		if err := d.Decode(&r.NoSpace); err != nil {
			return err
		}
		return skipRest(d, f, 4)
	})
	if err != nil {
		return err
	}
	return skipRest(d, n, 1)
}

func (m *GetReplicasResp) EncodeMsgpack(e *msgpack.Encoder) error {
	if err := e.EncodeArrayLen(1); err != nil {
		return err
	}
	return encodeList(e, m.Results, func(r GetResult) error {
		if err := e.EncodeArrayLen(7); err != nil {
			return err
		}
		if err := e.EncodeInt(int64(r.Code)); err != nil {
			return err
		}
		if err := e.EncodeUint(r.Size); err != nil {
			return err
		}
		if err := encodeReplicas(e, r.Replicas); err != nil {
			return err
		}
		if err := e.EncodeInt(r.LeaseMS); err != nil {
			return err
		}
		if err := e.EncodeUint(r.Epoch); err != nil {
			return err
		}
		if err := e.EncodeString(r.Disk); err != nil {
			return err
		}
		return e.EncodeUint(r.Placed)
	})
}

func (m *GetReplicasResp) DecodeMsgpack(d *msgpack.Decoder) error {
	n, err := arrayOf(d, 1)
	if err != nil {
		return err
	}
	m.Results, err = decodeList(d, func(r *GetResult) error {
		f, err := arrayOf(d, 6)
		if err != nil {
			return err
		}
		if r.Code, err = decodeCode(d); err != nil {
			return err
		}
		if r.Size, err = d.DecodeUint64(); err != nil {
			return err
		}
		if r.Replicas, err = decodeReplicas(d); err != nil {
			return err
		}
		if r.LeaseMS, err = d.DecodeInt64(); err != nil {
			return err
		}
		if r.Epoch, err = d.DecodeUint64(); err != nil {
			return err
		}
		if r.Disk, err = d.DecodeString(); err != nil {
			return err
		}
		if f < 7 { // an older master's six fields: no Placed
			return skipRest(d, f, 6)
		}
		if r.Placed, err = d.DecodeUint64(); err != nil {
			return err
		}
		return skipRest(d, f, 7)
	})
	if err != nil {
		return err
	}
	return skipRest(d, n, 1)
}

func (m *CodesResp) EncodeMsgpack(e *msgpack.Encoder) error {
	if err := e.EncodeArrayLen(1); err != nil {
		return err
	}
	return encodeList(e, m.Codes, func(c Code) error { return e.EncodeInt(int64(c)) })
}

func (m *CodesResp) DecodeMsgpack(d *msgpack.Decoder) error {
	n, err := arrayOf(d, 1)
	if err != nil {
		return err
	}
	if m.Codes, err = decodeList(d, func(c *Code) (err error) { *c, err = decodeCode(d); return }); err != nil {
		return err
	}
	return skipRest(d, n, 1)
}

func decodeCode(d *msgpack.Decoder) (Code, error) {
	c, err := d.DecodeInt32()
	return Code(c), err
}

// The requests below keep msgpack's reflection encoding (they are not on a
// hot path; the bytes are unchanged) but are decoded by hand: each carries
// a []uint64 that a peer sizes, and msgpack v5.4.x's reflection decoder
// allocates a non-string slice at its declared length before reading an
// element (its sliceAllocLimit is never applied: decode_slice.go compares
// a flag with 1, vmihailenco/msgpack#401), so a 24-byte frame claiming
// four billion IDs asked for 32 GiB and took the process down. Like the
// messages above, they need every field (extra ones are skipped).

var (
	_ msgpack.CustomDecoder = (*QuerySegmentsReq)(nil)
	_ msgpack.CustomDecoder = (*NotifyOffloadedReq)(nil)
	_ msgpack.CustomDecoder = (*RecoverDiskReq)(nil)
	_ msgpack.CustomDecoder = (*StageReq)(nil)
)

func (m *QuerySegmentsReq) DecodeMsgpack(d *msgpack.Decoder) error {
	return decodeFields(d, uints(&m.IDs))
}

func (m *NotifyOffloadedReq) DecodeMsgpack(d *msgpack.Decoder) error {
	return decodeFields(d, str(&m.ClientID), str(&m.Endpoint), strs(&m.Keys), uints(&m.Sizes),
		str(&m.StorageID), uints(&m.Epochs))
}

func (m *RecoverDiskReq) DecodeMsgpack(d *msgpack.Decoder) error {
	return decodeFields(d, str(&m.ClientID), str(&m.Endpoint), str(&m.StorageID), strs(&m.Keys),
		uints(&m.Sizes))
}

// StageReq is served by a client's SSD tier to its peers (not the master),
// with the same exposure.
func (m *StageReq) DecodeMsgpack(d *msgpack.Decoder) error {
	return decodeFields(d, strs(&m.Keys), uints(&m.Sizes))
}

// decodeFields decodes an array of at least len(fields) values, one field
// decoder each, skipping any extra ones. (The hot messages above spell
// their fields out: these closures cost an allocation each.)
func decodeFields(d *msgpack.Decoder, fields ...func(*msgpack.Decoder) error) error {
	n, err := arrayOf(d, len(fields))
	if err != nil {
		return err
	}
	for _, f := range fields {
		if err := f(d); err != nil {
			return err
		}
	}
	return skipRest(d, n, len(fields))
}

func str(p *string) func(*msgpack.Decoder) error {
	return func(d *msgpack.Decoder) (err error) { *p, err = d.DecodeString(); return }
}

func strs(p *[]string) func(*msgpack.Decoder) error {
	return func(d *msgpack.Decoder) (err error) { *p, err = decodeStrings(d); return }
}

func uints(p *[]uint64) func(*msgpack.Decoder) error {
	return func(d *msgpack.Decoder) (err error) { *p, err = decodeUints(d); return }
}

// PingResp and OffloadHeartbeatResp grew trailing fields (PingResp's
// MultiTenants and Tasks: tenantcodec.go; OffloadHeartbeatResp's Promote).
// msgpack's reflection codec refuses an array-encoded struct whose field
// count differs from its own, so an older peer could not read a newer one
// (or the reverse). These codecs write the older field count while the new
// list is empty, so an older peer reads what a newer master sends with the
// features off, and read any count from the older one's up.

var (
	_ msgpack.CustomEncoder = (*OffloadHeartbeatResp)(nil)
	_ msgpack.CustomDecoder = (*OffloadHeartbeatResp)(nil)
)

// offloadHeartbeatRespFields is OffloadHeartbeatResp's field count before
// Promote.
const offloadHeartbeatRespFields = 3

func (m *OffloadHeartbeatResp) EncodeMsgpack(e *msgpack.Encoder) error {
	n := offloadHeartbeatRespFields
	if len(m.Promote) > 0 {
		n++
	}
	if err := e.EncodeArrayLen(n); err != nil {
		return err
	}
	if err := encodeStrings(e, m.Keys); err != nil {
		return err
	}
	if err := encodeUints(e, m.Sizes); err != nil {
		return err
	}
	if err := encodeStrings(e, m.Drop); err != nil {
		return err
	}
	if n == offloadHeartbeatRespFields {
		return nil
	}
	return encodeList(e, m.Promote, func(t PromotionTask) error { return e.Encode(&t) })
}

func (m *OffloadHeartbeatResp) DecodeMsgpack(d *msgpack.Decoder) error {
	n, err := arrayOf(d, offloadHeartbeatRespFields)
	if err != nil {
		return err
	}
	if m.Keys, err = decodeStrings(d); err != nil {
		return err
	}
	if m.Sizes, err = decodeUints(d); err != nil {
		return err
	}
	if m.Drop, err = decodeStrings(d); err != nil {
		return err
	}
	m.Promote = nil
	if n == offloadHeartbeatRespFields {
		return nil
	}
	if m.Promote, err = decodeList(d, func(t *PromotionTask) error { return d.Decode(t) }); err != nil {
		return err
	}
	return skipRest(d, n, offloadHeartbeatRespFields+1)
}
