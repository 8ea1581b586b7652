// limits.go defines MemcpyGBps and LoopbackStreamGBps.

package limits

import (
	"context"
	"io"
	"net"
	"syscall"
	"time"
)

// sockBufSize is the data plane's SO_SNDBUF / SO_RCVBUF (transfer's
// sockBufSize, unexported there): the stream is measured with the socket
// settings the TCP path runs with. Keep the two equal.
const sockBufSize = 4 << 20

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
// 127.0.0.1 with the socket settings of the data plane (see sockBufSize): a sender writes iters
// messages of size bytes, a receiver reads them; timed from the first write
// to the last byte read, after one warm-up message. 0 on error.
func LoopbackStreamGBps(size uint64, iters int) float64 {
	return LoopbackStreamGBpsOver(size, iters, nil, nil)
}

// LoopbackStreamGBpsOver is LoopbackStreamGBps through what accept and
// dial turn each end of the connection into (nil: the socket itself), as
// a TLS connection: the limit of a path that encrypts.
func LoopbackStreamGBpsOver(size uint64, iters int, accept, dial func(net.Conn) (net.Conn, error)) float64 {
	if size == 0 || iters <= 0 {
		return 0
	}
	same := func(c net.Conn) (net.Conn, error) { return c, nil }
	if accept == nil {
		accept = same
	}
	if dial == nil {
		dial = same
	}
	lc := net.ListenConfig{Control: setSockBufs}
	ln, err := lc.Listen(context.Background(), "tcp", "127.0.0.1:0")
	if err != nil {
		return 0
	}
	defer ln.Close()
	got := make(chan error, 1)
	go func() {
		raw, err := ln.Accept()
		if err != nil {
			got <- err
			return
		}
		defer raw.Close()
		tuneConn(raw)
		c, err := accept(raw)
		if err != nil {
			got <- err
			return
		}
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
	raw, err := d.Dial("tcp", ln.Addr().String())
	if err != nil {
		return 0
	}
	defer raw.Close()
	tuneConn(raw)
	c, err := dial(raw)
	if err != nil {
		return 0
	}
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

// setSockBufs sizes the socket buffers before connect, so the window scale
// negotiated in the handshake fits them (as the data plane does).
func setSockBufs(_, _ string, rc syscall.RawConn) error {
	return rc.Control(func(fd uintptr) {
		_ = syscall.SetsockoptInt(int(fd), syscall.SOL_SOCKET, syscall.SO_RCVBUF, sockBufSize)
		_ = syscall.SetsockoptInt(int(fd), syscall.SOL_SOCKET, syscall.SO_SNDBUF, sockBufSize)
	})
}

// tuneConn sets the socket options of a data-plane connection.
func tuneConn(c net.Conn) {
	if tc, ok := c.(*net.TCPConn); ok {
		_ = tc.SetNoDelay(true)
		_ = tc.SetReadBuffer(sockBufSize)
		_ = tc.SetWriteBuffer(sockBufSize)
	}
}
