// desc.go: the Desc of an exposure, what a peer needs to reach it.

package ucx

import (
	"encoding/binary"
	"hash/crc32"

	"github.com/gostore/gostore/gostore/wire"
)

// The Desc layout (little endian):
//
//	"GSUX" | version u8 | memtype u8 | 0 u16 | base u64 | size u64 |
//	canary u64 | nonce [16] | addrLen u32 | rkeyLen u32 | canaryKeyLen u32 |
//	worker address | packed rkey | canary's packed rkey | crc32c u32
//
// The canary is 16 bytes of the owner's memory holding the nonce while the
// exposure is open (zeroed at Close, never freed): a worker reads it on each
// new endpoint before any op, so a Desc whose worker address now leads to
// another worker (a tcp port reused after Close) is refused, not served
// from whatever lives at base now. UCX's software RMA (tcp, shared memory)
// checks no registration at the target.
//
// The checksum covers everything before it: a Desc damaged on the way is
// refused here rather than handed to UCX's address and rkey parsers, which
// trust their input.
const (
	descMagic    = "GSUX"
	descVersion  = 1
	descHeader   = 4 + 1 + 1 + 2 + 8 + 8 + 8 + nonceLen + 4 + 4 + 4
	nonceLen     = 16
	descMaxBlob  = 64 << 10 // UCX's addresses and rkeys are far smaller
	descChecksum = 4
)

var crcTable = crc32.MakeTable(crc32.Castagnoli)

// desc is a decoded Desc.
type desc struct {
	memType MemType
	base    uint64
	size    uint64
	canary  uint64         // address of the nonce in the owner's memory
	nonce   [nonceLen]byte // what the canary holds while the exposure is open
	addr    []byte         // the exposure's worker address
	rkey    []byte         // its packed remote key
	ckey    []byte         // the canary's packed remote key
}

func (d *desc) encode() []byte {
	b := make([]byte, 0, descHeader+len(d.addr)+len(d.rkey)+len(d.ckey)+descChecksum)
	b = append(b, descMagic...)
	b = append(b, descVersion, byte(d.memType), 0, 0)
	b = binary.LittleEndian.AppendUint64(b, d.base)
	b = binary.LittleEndian.AppendUint64(b, d.size)
	b = binary.LittleEndian.AppendUint64(b, d.canary)
	b = append(b, d.nonce[:]...)
	b = binary.LittleEndian.AppendUint32(b, uint32(len(d.addr)))
	b = binary.LittleEndian.AppendUint32(b, uint32(len(d.rkey)))
	b = binary.LittleEndian.AppendUint32(b, uint32(len(d.ckey)))
	b = append(b, d.addr...)
	b = append(b, d.rkey...)
	b = append(b, d.ckey...)
	return binary.LittleEndian.AppendUint32(b, crc32.Checksum(b, crcTable))
}

// decodeDesc parses b; anything malformed is ErrInvalidParams. The result
// aliases b.
func decodeDesc(b []byte) (*desc, error) {
	bad := func(why string) error { return wire.Errorf(wire.ErrInvalidParams, "ucx desc: %s", why) }
	if len(b) < descHeader+descChecksum {
		return nil, bad("too short")
	}
	if string(b[:4]) != descMagic {
		return nil, bad("not a UCX desc")
	}
	if b[4] != descVersion {
		return nil, bad("unknown version")
	}
	if b[6] != 0 || b[7] != 0 {
		return nil, bad("reserved bytes set")
	}
	mt := MemType(b[5])
	if mt != MemHost && mt != MemCUDA {
		return nil, bad("unknown memory type")
	}
	d := &desc{
		memType: mt,
		base:    binary.LittleEndian.Uint64(b[8:]),
		size:    binary.LittleEndian.Uint64(b[16:]),
		canary:  binary.LittleEndian.Uint64(b[24:]),
	}
	copy(d.nonce[:], b[32:])
	const lens = 32 + nonceLen
	alen := uint64(binary.LittleEndian.Uint32(b[lens:]))
	rlen := uint64(binary.LittleEndian.Uint32(b[lens+4:]))
	clen := uint64(binary.LittleEndian.Uint32(b[lens+8:]))
	if alen == 0 || rlen == 0 || clen == 0 || alen > descMaxBlob || rlen > descMaxBlob || clen > descMaxBlob {
		return nil, bad("address or key length out of range")
	}
	if d.canary == 0 {
		return nil, bad("no canary")
	}
	if uint64(len(b)) != descHeader+alen+rlen+clen+descChecksum {
		return nil, bad("length does not match")
	}
	if d.base+d.size < d.base {
		return nil, bad("range wraps")
	}
	body := b[:len(b)-descChecksum]
	if crc32.Checksum(body, crcTable) != binary.LittleEndian.Uint32(b[len(body):]) {
		return nil, bad("checksum mismatch")
	}
	d.addr = b[descHeader : descHeader+alen]
	d.rkey = b[descHeader+alen : descHeader+alen+rlen]
	d.ckey = b[descHeader+alen+rlen : descHeader+alen+rlen+clen]
	return d, nil
}
