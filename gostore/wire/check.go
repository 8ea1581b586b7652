// check.go vets a body's msgpack structure before anything decodes it.

package wire

import (
	"encoding/binary"
	"fmt"

	"github.com/vmihailenco/msgpack/v5"
)

// MaxDepth bounds how deeply a body's arrays and maps may nest. The
// messages nest five deep at most (PutStartResp: results, a result, its
// replicas, a replica).
const MaxDepth = 32

// CheckBody reports, without allocating, whether b starts with one msgpack
// value whose every length prefix fits in the bytes that follow it and
// whose containers nest at most MaxDepth deep. Bytes after that value are
// not looked at (msgpack.Unmarshal ignores them too); CheckValue says where
// the value ends, for a reader that must refuse them.
//
// A server runs it on a peer's body before decoding: msgpack v5.4.x trusts
// those prefixes. A string claiming 4 GiB grows the pooled decoder's buffer
// by a quarter at each such request, and keeps it (a few dozen 6-byte
// requests took gigabytes); a non-string slice is allocated at its claimed
// length (vmihailenco/msgpack#401); and Skip recurses once per level, so an
// 8 MiB body of nested arrays overflows the goroutine stack, a fatal error
// no recover() catches. A body msgpack can decode always passes: each
// element takes at least one byte, and no message nests deeply.
func CheckBody(b []byte) error {
	_, err := CheckValue(b)
	return err
}

// Unmarshal decodes msgpack that another process or a disk produced into
// v, once CheckBody has found its lengths and nesting sane: the one way to
// decode untrusted msgpack.
func Unmarshal(b []byte, v any) error {
	if err := CheckBody(b); err != nil {
		return err
	}
	return msgpack.Unmarshal(b, v)
}

// CheckValue is CheckBody that also returns the length of the value.
func CheckValue(b []byte) (int, error) {
	var stack [MaxDepth]int // values left in each enclosing container
	depth := 0
	pending := 1 // values left at this level
	i := 0
	for {
		for pending == 0 {
			if depth == 0 {
				return i, nil
			}
			depth--
			pending = stack[depth]
		}
		if i >= len(b) {
			return 0, fmt.Errorf("msgpack body cut short at byte %d", i)
		}
		c := b[i]
		i++
		pending--
		var size, items int // bytes to skip; values inside (a container)
		// length reads a big-endian n-byte length prefix.
		length := func(n int) (int, error) {
			if len(b)-i < n {
				return 0, fmt.Errorf("msgpack body cut short in a length at byte %d", i)
			}
			var v uint64
			switch n {
			case 1:
				v = uint64(b[i])
			case 2:
				v = uint64(binary.BigEndian.Uint16(b[i:]))
			default:
				v = uint64(binary.BigEndian.Uint32(b[i:]))
			}
			i += n
			return int(v), nil
		}
		var err error
		switch {
		case c <= 0x7f || c >= 0xe0 || c == 0xc0 || c == 0xc2 || c == 0xc3:
			// fixint, nil, bool: the code is the value
		case c <= 0x8f:
			items = 2 * int(c&0x0f) // fixmap
		case c <= 0x9f:
			items = int(c & 0x0f) // fixarray
		case c <= 0xbf:
			size = int(c & 0x1f) // fixstr
		case c == 0xc4 || c == 0xd9: // bin8, str8
			size, err = length(1)
		case c == 0xc5 || c == 0xda: // bin16, str16
			size, err = length(2)
		case c == 0xc6 || c == 0xdb: // bin32, str32
			size, err = length(4)
		case c == 0xc7 || c == 0xc8 || c == 0xc9: // ext8/16/32: length, type, data
			size, err = length(1 << (c - 0xc7))
			size++
		case c == 0xca || c == 0xce || c == 0xd2: // float32, uint32, int32
			size = 4
		case c == 0xcb || c == 0xcf || c == 0xd3: // float64, uint64, int64
			size = 8
		case c == 0xcc || c == 0xd0: // uint8, int8
			size = 1
		case c == 0xcd || c == 0xd1: // uint16, int16
			size = 2
		case c >= 0xd4 && c <= 0xd8: // fixext1..16: type, data
			size = 1 + 1<<(c-0xd4)
		case c == 0xdc || c == 0xdd: // array16, array32
			items, err = length(2 << (c - 0xdc))
		case c == 0xde || c == 0xdf: // map16, map32
			items, err = length(2 << (c - 0xde))
			items *= 2
		default: // 0xc1, never used
			return 0, fmt.Errorf("msgpack body has the invalid code %#x at byte %d", c, i-1)
		}
		if err != nil {
			return 0, err
		}
		if rest := len(b) - i; size > rest || items > rest {
			return 0, fmt.Errorf("msgpack body claims %d bytes or %d values at byte %d, with %d bytes left", size, items, i, rest)
		}
		i += size
		if items > 0 {
			if depth == MaxDepth {
				return 0, fmt.Errorf("msgpack body nests deeper than %d", MaxDepth)
			}
			stack[depth] = pending
			depth++
			pending = items
		}
	}
}
