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

func encodeStrings(e *msgpack.Encoder, ss []string) error {
	if err := e.EncodeArrayLen(len(ss)); err != nil {
		return err
	}
	for _, s := range ss {
		if err := e.EncodeString(s); err != nil {
			return err
		}
	}
	return nil
}

func decodeStrings(d *msgpack.Decoder) ([]string, error) {
	n, err := d.DecodeArrayLen()
	if err != nil || n <= 0 {
		return nil, err
	}
	out := make([]string, 0, allocCap(n))
	for range n {
		v, err := d.DecodeString()
		if err != nil {
			return nil, err
		}
		out = append(out, v)
	}
	return out, nil
}

func encodeUints(e *msgpack.Encoder, vs []uint64) error {
	if err := e.EncodeArrayLen(len(vs)); err != nil {
		return err
	}
	for _, v := range vs {
		if err := e.EncodeUint(v); err != nil {
			return err
		}
	}
	return nil
}

func decodeUints(d *msgpack.Decoder) ([]uint64, error) {
	n, err := d.DecodeArrayLen()
	if err != nil || n <= 0 {
		return nil, err
	}
	out := make([]uint64, 0, allocCap(n))
	for range n {
		v, err := d.DecodeUint64()
		if err != nil {
			return nil, err
		}
		out = append(out, v)
	}
	return out, nil
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
	if err := e.EncodeArrayLen(4); err != nil {
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
	return e.EncodeBool(m.ForRead)
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
	return skipRest(d, n, 4)
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
	if err := e.EncodeArrayLen(5); err != nil {
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
	return e.EncodeString(m.HostID)
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
	return skipRest(d, n, 5)
}

func encodeReplicas(e *msgpack.Encoder, rs []Replica) error {
	if err := e.EncodeArrayLen(len(rs)); err != nil {
		return err
	}
	for _, r := range rs {
		if err := e.EncodeArrayLen(2); err != nil {
			return err
		}
		if err := e.EncodeUint(r.SegID); err != nil {
			return err
		}
		if err := e.EncodeUint(r.Offset); err != nil {
			return err
		}
	}
	return nil
}

func decodeReplicas(d *msgpack.Decoder) ([]Replica, error) {
	n, err := d.DecodeArrayLen()
	if err != nil || n <= 0 {
		return nil, err
	}
	out := make([]Replica, 0, allocCap(n))
	for range n {
		m, err := arrayOf(d, 2)
		if err != nil {
			return nil, err
		}
		var r Replica
		if r.SegID, err = d.DecodeUint64(); err != nil {
			return nil, err
		}
		if r.Offset, err = d.DecodeUint64(); err != nil {
			return nil, err
		}
		if err := skipRest(d, m, 2); err != nil {
			return nil, err
		}
		out = append(out, r)
	}
	return out, nil
}

func (m *PutStartResp) EncodeMsgpack(e *msgpack.Encoder) error {
	if err := e.EncodeArrayLen(1); err != nil {
		return err
	}
	if err := e.EncodeArrayLen(len(m.Results)); err != nil {
		return err
	}
	for _, r := range m.Results {
		if err := e.EncodeArrayLen(3); err != nil {
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
	}
	return nil
}

func (m *PutStartResp) DecodeMsgpack(d *msgpack.Decoder) error {
	n, err := arrayOf(d, 1)
	if err != nil {
		return err
	}
	k, err := d.DecodeArrayLen()
	if err != nil {
		return err
	}
	m.Results = make([]PutStartResult, 0, allocCap(k))
	for range k {
		f, err := arrayOf(d, 3)
		if err != nil {
			return err
		}
		m.Results = append(m.Results, PutStartResult{})
		r := &m.Results[len(m.Results)-1]
		code, err := d.DecodeInt32()
		if err != nil {
			return err
		}
		r.Code = Code(code)
		if r.Replicas, err = decodeReplicas(d); err != nil {
			return err
		}
		if r.Epoch, err = d.DecodeUint64(); err != nil {
			return err
		}
		if err := skipRest(d, f, 3); err != nil {
			return err
		}
	}
	return skipRest(d, n, 1)
}

func (m *GetReplicasResp) EncodeMsgpack(e *msgpack.Encoder) error {
	if err := e.EncodeArrayLen(1); err != nil {
		return err
	}
	if err := e.EncodeArrayLen(len(m.Results)); err != nil {
		return err
	}
	for _, r := range m.Results {
		if err := e.EncodeArrayLen(5); err != nil {
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
	}
	return nil
}

func (m *GetReplicasResp) DecodeMsgpack(d *msgpack.Decoder) error {
	n, err := arrayOf(d, 1)
	if err != nil {
		return err
	}
	k, err := d.DecodeArrayLen()
	if err != nil {
		return err
	}
	m.Results = make([]GetResult, 0, allocCap(k))
	for range k {
		f, err := arrayOf(d, 5)
		if err != nil {
			return err
		}
		m.Results = append(m.Results, GetResult{})
		r := &m.Results[len(m.Results)-1]
		code, err := d.DecodeInt32()
		if err != nil {
			return err
		}
		r.Code = Code(code)
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
		if err := skipRest(d, f, 5); err != nil {
			return err
		}
	}
	return skipRest(d, n, 1)
}

func (m *CodesResp) EncodeMsgpack(e *msgpack.Encoder) error {
	if err := e.EncodeArrayLen(1); err != nil {
		return err
	}
	if err := e.EncodeArrayLen(len(m.Codes)); err != nil {
		return err
	}
	for _, c := range m.Codes {
		if err := e.EncodeInt(int64(c)); err != nil {
			return err
		}
	}
	return nil
}

func (m *CodesResp) DecodeMsgpack(d *msgpack.Decoder) error {
	n, err := arrayOf(d, 1)
	if err != nil {
		return err
	}
	k, err := d.DecodeArrayLen()
	if err != nil {
		return err
	}
	m.Codes = make([]Code, 0, allocCap(k))
	for range k {
		c, err := d.DecodeInt32()
		if err != nil {
			return err
		}
		m.Codes = append(m.Codes, Code(c))
	}
	return skipRest(d, n, 1)
}
