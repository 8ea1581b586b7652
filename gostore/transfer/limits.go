// limits.go defines MemcpyGBps and LoopbackStreamGBps, which measure the
// physical limits the transfer benchmarks are compared with.

package transfer

import (
	"context"
	"io"
	"net"
	"time"
)

// MemcpyGBps returns the throughput in GB/s (1e9 bytes) of Go's copy
// between two warmed-up buffers of size bytes, over iters copies.
func MemcpyGBps(size uint64, iters int) float64 {
	if size == 0 || iters <= 0 {
		return 0
	}
	src, dst := make([]byte, size), make([]byte, size)
	for i := range src {
		src[i] = byte(i)
	}
	copy(dst, src) // fault both in
	start := time.Now()
	for i := 0; i < iters; i++ {
		copy(dst, src)
	}
	return gbps(size*uint64(iters), time.Since(start))
}

// LoopbackStreamGBps returns the throughput in GB/s of one raw TCP stream on
// 127.0.0.1 with the socket settings of the data plane: a sender writes iters
// messages of size bytes, a receiver reads them; timed from the first write
// to the last byte read, after one warm-up message. 0 on error.
func LoopbackStreamGBps(size uint64, iters int) float64 {
	if size == 0 || iters <= 0 {
		return 0
	}
	lc := net.ListenConfig{Control: setSockBufs}
	ln, err := lc.Listen(context.Background(), "tcp", "127.0.0.1:0")
	if err != nil {
		return 0
	}
	defer ln.Close()
	got := make(chan error, 1)
	go func() {
		c, err := ln.Accept()
		if err != nil {
			got <- err
			return
		}
		defer c.Close()
		tuneConn(c)
		buf := make([]byte, size)
		for i := 0; i <= iters; i++ {
			if _, err := io.ReadFull(c, buf); err != nil {
				got <- err
				return
			}
			if i == 0 {
				got <- nil // warm-up received
			}
		}
		got <- nil
	}()
	d := net.Dialer{Control: setSockBufs}
	c, err := d.Dial("tcp", ln.Addr().String())
	if err != nil {
		return 0
	}
	defer c.Close()
	tuneConn(c)
	buf := make([]byte, size)
	for i := range buf {
		buf[i] = byte(i)
	}
	if _, err := c.Write(buf); err != nil {
		return 0
	}
	if <-got != nil {
		return 0
	}
	start := time.Now()
	for i := 0; i < iters; i++ {
		if _, err := c.Write(buf); err != nil {
			return 0
		}
	}
	if <-got != nil {
		return 0
	}
	return gbps(size*uint64(iters), time.Since(start))
}

func gbps(bytes uint64, d time.Duration) float64 {
	if d <= 0 {
		return 0
	}
	return float64(bytes) / d.Seconds() / 1e9
}
