package rpc

import (
	"context"
	"testing"

	"github.com/gostore/gostore/gostore/wire"
)

func BenchmarkCall(b *testing.B) {
	_, addr, _ := startEcho(b)
	c := NewClient(addr)
	defer c.Close()
	var resp echoResp
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		if err := c.Call(context.Background(), wire.OpPing, &echoReq{S: "x"}, &resp); err != nil {
			b.Fatal(err)
		}
	}
}
