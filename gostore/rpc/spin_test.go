// spin_test.go checks ServerOptions.Spin: the server's connections poll
// for a looping client's next request.

package rpc

import (
	"context"
	"strconv"
	"testing"
	"time"

	"github.com/gostore/gostore/gostore/internal/blockconn"
	"github.com/gostore/gostore/gostore/internal/testbase"
	"github.com/gostore/gostore/gostore/wire"
)

// ServerOptions.Spin: a client calling in a loop is served by the
// connection's poll (blockconn.Polled), counted on the process's gate,
// with every answer right; no Spin never polls.
func TestSpinServesALoopingClientByPolling(t *testing.T) {
	for _, spin := range []time.Duration{time.Second, 0} {
		_, addr, _ := startLimited(t, ServerOptions{Spin: spin}, nil)
		c := NewClient(addr)
		testbase.ServedByPolls(t, spin > 0, 100, blockconn.SharedGate().Counts, func(i int) {
			var resp echoResp
			s := strconv.Itoa(i)
			if err := c.Call(context.Background(), wire.OpPing, &echoReq{S: s}, &resp); err != nil || resp.S != s+"!" {
				t.Fatalf("spin %v call %d: %v %q", spin, i, err, resp.S)
			}
		})
		c.Close()
	}
}
