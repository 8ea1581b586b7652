package wire

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"testing"

	"github.com/gostore/gostore/gostore/internal/fuzzkit"
)

func TestCodes(t *testing.T) {
	cases := map[Code]int32{ErrObjectNotFound: -704, ErrObjectHasLease: -706, ErrNoAvailableHandle: -200,
		ErrInvalidParams: -600, ErrObjectReplicaBusy: -714, ErrUnableOffload: -1300, ErrRPCFail: -900}
	for c, n := range cases {
		if int32(c) != n || !c.Known() {
			t.Errorf("%v = %d, want %d", c, int32(c), n)
		}
	}
	if Code(-12345).Known() || Code(-12345).String() != "CODE(-12345)" {
		t.Error("unknown code")
	}
	err := fmt.Errorf("ctx: %w", Errorf(ErrObjectHasLease, "key %q", "k"))
	if CodeOf(err) != ErrObjectHasLease || !errors.Is(err, ErrObjectHasLease.Err()) {
		t.Fatalf("wrapped code lost: %v", err)
	}
	if CodeOf(nil) != OK || CodeOf(errors.New("x")) != ErrInternal || OK.Err() != nil {
		t.Fatal("CodeOf defaults")
	}
}

func TestFrameRoundTrip(t *testing.T) {
	var buf bytes.Buffer
	buf.Write(AppendFrame(nil, 42, OpGetReplicas, ErrObjectNotFound, []byte("body")))
	buf.Write(AppendFrame(nil, 43, OpPing, OK, nil))
	h, b, err := ReadFrame(&buf, nil)
	if err != nil || h.ID != 42 || h.Op != OpGetReplicas || h.Status != ErrObjectNotFound || string(b) != "body" {
		t.Fatalf("%+v %q %v", h, b, err)
	}
	h, b, err = ReadFrame(&buf, make([]byte, 0, 8))
	if err != nil || h.ID != 43 || len(b) != 0 {
		t.Fatalf("%+v %v", h, err)
	}
	if _, _, err := ReadFrame(&buf, nil); err != io.EOF {
		t.Fatalf("at end: %v", err)
	}
}

func TestFrameRejectsOversizeAndTruncation(t *testing.T) {
	hb := make([]byte, HeaderSize)
	PutHeader(hb, Header{Len: MaxBody + 1, ID: 1, Op: OpPing})
	if _, _, err := ReadFrame(bytes.NewReader(hb), nil); err == nil {
		t.Fatal("oversize body accepted")
	}
	f := AppendFrame(nil, 1, OpPing, OK, []byte("0123456789"))
	if _, _, err := ReadFrame(bytes.NewReader(f[:len(f)-3]), nil); err == nil {
		t.Fatal("truncated body accepted")
	}
	if _, _, err := ReadFrame(bytes.NewReader(f[:5]), nil); err == nil {
		t.Fatal("truncated header accepted")
	}
	if Op(0).Valid() || !OpRemoveAll.Valid() || opEnd.Valid() {
		t.Fatal("op validity")
	}
}

// A header that announces a large body and sends little of it costs the
// reader about what arrived, not what was announced; a large body that
// does arrive is read whole, byte for byte.
func TestReadFrameAllocatesABodyAsItArrives(t *testing.T) {
	announced := make([]byte, HeaderSize)
	PutHeader(announced, Header{Len: MaxBody, ID: 1, Op: OpPutStart})
	stream := append(announced, make([]byte, 3<<20)...) // 3 MiB of the 64 announced
	var err error
	n := fuzzkit.Allocated(func() { _, _, err = ReadFrame(bytes.NewReader(stream), nil) })
	if err == nil {
		t.Fatal("a body cut short read as whole")
	}
	if n > 16<<20 {
		t.Fatalf("reading 3 MiB of a body announced as %d MiB allocated %d MiB", MaxBody>>20, n>>20)
	}

	for _, size := range []int{0, 5, growStep - 1, growStep, growStep + 1, 3*growStep + 7} {
		body := make([]byte, size)
		for i := range body {
			body[i] = byte(i * 7)
		}
		h, got, err := ReadFrame(bytes.NewReader(AppendFrame(nil, 9, OpExist, OK, body)), nil)
		if err != nil || h.Len != uint32(size) || !bytes.Equal(got, body) {
			t.Fatalf("a body of %d bytes: len %d, err %v, equal %v", size, len(got), err, bytes.Equal(got, body))
		}
	}
}
