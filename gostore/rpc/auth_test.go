// auth_test.go checks that a Server with SetAuth serves only clients that
// pass the handshake, in both modes and both of the client's ways of
// reading replies.

package rpc

import (
	"context"
	"strings"
	"testing"

	"github.com/gostore/gostore/gostore/auth"
	"github.com/gostore/gostore/gostore/auth/authtest"
	"github.com/gostore/gostore/gostore/internal/testbase"
	"github.com/gostore/gostore/gostore/wire"
)

func TestAuthenticatedCalls(t *testing.T) {
	for mode, m := range authtest.Modes(t, t.TempDir()) {
		for cname, copt := range clientModes {
			t.Run(mode+"/"+cname, func(t *testing.T) {
				s, addr, logs := startEcho(t)
				s.SetAuth(authtest.Must(t, m.Server))
				ctx := context.Background()
				var resp echoResp

				copt.Auth = authtest.Must(t, m.Client)
				c := NewClientWith(addr, copt)
				defer c.Close()
				for i := range 3 { // the second and third reuse the idle connection
					if err := c.Call(ctx, wire.OpPing, &echoReq{S: "hi"}, &resp); err != nil || resp.S != "hi!" {
						t.Fatalf("call %d: %v %q", i, err, resp.S)
					}
				}
				for name, a := range map[string]*auth.Auth{"none": nil, "stranger": authtest.Must(t, m.Stranger)} {
					o := clientModes[cname]
					o.Auth = a
					sc := NewClientWith(addr, o)
					err := sc.Call(ctx, wire.OpPing, &echoReq{S: "let me in"}, &resp)
					sc.Close()
					if wire.CodeOf(err) != wire.ErrRPCFail {
						t.Fatalf("%s client: %v", name, err)
					}
				}
				// The server logs once its side of the handshake ends,
				// which may be after the client gave up.
				testbase.WaitFor(t, "two refusals logged", func() bool {
					return strings.Count(logs.String(), "rpc: peer refused") >= 2
				})
				if n := strings.Count(logs.String(), "rpc: peer refused"); n != 2 {
					t.Fatalf("%d refusals logged, want 2:\n%s", n, logs)
				}
				if err := c.Call(ctx, wire.OpPing, &echoReq{S: "still"}, &resp); err != nil || resp.S != "still!" {
					t.Fatalf("after the refusals: %v", err)
				}
			})
		}
	}
}
