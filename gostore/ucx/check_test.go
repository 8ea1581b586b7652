package ucx

import (
	"bytes"
	"context"
	"encoding/binary"
	"math"
	"testing"
	"time"

	"github.com/gostore/gostore/gostore/wire"
)

func codeOf(err error) wire.Code { return wire.CodeOf(err) }

// Ops outside the exposed range, with a bad desc, or without memory are
// refused with ErrInvalidParams before anything is posted (the exposed
// memory stays untouched); a good op in the same batch still moves.
func TestRefusedBeforePosting(t *testing.T) {
	r := newRig(t, "tcp", 1<<20)
	d := r.x.Desc()
	src := bytes.Repeat([]byte{0xAB}, 8192)
	trunc := d[:len(d)-1]
	flipped := append([]byte(nil), d...)
	flipped[descHeader+3] ^= 1
	longer := append(append([]byte(nil), d...), 0)
	cases := []struct {
		name string
		op   Op
	}{
		{"offset past the end", Op{Desc: d, Offset: 1<<20 + 1, Parts: []Part{{Host: src}}, Write: true}},
		{"length past the end", Op{Desc: d, Offset: 1<<20 - 4096, Parts: []Part{{Host: src}}, Write: true}},
		{"scattered past the end", Op{Desc: d, Offset: 1<<20 - 12288, Parts: []Part{{Host: src}, {Host: src}}, Write: true}},
		{"offset wraps", Op{Desc: d, Offset: math.MaxUint64 - 100, Parts: []Part{{Host: src}}, Write: true}},
		{"nil desc", Op{Parts: []Part{{Host: src}}, Write: true}},
		{"garbage desc", Op{Desc: []byte("not a desc at all, really not"), Parts: []Part{{Host: src}}, Write: true}},
		{"truncated desc", Op{Desc: trunc, Parts: []Part{{Host: src}}, Write: true}},
		{"longer desc", Op{Desc: longer, Parts: []Part{{Host: src}}, Write: true}},
		{"corrupted desc", Op{Desc: flipped, Parts: []Part{{Host: src}}, Write: true}},
		{"part without memory", Op{Desc: d, Parts: []Part{{Len: 4096}}, Write: true}},
	}
	if !r.ctx.Info().CUDA {
		cases = append(cases, struct {
			name string
			op   Op
		}{"device part without CUDA", Op{Desc: d, Parts: []Part{{Dev: 0x1000, Len: 4096}}, Write: true}})
	}
	good := make([]byte, 4096)
	fill(good, 7)
	ops := []Op{{Desc: d, Offset: 0, Parts: []Part{{Host: good}}, Write: true}}
	for _, c := range cases {
		ops = append(ops, c.op)
	}
	errs := r.w.Do(context.Background(), ops)
	if errs[0] != nil {
		t.Fatalf("good op beside bad ones: %v", errs[0])
	}
	if !bytes.Equal(r.mem[:4096], good) {
		t.Fatal("good op's bytes did not land")
	}
	for i, c := range cases {
		if got := codeOf(errs[i+1]); got != wire.ErrInvalidParams {
			t.Errorf("%s: %v (code %v), want INVALID_PARAMS", c.name, errs[i+1], got)
		}
	}
	if !bytes.Equal(r.mem[4096:], make([]byte, len(r.mem)-4096)) {
		t.Fatal("a refused op wrote into the exposed memory")
	}
}

// A closed worker refuses ops with TRANSFER_FAIL and posts nothing.
func TestClosedWorker(t *testing.T) {
	r := newRig(t, "tcp", 1<<20)
	r.w.Close()
	src := bytes.Repeat([]byte{0xCD}, 4096)
	err := r.w.Do(context.Background(), []Op{{Desc: r.x.Desc(), Parts: []Part{{Host: src}}, Write: true}})[0]
	if codeOf(err) != wire.ErrTransferFail {
		t.Fatalf("Do on a closed worker: %v", err)
	}
	if bytes.Contains(r.mem, []byte{0xCD}) {
		t.Fatal("a closed worker wrote")
	}
	r.w.Close() // twice is fine
}

// Once an exposure is closed, a worker holding its desc gets an error,
// never bytes, both on the endpoint it already had and on a fresh one; a
// new exposure of the same memory then works.
func TestExposureClosed(t *testing.T) {
	for _, tc := range []struct {
		tls   string
		bound time.Duration // how long a failing op may take
	}{
		// tcp detects the closed peer; shared memory cannot in UCX 1.13,
		// so there the op's deadline ends it.
		{"tcp", 10 * time.Second},
		{"posix", 2 * time.Second},
	} {
		t.Run(tc.tls, func(t *testing.T) {
			r := newRig(t, tc.tls, 1<<20)
			old := r.x.Desc()
			secret := make([]byte, 4096)
			fill(secret, 9)
			if err := one(r.w, Op{Desc: old, Parts: []Part{{Host: secret}}, Write: true}); err != nil {
				t.Fatalf("put before close: %v", err)
			}
			r.x.Close()
			fresh, err := r.ctx.NewWorker()
			if err != nil {
				t.Fatal(err)
			}
			defer fresh.Close()
			for _, w := range []*Worker{r.w, fresh} {
				dst := make([]byte, 4096)
				ctx, cancel := context.WithTimeout(context.Background(), tc.bound)
				start := time.Now()
				err := w.Do(ctx, []Op{{Desc: old, Parts: []Part{{Host: dst}}}})[0]
				cancel()
				if codeOf(err) != wire.ErrTransferFail {
					t.Fatalf("get from a closed exposure: %v", err)
				}
				if !bytes.Equal(dst, make([]byte, 4096)) {
					t.Fatal("get from a closed exposure returned bytes")
				}
				if el := time.Since(start); el > tc.bound+5*time.Second {
					t.Fatalf("failing get took %v", el)
				}
				t.Logf("get from the closed exposure: %v", err)
				w.Forget(old)
			}
			// A new exposure of the same memory: its desc works, the old
			// one still does not.
			x2, err := r.ctx.Expose(uintptrOf(r.mem), uint64(len(r.mem)), MemHost)
			if err != nil {
				t.Fatal(err)
			}
			r.x = x2
			dst := make([]byte, 4096)
			if err := one(r.w, Op{Desc: x2.Desc(), Parts: []Part{{Host: dst}}}); err != nil {
				t.Fatalf("get from the new exposure: %v", err)
			}
			if !bytes.Equal(dst, secret) {
				t.Fatal("new exposure: wrong bytes")
			}
			ctx, cancel := context.WithTimeout(context.Background(), tc.bound)
			defer cancel()
			stale := make([]byte, 4096)
			if err := r.w.Do(ctx, []Op{{Desc: old, Parts: []Part{{Host: stale}}}})[0]; err == nil || bytes.Equal(stale, secret) {
				t.Fatalf("old desc after a new exposure: err %v, bytes returned %v", err, bytes.Equal(stale, secret))
			}
		})
	}
}

