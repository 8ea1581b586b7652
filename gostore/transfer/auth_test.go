// auth_test.go checks that a Server with SetAuth moves bytes only for
// engines that pass its handshake, and that a refused peer changes none.

package transfer

import (
	"bytes"
	"context"
	"strings"
	"testing"

	"github.com/gostore/gostore/gostore/auth"
	"github.com/gostore/gostore/gostore/auth/authtest"
	"github.com/gostore/gostore/gostore/wire"
)

func TestAuthenticatedTransfers(t *testing.T) {
	for mode, m := range authtest.Modes(t, t.TempDir()) {
		t.Run(mode, func(t *testing.T) {
			const size = 8 << 20
			tp := newTCPPeer(t, size)
			tp.srv.SetAuth(authtest.Must(t, m.Server))
			ctx := context.Background()
			e := NewEngine(Options{ForceTCP: true, Log: quietLog(), Auth: authtest.Must(t, m.Client), SliceSize: 1 << 20})
			defer e.Close()
			data := pattern(42, 5<<20+17)
			mustOK(t, grantDo(e, ctx, []Op{{Peer: tp.peer, Offset: 100, Bufs: scatter(data, 4096, 1<<20), Write: true}}))
			dst := make([]byte, len(data))
			mustOK(t, grantDo(e, ctx, []Op{{Peer: tp.peer, Offset: 100, Bufs: [][]byte{dst}}}))
			if d := firstDiff(dst, data); d != "" {
				t.Fatal(d)
			}
			before := bytes.Clone(tp.seg.Bytes())
			for name, a := range map[string]*auth.Auth{"none": nil, "stranger": authtest.Must(t, m.Stranger)} {
				se := NewEngine(Options{ForceTCP: true, Log: quietLog(), Auth: a})
				errs := grantDo(se, ctx, []Op{
					{Peer: tp.peer, Offset: 0, Bufs: [][]byte{bytes.Repeat([]byte{0xee}, 1<<20)}, Write: true},
					{Peer: tp.peer, Offset: 100, Bufs: [][]byte{make([]byte, 4096)}},
				})
				se.Close()
				said := false
				for _, err := range errs {
					wantCode(t, err, wire.ErrTransferFail)
					said = said || strings.Contains(err.Error(), "requires authentication with a shared secret, and this process has none")
				}
				// A peer that asks for a secret is named for what it is
				// to an engine without one.
				if mode == "secret" && name == "none" && !said {
					t.Errorf("errors of a client without the secret: %v", errs)
				}
				if !bytes.Equal(tp.seg.Bytes(), before) {
					t.Fatalf("%s peer changed the segment", name)
				}
			}
			// The owner's engine still works after the refusals.
			mustOK(t, grantDo(e, ctx, []Op{{Peer: tp.peer, Offset: 100, Bufs: [][]byte{dst}}}))
		})
	}
}
