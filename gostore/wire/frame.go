// frame.go: the RPC frame, its header and how a body is read.

package wire

import (
	"encoding/binary"
	"fmt"
	"io"
)

// A frame is an 18-byte header followed by a msgpack body:
//
//	u32 body length | u64 request id | u16 opcode | i32 status
//
// Requests carry status 0; a response repeats the request's id and opcode and
// carries the outcome's Code. Several requests may be in flight on one
// connection; responses name the request they answer by id.
const HeaderSize = 18

// MaxBody bounds a frame body that ReadFrame accepts: every reply a client
// reads, and a request on a server that sets no bound of its own (the
// master's --rpc_max_request_bytes defaults to it). A peer announcing more
// is treated as garbage: the connection is closed rather than a huge
// buffer allocated on its word.
const MaxBody = 64 << 20

// Header is a decoded frame header.
type Header struct {
	Len    uint32
	ID     uint64
	Op     Op
	Status Code
}

// PutHeader encodes h into b[:HeaderSize].
func PutHeader(b []byte, h Header) {
	binary.LittleEndian.PutUint32(b[0:], h.Len)
	binary.LittleEndian.PutUint64(b[4:], h.ID)
	binary.LittleEndian.PutUint16(b[12:], uint16(h.Op))
	binary.LittleEndian.PutUint32(b[14:], uint32(h.Status))
}

// ParseHeader decodes b[:HeaderSize] and validates the length against
// MaxBody.
func ParseHeader(b []byte) (Header, error) {
	h := DecodeHeader(b)
	if h.Len > MaxBody {
		return h, fmt.Errorf("frame body of %d bytes exceeds the %d limit", h.Len, MaxBody)
	}
	return h, nil
}

// DecodeHeader decodes b[:HeaderSize] without judging the length: for a
// reader with a bound of its own (the RPC server's).
func DecodeHeader(b []byte) Header {
	return Header{
		Len:    binary.LittleEndian.Uint32(b[0:]),
		ID:     binary.LittleEndian.Uint64(b[4:]),
		Op:     Op(binary.LittleEndian.Uint16(b[12:])),
		Status: Code(int32(binary.LittleEndian.Uint32(b[14:]))),
	}
}

// ReadHeader reads and decodes one header from r; the caller bounds h.Len
// before it reads the body (ReadBody).
func ReadHeader(r io.Reader) (Header, error) {
	var hb [HeaderSize]byte
	if _, err := io.ReadFull(r, hb[:]); err != nil {
		return Header{}, err
	}
	return DecodeHeader(hb[:]), nil
}

// growStep is the most of a body ReadFrame allocates before its bytes
// arrive: past it, the buffer grows (doubling) as they do.
const growStep = 1 << 20

// ReadFrame reads one frame from r, its body at most MaxBody. buf is
// reused for the body when large enough; the returned body aliases it (the
// caller owns both). See ReadBody for how a large body is allocated.
func ReadFrame(r io.Reader, buf []byte) (Header, []byte, error) {
	h, err := ReadHeader(r)
	if err != nil {
		return h, nil, err
	}
	if h.Len > MaxBody {
		return h, nil, fmt.Errorf("frame body of %d bytes exceeds the %d limit", h.Len, MaxBody)
	}
	body, err := ReadBody(r, int(h.Len), buf)
	return h, body, err
}

// ReadBody reads a body of n bytes from r. buf is reused when large
// enough; the returned body aliases it (the caller owns both). A body
// larger than buf and growStep is allocated as it arrives, so a header
// that announces 64 MiB and sends nothing costs a peer's connection
// 1 MiB, not 64.
func ReadBody(r io.Reader, n int, buf []byte) ([]byte, error) {
	if cap(buf) < n && n > growStep {
		buf = make([]byte, 0, growStep)
		for len(buf) < n {
			if len(buf) == cap(buf) {
				grown := make([]byte, len(buf), min(2*cap(buf), n))
				copy(grown, buf)
				buf = grown
			}
			part := buf[len(buf):min(cap(buf), n)]
			if _, err := io.ReadFull(r, part); err != nil {
				return nil, fmt.Errorf("truncated frame body: %w", err)
			}
			buf = buf[:len(buf)+len(part)]
		}
		return buf, nil
	}
	if cap(buf) < n {
		buf = make([]byte, n)
	}
	body := buf[:n]
	if _, err := io.ReadFull(r, body); err != nil {
		return nil, fmt.Errorf("truncated frame body: %w", err)
	}
	return body, nil
}

// AppendFrame appends a frame with the given header fields and body to dst.
func AppendFrame(dst []byte, id uint64, op Op, status Code, body []byte) []byte {
	var hb [HeaderSize]byte
	PutHeader(hb[:], Header{Len: uint32(len(body)), ID: id, Op: op, Status: status})
	dst = append(dst, hb[:]...)
	return append(dst, body...)
}