// A desc survives encode/decode, and every framing fault is refused.
func TestDescFraming(t *testing.T) {
	d := &desc{memType: MemHost, base: 0x1000, size: 1 << 20, canary: 0x2000, nonce: [16]byte{1, 2, 3},
		addr: []byte("address"), rkey: []byte("rkey"), ckey: []byte("ckey")}
	b := d.encode()
	got, err := decodeDesc(b)
	if err != nil || got.base != d.base || got.size != d.size || got.canary != d.canary || got.nonce != d.nonce ||
		string(got.addr) != "address" || string(got.rkey) != "rkey" || string(got.ckey) != "ckey" {
		t.Fatalf("round trip: %+v, %v", got, err)
	}
	bad := func(mut func([]byte) []byte) []byte { return mut(append([]byte(nil), b...)) }
	for name, in := range map[string][]byte{
		"version":   bad(func(b []byte) []byte { b[4] = 2; return b }),
		"memtype":   bad(func(b []byte) []byte { b[5] = 9; return b }),
		"reserved":  bad(func(b []byte) []byte { b[6] = 1; return b }),
		"addr len":  bad(func(b []byte) []byte { binary.LittleEndian.PutUint32(b[48:], 1<<30); return b }),
		"zero key":  bad(func(b []byte) []byte { binary.LittleEndian.PutUint32(b[52:], 0); return b }),
		"wraps":     (&desc{base: math.MaxUint64 - 10, size: 100, canary: 1, addr: []byte("a"), rkey: []byte("r"), ckey: []byte("c")}).encode(),
		"no canary": (&desc{base: 4096, size: 100, addr: []byte("a"), rkey: []byte("r"), ckey: []byte("c")}).encode(),
		"empty":     {},
	} {
		if _, err := decodeDesc(in); codeOf(err) != wire.ErrInvalidParams {
			t.Errorf("%s: %v", name, err)
		}
	}
}

// Decode of anything never panics; what it accepts re-encodes to itself.
func FuzzDecodeDesc(f *testing.F) {
	f.Add((&desc{memType: MemHost, base: 4096, size: 8192, canary: 64, addr: []byte("worker"), rkey: []byte("key"), ckey: []byte("c")}).encode())
	f.Add([]byte("GSUX"))
	f.Add([]byte{})
	f.Fuzz(func(t *testing.T, b []byte) {
		d, err := decodeDesc(b)
		if err != nil {
			if codeOf(err) != wire.ErrInvalidParams {
				t.Fatalf("error without INVALID_PARAMS: %v", err)
			}
			return
		}
		if !bytes.Equal(d.encode(), b) {
			t.Fatal("accepted desc does not re-encode to itself")
		}
	})
}

// A closed exposure's desc whose worker address leads to a live worker
// (on tcp, a port reused by a later exposure of the process: simulated by
// giving the old desc the new worker's address) is refused by the canary
// check before any op: UCX's software RMA would serve it from whatever
// memory lives at the old base now.
func TestStaleDescReusedAddress(t *testing.T) {
	r := newRig(t, "tcp", 1<<20)
	old, err := decodeDesc(r.x.Desc())
	if err != nil {
		t.Fatal(err)
	}
	r.x.Close()
	fill(r.mem, 13) // what the memory holds once exposed again
	x2, err := r.ctx.Expose(uintptrOf(r.mem), uint64(len(r.mem)), MemHost)
	if err != nil {
		t.Fatal(err)
	}
	r.x = x2
	now, err := decodeDesc(x2.Desc())
	if err != nil {
		t.Fatal(err)
	}
	stale := *old
	stale.addr = now.addr
	got := make([]byte, 4096)
	err = r.w.Do(context.Background(), []Op{{Desc: stale.encode(), Parts: []Part{{Host: got}}}})[0]
	t.Logf("stale desc: %v", err)
	if codeOf(err) != wire.ErrTransferFail || bytes.Equal(got, r.mem[:4096]) {
		t.Fatalf("stale desc at a reused address: err %v, bytes returned %v", err, bytes.Equal(got, r.mem[:4096]))
	}
	// The new desc still works on the same worker.
	if err := one(r.w, Op{Desc: x2.Desc(), Parts: []Part{{Host: got}}}); err != nil || !bytes.Equal(got, r.mem[:4096]) {
		t.Fatalf("new desc after a refused stale one: %v", err)
	}
}
