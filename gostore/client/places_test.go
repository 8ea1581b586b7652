// places_test.go tests Places and LeaveToCaller against the real master:
// where a found object lies in host memory on this host, and a finish that
// counts the objects the caller copied from there.

package client

import (
	"bytes"
	"os"
	"syscall"
	"testing"

	"github.com/gostore/gostore/gostore/internal/testkit"
	"github.com/gostore/gostore/gostore/wire"
)

// The place names the owner's memfd: mapped from its path, it holds the
// object's bytes at the offset given. Only objects left to the caller
// count as read without a destination.
func TestPlacesNameTheSegmentThatHoldsTheObject(t *testing.T) {
	m := testkit.StartMaster(t)
	newClient(t, m.Addr(), 8<<20) // the owner
	reader, writer := newClient(t, m.Addr(), 0), newClient(t, m.Addr(), 0)
	v := testkit.Pattern(1, 300_000)
	mustPut(t, writer, "k", v, false)

	p, err := reader.Reads().GetStart([]string{"k", "missing"})
	if err != nil {
		t.Fatal(err)
	}
	places := reader.Reads().Places(p)
	if places[1] != (Place{}) {
		t.Fatalf("a miss got a place: %+v", places[1])
	}
	pl := places[0]
	if pl.Path == "" || pl.Size != uint64(len(v)) || pl.SegSize != 8<<20 || pl.Offset+pl.Size > pl.SegSize ||
		pl.LeaseMS == 0 {
		t.Fatalf("place %+v for a %d-byte object in an 8 MiB segment", pl, len(v))
	}
	f, err := os.Open(pl.Path)
	if err != nil {
		t.Fatal(err)
	}
	mem, err := syscall.Mmap(int(f.Fd()), 0, int(pl.SegSize), syscall.PROT_READ, syscall.MAP_SHARED)
	f.Close()
	if err != nil {
		t.Fatal(err)
	}
	defer syscall.Munmap(mem)
	if !bytes.Equal(mem[pl.Offset:pl.Offset+pl.Size], v) {
		t.Fatal("the place does not hold the object's bytes")
	}
	// Not left to the caller: no destination is an error, as before.
	if out := reader.Reads().GetFinish(p, [][][]byte{nil, nil}); out[0] != int64(wire.ErrInvalidParams) {
		t.Fatalf("finish without a destination, nothing left to the caller: %d", out[0])
	}

	p, err = reader.Reads().GetStart([]string{"k", "missing"})
	if err != nil {
		t.Fatal(err)
	}
	p.LeaveToCaller(reader.Reads().Places(p))
	if out := reader.Reads().GetFinish(p, [][][]byte{{}, nil}); out[0] != int64(len(v)) || out[1] != int64(wire.ErrObjectNotFound) {
		t.Fatalf("finish of an object the caller copied: %v", out)
	}
	// One left to the caller but given a destination anyway is read into it.
	p, err = reader.Reads().GetStart([]string{"k"})
	if err != nil {
		t.Fatal(err)
	}
	p.LeaveToCaller(reader.Reads().Places(p))
	dst := make([]byte, len(v))
	if out := reader.Reads().GetFinish(p, [][][]byte{{dst}}); out[0] != int64(len(v)) || !bytes.Equal(dst, v) {
		t.Fatalf("finish into a destination: %v", out)
	}
}

// Over TCP nothing is mapped here: no place.
func TestNoPlaceOverTCP(t *testing.T) {
	reader, writer := spotCluster(t, "tcp")
	mustPut(t, writer, "k", testkit.Pattern(2, 4096), false)
	p, err := reader.Reads().GetStart([]string{"k"})
	if err != nil {
		t.Fatal(err)
	}
	defer reader.Reads().Abort(p)
	if pl := reader.Reads().Places(p); pl[0] != (Place{}) {
		t.Fatalf("a place over TCP: %+v", pl[0])
	}
}
