// spin_test.go checks ServerOptions.Spin: the server's connections poll
// for a looping client's next request.

package rpc

import (
	"context"
	"strconv"
	"testing"
	"time"

	"github.com/gostore/gostore/gostore/internal/blockconn"
	"github.com/gostore/gostore/gostore/wire"
)

// ServerOptions.Spin: a client calling in a loop is served by the
// connection's poll (blockconn.Polled), counted on the process's gate,
// with every answer right; no Spin never polls.
func TestSpinServesALoopingClientByPolling(t *testing.T) {
	for _, spin := range []time.Duration{time.Second, 0} {
		_, addr, _ := startLimited(t, ServerOptions{Spin: spin}, nil)
		c := NewClient(addr)
		polls0, hits0 := blockconn.SharedGate().Counts()
		const n = 100
		for i := range n {
			var resp echoResp
			s := strconv.Itoa(i)
			if err := c.Call(context.Background(), wire.OpPing, &echoReq{S: s}, &resp); err != nil || resp.S != s+"!" {
				t.Fatalf("spin %v call %d: %v %q", spin, i, err, resp.S)
			}
		}
		c.Close()
		polls, hits := blockconn.SharedGate().Counts()
		// Other tests' servers may poll too: they only add.
		if spin > 0 && hits-hits0 < n/2 {
			t.Fatalf("spin %v: %d of %d calls served by the poll", spin, hits-hits0, n)
		}
		if spin == 0 && polls != polls0 {
			t.Fatalf("no spin, yet %d reads polled", polls-polls0)
		}
	}
}
