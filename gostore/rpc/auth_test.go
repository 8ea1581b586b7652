// auth_test.go checks that a Server with SetAuth serves only clients that
// pass the handshake, in both modes and both of the client's ways of
// reading replies.

package rpc

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/gostore/gostore/gostore/auth"
	"github.com/gostore/gostore/gostore/auth/authtest"
	"github.com/gostore/gostore/gostore/wire"
)

func TestAuthenticatedCalls(t *testing.T) {
	dir := t.TempDir()
	ca := authtest.NewCA(t, dir, "pool")
	modes := map[string]struct{ server, client, stranger auth.Options }{
		"secret": {authtest.Secret(t, dir, "s", "0123456789abcdef-pool"), authtest.Secret(t, dir, "s", "0123456789abcdef-pool"),
			authtest.Secret(t, dir, "other", "0123456789abcdef-other")},
		"mtls": {ca.Issue(t, "master"), ca.Issue(t, "client"), authtest.NewCA(t, dir, "rogue").Issue(t, "x")},
	}
	for mode, m := range modes {
		for cname, copt := range clientModes {
			t.Run(mode+"/"+cname, func(t *testing.T) {
				s, addr, logs := startEcho(t)
				s.SetAuth(authtest.Must(t, m.server))
				ctx := context.Background()
				var resp echoResp

				copt.Auth = authtest.Must(t, m.client)
				c := NewClientWith(addr, copt)
				defer c.Close()
				for i := range 3 { // the second and third reuse the idle connection
					if err := c.Call(ctx, wire.OpPing, &echoReq{S: "hi"}, &resp); err != nil || resp.S != "hi!" {
						t.Fatalf("call %d: %v %q", i, err, resp.S)
					}
				}
				for name, a := range map[string]*auth.Auth{"none": nil, "stranger": authtest.Must(t, m.stranger)} {
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
				deadline := time.Now().Add(5 * time.Second)
				for strings.Count(logs.String(), "rpc: peer refused") < 2 && time.Now().Before(deadline) {
					time.Sleep(5 * time.Millisecond)
				}
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
