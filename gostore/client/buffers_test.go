// buffers_test.go tests staging: loans from the local buffer, private
// mappings beyond it, and the spares kept of those.

package client

import (
	"testing"

	"github.com/gostore/gostore/gostore/memlimit"
	"github.com/gostore/gostore/gostore/wire"
)

// A loan past the local buffer gets a private mapping; handed back, it is
// kept (within retain) and lent again for a loan of its size class, so a
// repeated batch lands in pages already faulted in. Past retain a returned
// mapping is unmapped; close unmaps the spares.
func TestStagingKeepsSparePrivateMappings(t *testing.T) {
	const MiB = 1 << 20
	s, err := newStaging(1*MiB, 8*MiB)
	if err != nil {
		t.Fatal(err)
	}
	inBuf, err := s.get(512 << 10)
	if err != nil {
		t.Fatal(err)
	}
	var loans [][]byte
	for _, n := range []uint64{3 * MiB, 3*MiB + 5, 4 * MiB, 1*MiB + 1} { // classes 4, 4, 4 and 1 MiB + a page
		b, err := s.get(n)
		if err != nil {
			t.Fatal(err)
		}
		if uint64(len(b)) != n {
			t.Fatalf("a loan of %d bytes has %d", n, len(b))
		}
		b[0], b[n-1] = 1, 2 // mapped and writable end to end
		loans = append(loans, b)
	}
	for _, b := range loans {
		if err := s.put(addrOf(b)); err != nil {
			t.Fatal(err)
		}
	}
	// 4 + 4 MiB fit retain; the third 4 MiB mapping does not, the small
	// one does not either (8 MiB kept already).
	if s.spareBytes != 8*MiB || len(s.spare[4*MiB]) != 2 {
		t.Fatalf("spares %d bytes, %d of 4 MiB; want 8 MiB, 2", s.spareBytes, len(s.spare[4*MiB]))
	}
	kept := map[uintptr]bool{}
	for _, m := range s.spare[4*MiB] {
		kept[addrOf(m.Bytes())] = true
	}
	again, err := s.get(3*MiB + 100)
	if err != nil {
		t.Fatal(err)
	}
	if !kept[addrOf(again)] || s.spareBytes != 4*MiB {
		t.Fatalf("a loan of the same class got a new mapping (spares now %d bytes)", s.spareBytes)
	}
	if err := s.put(addrOf(again)); err != nil {
		t.Fatal(err)
	}
	if err := s.put(addrOf(again)); err == nil {
		t.Fatal("a buffer handed back twice was taken twice")
	}
	if err := s.put(addrOf(inBuf)); err != nil {
		t.Fatal(err)
	}
	s.close()
	if s.spareBytes != 0 || len(s.spare) != 0 || s.buf != nil {
		t.Fatalf("close left %d spare bytes in %d classes, buffer %v", s.spareBytes, len(s.spare), s.buf != nil)
	}
	if _, err := s.get(10); err == nil {
		t.Fatal("a closed staging lent memory")
	}
}

// retain 0 keeps nothing: every private mapping goes when handed back.
func TestStagingWithoutRetainKeepsNoSpare(t *testing.T) {
	s, err := newStaging(0, 0)
	if err != nil {
		t.Fatal(err)
	}
	b, err := s.get(3 << 20)
	if err != nil {
		t.Fatal(err)
	}
	if err := s.put(addrOf(b)); err != nil {
		t.Fatal(err)
	}
	if s.spareBytes != 0 || len(s.spare[4<<20]) != 0 {
		t.Fatalf("retain 0 kept %d bytes", s.spareBytes)
	}
	s.close()
}

// A loan beyond the local buffer larger than the host can give is refused
// before anything is mapped (ErrInvalidParams), and lending goes on.
func TestStagingRefusesLoanBeyondTheHost(t *testing.T) {
	s, err := newStaging(1<<20, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer s.close()
	limit, ok := memlimit.Probe{}.Tightest()
	if !ok {
		t.Fatal("no memory bound readable")
	}
	if b, err := s.get(limit.Free + 1<<30); wire.CodeOf(err) != wire.ErrInvalidParams || b != nil {
		t.Fatalf("loan beyond %d bytes: %d bytes, %v", limit.Free, len(b), err)
	}
	if len(s.lent) != 0 {
		t.Fatalf("a refused loan is lent: %v", s.lent)
	}
	b, err := s.get(2 << 20)
	if err != nil || len(b) != 2<<20 {
		t.Fatalf("a loan after: %d, %v", len(b), err)
	}
	if err := s.put(addrOf(b)); err != nil {
		t.Fatal(err)
	}
}
