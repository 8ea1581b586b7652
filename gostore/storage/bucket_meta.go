package storage

import (
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
)

// On-disk formats of the bucket backend (little endian).
//
// Data record: [magic u32 "GSBR" | key_len u32 | value_len u64 | crc u32 |
// reserved u32 | key | value]; crc is CRC32C of key then value. The headers
// make a data file self-describing; loads read only the value (its offset is
// in the meta) and check the crc kept in memory.
//
// Meta file: [magic u32 "GSBM" | version u32 | bucket id u64 | count u32 |
// reserved u32 | data size u64] then count entries [key_len u32 | crc u32 |
// value offset u64 | value size u64 | key], then CRC32C of all the preceding
// bytes (u32). Any size mismatch or checksum failure rejects the whole meta.
const (
	bucketRecMagic    uint32 = 0x52425347 // "GSBR"
	bucketMetaMagic   uint32 = 0x4D425347 // "GSBM"
	bucketMetaVersion uint32 = 1
	bucketRecHdrLen          = 24
	bucketMetaHdrLen         = 32
	bucketMetaEntLen         = 24
	bucketMaxKeyLen          = 1 << 20
)

var bucketCRCTable = crc32.MakeTable(crc32.Castagnoli)

// bucketCRC is CRC32C of key then value.
func bucketCRC(key string, val []byte) uint32 {
	return crc32.Update(crc32.Checksum([]byte(key), bucketCRCTable), bucketCRCTable, val)
}

func bucketRecLen(key string, val []byte) uint64 {
	return bucketRecHdrLen + uint64(len(key)) + uint64(len(val))
}

// bucketAppend returns where a record of key and an n-byte value placed at
// pos ends: its header is preceded by zeros so that the value starts on a
// block boundary (see seqWriter.AlignAfter).
func bucketAppend(pos uint64, key string, n uint64) uint64 {
	hdr := bucketRecHdrLen + uint64(len(key))
	return roundUpAlign(pos+hdr) + n
}

func bucketEncodeRecHdr(key string, size uint64, crc uint32) []byte {
	p := make([]byte, bucketRecHdrLen+len(key))
	binary.LittleEndian.PutUint32(p[0:], bucketRecMagic)
	binary.LittleEndian.PutUint32(p[4:], uint32(len(key)))
	binary.LittleEndian.PutUint64(p[8:], size)
	binary.LittleEndian.PutUint32(p[16:], crc)
	copy(p[bucketRecHdrLen:], key)
	return p
}

func bucketMetaLen(ents []*bucketEntry) uint64 {
	n := uint64(bucketMetaHdrLen + 4)
	for _, e := range ents {
		n += bucketMetaEntLen + uint64(len(e.key))
	}
	return n
}

func bucketEncodeMeta(id, dataSize uint64, ents []*bucketEntry) []byte {
	p := make([]byte, bucketMetaLen(ents))
	le := binary.LittleEndian
	le.PutUint32(p[0:], bucketMetaMagic)
	le.PutUint32(p[4:], bucketMetaVersion)
	le.PutUint64(p[8:], id)
	le.PutUint32(p[16:], uint32(len(ents)))
	le.PutUint64(p[24:], dataSize)
	o := bucketMetaHdrLen
	for _, e := range ents {
		le.PutUint32(p[o:], uint32(len(e.key)))
		le.PutUint32(p[o+4:], e.crc)
		le.PutUint64(p[o+8:], e.off)
		le.PutUint64(p[o+16:], e.size)
		o += bucketMetaEntLen
		o += copy(p[o:], e.key)
	}
	le.PutUint32(p[o:], crc32.Checksum(p[:o], bucketCRCTable))
	return p
}

type bucketMetaHdr struct {
	id, dataSize uint64
}

var errBucketMeta = errors.New("torn or corrupt bucket meta")

// bucketDecodeMeta parses and checks a meta file.
func bucketDecodeMeta(p []byte) (bucketMetaHdr, []*bucketEntry, error) {
	le := binary.LittleEndian
	var h bucketMetaHdr
	if len(p) < bucketMetaHdrLen+4 {
		return h, nil, fmt.Errorf("%w: %d bytes", errBucketMeta, len(p))
	}
	body := p[:len(p)-4]
	if got, want := crc32.Checksum(body, bucketCRCTable), le.Uint32(p[len(p)-4:]); got != want {
		return h, nil, fmt.Errorf("%w: checksum %08x, want %08x", errBucketMeta, got, want)
	}
	if m := le.Uint32(p[0:]); m != bucketMetaMagic {
		return h, nil, fmt.Errorf("%w: magic %08x", errBucketMeta, m)
	}
	if v := le.Uint32(p[4:]); v != bucketMetaVersion {
		return h, nil, fmt.Errorf("%w: unsupported version %d", errBucketMeta, v)
	}
	h.id = le.Uint64(p[8:])
	n := le.Uint32(p[16:])
	h.dataSize = le.Uint64(p[24:])
	ents := make([]*bucketEntry, 0, min(int(n), len(body)/bucketMetaEntLen))
	o := bucketMetaHdrLen
	for range n {
		if o+bucketMetaEntLen > len(body) {
			return h, nil, fmt.Errorf("%w: entries overrun", errBucketMeta)
		}
		kl := int(le.Uint32(body[o:]))
		e := &bucketEntry{crc: le.Uint32(body[o+4:]), off: le.Uint64(body[o+8:]), size: le.Uint64(body[o+16:])}
		o += bucketMetaEntLen
		if kl > bucketMaxKeyLen || o+kl > len(body) {
			return h, nil, fmt.Errorf("%w: key overruns", errBucketMeta)
		}
		e.key = string(body[o : o+kl])
		o += kl
		if e.off > h.dataSize || e.size > h.dataSize-e.off {
			return h, nil, fmt.Errorf("%w: %q at %d+%d beyond data size %d", errBucketMeta, e.key, e.off, e.size, h.dataSize)
		}
		ents = append(ents, e)
	}
	if o != len(body) {
		return h, nil, fmt.Errorf("%w: %d trailing bytes", errBucketMeta, len(body)-o)
	}
	return h, ents, nil
}
