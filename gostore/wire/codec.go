// codec.go hand-writes the msgpack encoding of the hot messages.
package wire

import "github.com/vmihailenco/msgpack/v5"

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
	out := make([]string, n)
	for i := range out {
		if out[i], err = d.DecodeString(); err != nil {
			return nil, err
		}
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
	out := make([]uint64, n)
	for i := range out {
		if out[i], err = d.DecodeUint64(); err != nil {
			return nil, err
		}
	}
	return out, nil
}

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
	return "msgpack array too short for the message"
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
	out := make([]Replica, n)
	for i := range out {
		m, err := arrayOf(d, 2)
		if err != nil {
			return nil, err
		}
		if out[i].SegID, err = d.DecodeUint64(); err != nil {
			return nil, err
		}
		if out[i].Offset, err = d.DecodeUint64(); err != nil {
			return nil, err
		}
		if err := skipRest(d, m, 2); err != nil {
			return nil, err
		}
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
	m.Results = make([]PutStartResult, max(k, 0))
	for i := range m.Results {
		f, err := arrayOf(d, 3)
		if err != nil {
			return err
		}
		r := &m.Results[i]
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
	m.Results = make([]GetResult, max(k, 0))
	for i := range m.Results {
		f, err := arrayOf(d, 5)
		if err != nil {
			return err
		}
		r := &m.Results[i]
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
	m.Codes = make([]Code, max(k, 0))
	for i := range m.Codes {
		c, err := d.DecodeInt32()
		if err != nil {
			return err
		}
		m.Codes[i] = Code(c)
	}
	return skipRest(d, n, 1)
}
