// firstread_test.go checks that a client pointed at something other than
// an RPC port it may use says what it found, in both of the client's ways
// of reading replies.

package rpc

import (
	"context"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/gostore/gostore/gostore/auth/authtest"
	"github.com/gostore/gostore/gostore/wire"
)

func TestFirstReadSaysWhatThePeerIs(t *testing.T) {
	modes := authtest.Modes(t, t.TempDir())
	httpSrv := httptest.NewServer(http.NotFoundHandler())
	defer httpSrv.Close()
	closer, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer closer.Close()
	go func() { // a port that closes every connection at once
		for {
			c, err := closer.Accept()
			if err != nil {
				return
			}
			c.Close()
		}
	}()
	server := func(mode string) string {
		s, addr, _ := startEcho(t)
		s.SetAuth(authtest.Must(t, modes[mode].Server))
		return addr
	}
	cases := []struct {
		name, addr, says string
	}{
		{"http", strings.TrimPrefix(httpSrv.URL, "http://"), "is not a gostore RPC port: it answered like HTTP (\"HTTP/1.1 400 Bad Request\")"},
		{"secret", server("secret"), "requires authentication with a shared secret, and this process has none: give it the pool's secret (GOSTORE_AUTH_SECRET_FILE"},
		{"mtls", server("mtls"), "closed the connection without answering: it may require mutual TLS, which this process lacks (GOSTORE_TLS_CA_FILE"},
		{"closes", closer.Addr().String(), "closed the connection without answering"},
	}
	for _, tc := range cases {
		for cname, copt := range clientModes {
			t.Run(tc.name+"/"+cname, func(t *testing.T) {
				c := NewClientWith(tc.addr, copt)
				defer c.Close()
				// An HTTP server answers once it has read a line: a
				// client's first request (a mount) holds a newline
				// among its bytes as this one does.
				err := c.Call(context.Background(), wire.OpPing, &echoReq{S: "hi\n"}, nil)
				if wire.CodeOf(err) != wire.ErrRPCFail || !strings.Contains(err.Error(), tc.says) ||
					!strings.Contains(err.Error(), tc.addr) {
					t.Fatalf("got %v\nwant RPC_FAIL saying %q", err, tc.says)
				}
			})
		}
	}
}
