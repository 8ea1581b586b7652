// tenantcodec.go encodes the requests that carry a tenant, and the ping's
// answer that says whether the master separates tenants, with that field
// last and present only when it says something: a default tenant's
// request (and a master without tenants' answer) is the bytes it was
// before tenants, so older and newer peers read each other.

package wire

import "github.com/vmihailenco/msgpack/v5"

var (
	_ msgpack.CustomEncoder = (*RemoveReq)(nil)
	_ msgpack.CustomDecoder = (*RemoveReq)(nil)
	_ msgpack.CustomEncoder = (*RemoveByRegexReq)(nil)
	_ msgpack.CustomDecoder = (*RemoveByRegexReq)(nil)
	_ msgpack.CustomEncoder = (*RemoveAllReq)(nil)
	_ msgpack.CustomDecoder = (*RemoveAllReq)(nil)
	_ msgpack.CustomEncoder = (*ReplicaClearReq)(nil)
	_ msgpack.CustomDecoder = (*ReplicaClearReq)(nil)
	_ msgpack.CustomEncoder = (*CreateTaskReq)(nil)
	_ msgpack.CustomDecoder = (*CreateTaskReq)(nil)
	_ msgpack.CustomEncoder = (*QueryTaskReq)(nil)
	_ msgpack.CustomDecoder = (*QueryTaskReq)(nil)
	_ msgpack.CustomEncoder = (*PingResp)(nil)
	_ msgpack.CustomDecoder = (*PingResp)(nil)
)

func (m *RemoveReq) EncodeMsgpack(e *msgpack.Encoder) error {
	return encodeTenanted(e, m.Tenant, func() error { return encodeStrings(e, m.Keys) }, func() error { return e.EncodeBool(m.Force) })
}

func (m *RemoveReq) DecodeMsgpack(d *msgpack.Decoder) error {
	return decodeTenanted(d, &m.Tenant, strs(&m.Keys), boolean(&m.Force))
}

func (m *RemoveByRegexReq) EncodeMsgpack(e *msgpack.Encoder) error {
	return encodeTenanted(e, m.Tenant, func() error { return e.EncodeString(m.Pattern) }, func() error { return e.EncodeBool(m.Force) })
}

func (m *RemoveByRegexReq) DecodeMsgpack(d *msgpack.Decoder) error {
	return decodeTenanted(d, &m.Tenant, str(&m.Pattern), boolean(&m.Force))
}

func (m *RemoveAllReq) EncodeMsgpack(e *msgpack.Encoder) error {
	return encodeTenanted(e, m.Tenant, func() error { return e.EncodeBool(m.Force) })
}

func (m *RemoveAllReq) DecodeMsgpack(d *msgpack.Decoder) error {
	return decodeTenanted(d, &m.Tenant, boolean(&m.Force))
}

func (m *ReplicaClearReq) EncodeMsgpack(e *msgpack.Encoder) error {
	return encodeTenanted(e, m.Tenant, func() error { return e.EncodeString(m.ClientID) },
		func() error { return encodeStrings(e, m.Keys) }, func() error { return e.EncodeString(m.Segment) })
}

func (m *ReplicaClearReq) DecodeMsgpack(d *msgpack.Decoder) error {
	return decodeTenanted(d, &m.Tenant, str(&m.ClientID), strs(&m.Keys), str(&m.Segment))
}

func (m *CreateTaskReq) EncodeMsgpack(e *msgpack.Encoder) error {
	return encodeTenanted(e, m.Tenant, func() error { return e.EncodeString(m.ClientID) },
		func() error { return e.EncodeUint(uint64(m.Kind)) }, func() error { return e.EncodeString(m.Key) },
		func() error { return e.EncodeString(m.Source) }, func() error { return encodeStrings(e, m.Targets) })
}

func (m *CreateTaskReq) DecodeMsgpack(d *msgpack.Decoder) error {
	return decodeTenanted(d, &m.Tenant, str(&m.ClientID),
		func(d *msgpack.Decoder) (err error) { v, err := d.DecodeUint8(); m.Kind = TaskKind(v); return err },
		str(&m.Key), str(&m.Source), strs(&m.Targets))
}

func (m *QueryTaskReq) EncodeMsgpack(e *msgpack.Encoder) error {
	return encodeTenanted(e, m.Tenant, func() error { return e.EncodeString(m.ID) })
}

func (m *QueryTaskReq) DecodeMsgpack(d *msgpack.Decoder) error {
	return decodeTenanted(d, &m.Tenant, str(&m.ID))
}

func (m *PingResp) EncodeMsgpack(e *msgpack.Encoder) error {
	// The fields after the first three are sent only when they say
	// something, so a ping's answer keeps the old shape for older clients.
	n := 3
	if m.MultiTenants || len(m.Tasks) > 0 {
		n++
	}
	if len(m.Tasks) > 0 {
		n++
	}
	if err := e.EncodeArrayLen(n); err != nil {
		return err
	}
	for _, b := range []bool{m.Known, m.OffloadWork, m.OffloadEnabled} {
		if err := e.EncodeBool(b); err != nil {
			return err
		}
	}
	if n > 3 {
		if err := e.EncodeBool(m.MultiTenants); err != nil {
			return err
		}
	}
	if n > 4 {
		return e.Encode(m.Tasks)
	}
	return nil
}

func (m *PingResp) DecodeMsgpack(d *msgpack.Decoder) error {
	n, err := arrayOf(d, 3)
	if err != nil {
		return err
	}
	for _, p := range []*bool{&m.Known, &m.OffloadWork, &m.OffloadEnabled} {
		if *p, err = d.DecodeBool(); err != nil {
			return err
		}
	}
	if n > 3 {
		if m.MultiTenants, err = d.DecodeBool(); err != nil {
			return err
		}
	}
	if n > 4 {
		if err = d.Decode(&m.Tasks); err != nil {
			return err
		}
	}
	return skipRest(d, n, 5)
}

// encodeTenanted writes fields, then tenant when it is not "".
func encodeTenanted(e *msgpack.Encoder, tenant string, fields ...func() error) error {
	if err := e.EncodeArrayLen(len(fields) + hasTenant(tenant)); err != nil {
		return err
	}
	for _, f := range fields {
		if err := f(); err != nil {
			return err
		}
	}
	return encodeTenant(e, tenant)
}

// decodeTenanted reads fields, then the tenant when the array has one
// more field, skipping any beyond.
func decodeTenanted(d *msgpack.Decoder, tenant *string, fields ...func(*msgpack.Decoder) error) error {
	n, err := arrayOf(d, len(fields))
	if err != nil {
		return err
	}
	for _, f := range fields {
		if err := f(d); err != nil {
			return err
		}
	}
	if n == len(fields) {
		return nil
	}
	if *tenant, err = d.DecodeString(); err != nil {
		return err
	}
	return skipRest(d, n, len(fields)+1)
}

func boolean(p *bool) func(*msgpack.Decoder) error {
	return func(d *msgpack.Decoder) (err error) { *p, err = d.DecodeBool(); return }
}
