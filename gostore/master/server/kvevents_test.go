package server

import (
	"context"
	"encoding/binary"
	"fmt"
	"io"
	"log/slog"
	"net"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/go-zeromq/zmq4"
	"github.com/vmihailenco/msgpack/v5"

	"github.com/gostore/gostore/gostore/master"
)

func TestKeyHash(t *testing.T) {
	for _, tc := range []struct {
		key  string
		want uint64
		ok   bool
	}{
		{"12345", 12345, true},
		{"18446744073709551615", 1<<64 - 1, true},
		{"18446744073709551616", 0, false}, // past u64
		{"0xff", 255, true},
		{"0XFF", 255, true},
		{"0x", 0, false},
		{"0x10000000000000000", 0, false},
		{"0xffffffffffffffff", 1<<64 - 1, true},
		{"0xg", 0, false},
		{"", 0, false},
		{"-1", 0, false},
		{"k1", 0, false},
		{"12a", 0, false},
	} {
		got, ok := keyHash(tc.key)
		if ok != tc.ok || (ok && got != tc.want) {
			t.Errorf("keyHash(%q) = %d, %v; want %d, %v", tc.key, got, ok, tc.want, tc.ok)
		}
	}
}

// The batch layout under each setting of the two emit flags: which
// fields an event has, and which events are left out.
func TestKVBatchLayout(t *testing.T) {
	evs := []master.Event{
		{Kind: master.EventStored, Medium: master.MediumCPU, Key: "7", At: int64(3 * time.Millisecond)},
		{Kind: master.EventRemoved, Medium: master.MediumDisk, Key: "k", Tenant: "t1"},
		{Kind: master.EventAllCleared},
	}
	for _, tc := range []struct {
		legacy, objectKey bool
		keys              [][]string // each event's keys, sorted
		skipped           uint64
	}{
		{true, true, [][]string{
			{"additional_salt", "backend_id", "base_block_idx", "block_hashes", "block_size", "dp_rank", "event_id", "event_type", "group_id",
				"lora_id", "lora_name", "medium", "model_name", "object_key", "parent_block_hash", "parent_hash", "seq_hashes",
				"tenant_id", "timestamp", "token_ids", "type"},
			{"additional_salt", "backend_id", "base_block_idx", "block_hashes", "block_size", "dp_rank", "event_id", "event_type", "group_id",
				"lora_name", "medium", "model_name", "object_key", "seq_hashes", "tenant_id", "timestamp", "type"},
			{"backend_id", "event_id", "event_type", "timestamp", "type"},
		}, 1},
		{false, false, [][]string{
			{"additional_salt", "backend_id", "base_block_idx", "block_size", "dp_rank", "event_id", "event_type", "group_id",
				"lora_name", "medium", "model_name", "parent_hash", "seq_hashes", "tenant_id", "timestamp", "token_ids"},
			{"backend_id", "event_id", "event_type", "timestamp"},
		}, 1},
	} {
		p := &kvPublisher{o: KVEventsOptions{BackendID: "b", TenantID: "default", LegacyCompat: tc.legacy, ObjectKey: tc.objectKey, DPRank: 2},
			log: slog.Default(), now: func() time.Time { return time.Unix(10, 500_000_000) }}
		var enc kvEncoder
		payload, n, skipped := enc.batch(p, evs)
		if n != len(tc.keys) || skipped != tc.skipped {
			t.Fatalf("legacy %v, object key %v: %d events, %d skipped", tc.legacy, tc.objectKey, n, skipped)
		}
		var batch []any
		if err := msgpack.Unmarshal(payload, &batch); err != nil {
			t.Fatal(err)
		}
		if len(batch) != 3 || batch[0] != 10.5 || fmt.Sprint(batch[2]) != "2" {
			t.Fatalf("batch %v", batch)
		}
		for i, e := range batch[1].([]any) {
			m := e.(map[string]any)
			var keys []string
			for k := range m {
				keys = append(keys, k)
			}
			slices.Sort(keys)
			if !reflect.DeepEqual(keys, tc.keys[i]) {
				t.Errorf("legacy %v, object key %v: event %d has %v, want %v", tc.legacy, tc.objectKey, i, keys, tc.keys[i])
			}
			if i == 0 && (fmt.Sprint(m["seq_hashes"]) != "[7]" || fmt.Sprint(m["timestamp"]) != "3" || m["medium"] != "cpu") {
				t.Errorf("stored event %v", m)
			}
			if i == 1 && tc.objectKey && (m["tenant_id"] != "t1" || m["medium"] != "disk" || m["object_key"] != "k") {
				t.Errorf("removed event %v", m)
			}
		}
	}
}

// BenchmarkKVBatch: one batch of kvBatchMax stored events encoded.
// --kv_events_format=map: the batch is a map of vLLM's EventBatch field
// names, its events as in the array format.
func TestKVBatchMapFormat(t *testing.T) {
	evs := []master.Event{{Kind: master.EventStored, Medium: master.MediumCPU, Key: "7"}, {Kind: master.EventAllCleared}}
	for _, format := range []string{kvFormatArray, kvFormatMap} {
		p := &kvPublisher{o: KVEventsOptions{BackendID: "b", LegacyCompat: true, DPRank: 2, Format: format},
			log: slog.Default(), now: func() time.Time { return time.Unix(10, 500_000_000) }}
		var enc kvEncoder
		payload, n, _ := enc.batch(p, evs)
		var got any
		if err := msgpack.Unmarshal(payload, &got); err != nil || n != 2 {
			t.Fatalf("%s: %v, %d events", format, err, n)
		}
		var ts, rank, events any
		switch b := got.(type) {
		case []any:
			if format != kvFormatArray || len(b) != 3 {
				t.Fatalf("%s: batch %v", format, b)
			}
			ts, events, rank = b[0], b[1], b[2]
		case map[string]any:
			if format != kvFormatMap || len(b) != 3 {
				t.Fatalf("%s: batch %v", format, b)
			}
			ts, events, rank = b["ts"], b["events"], b["data_parallel_rank"]
		}
		evs, _ := events.([]any)
		if ts != 10.5 || fmt.Sprint(rank) != "2" || len(evs) != 2 || evs[0].(map[string]any)["type"] != "BlockStored" ||
			evs[1].(map[string]any)["type"] != "AllBlocksCleared" {
			t.Errorf("%s: batch %v", format, got)
		}
	}
}

func BenchmarkKVBatch(b *testing.B) {
	p := &kvPublisher{o: KVEventsOptions{BackendID: "b", TenantID: "default", LegacyCompat: true, ObjectKey: true},
		log: slog.Default(), now: time.Now}
	evs := make([]master.Event, kvBatchMax)
	for i := range evs {
		evs[i] = master.Event{Kind: master.EventStored, Medium: master.MediumCPU, Key: fmt.Sprintf("model/layer%02d/block%08d", i%61, i)}
	}
	var enc kvEncoder
	b.ReportAllocs()
	for b.Loop() {
		enc.batch(p, evs)
	}
	b.ReportMetric(float64(b.N*kvBatchMax)/b.Elapsed().Seconds(), "events/s")
}

// The replay buffer keeps the newest kvReplayBatches batches, and from
// answers those numbered from a start on.
func TestKVReplayBufferKeepsTheNewest(t *testing.T) {
	p := &kvPublisher{replay: fakeListener{}}
	for seq := uint64(1); seq <= kvReplayBatches+5; seq++ {
		p.keep(kvBatch{seq: seq, payload: []byte{1}})
	}
	all := p.from(0)
	if len(all) != kvReplayBatches || all[0].seq != 6 || all[len(all)-1].seq != kvReplayBatches+5 {
		t.Fatalf("kept %d, from %d to %d", len(all), all[0].seq, all[len(all)-1].seq)
	}
	if tail := p.from(kvReplayBatches + 4); len(tail) != 2 || tail[0].seq != kvReplayBatches+4 {
		t.Fatalf("from the last two: %v", tail)
	}
	if none := p.from(kvReplayBatches + 6); len(none) != 0 {
		t.Fatalf("from past the end: %v", none)
	}
	// A batch larger than the byte bound's rest pushes out the oldest.
	p.keep(kvBatch{seq: kvReplayBatches + 6, payload: make([]byte, kvReplayBytes-10)})
	if got := p.from(0); len(got) != 11 || got[len(got)-1].seq != kvReplayBatches+6 || p.bufBytes > kvReplayBytes {
		t.Fatalf("after a big batch: %d kept, %d bytes", len(got), p.bufBytes)
	}
}

// fakeListener stands for a replay socket: keep stores nothing without one.
type fakeListener struct{ net.Listener }

// zmtpConn's reads pass the greeting and frames within the bounds, and
// fail, before the frame's body is read, on a frame or a message beyond
// them.
func TestZMTPReadBounds(t *testing.T) {
	greeting := make([]byte, 64)
	short := func(more bool, body string) []byte {
		flag := byte(0)
		if more {
			flag = 1
		}
		return append([]byte{flag, byte(len(body))}, body...)
	}
	long := func(size uint64) []byte {
		return binary.BigEndian.AppendUint64([]byte{0x02}, size)
	}
	many := func(n int) []byte {
		var b []byte
		for i := range n {
			b = append(b, short(i < n-1, "x")...)
		}
		return b
	}
	for _, tc := range []struct {
		name   string
		stream []byte
		fails  string
	}{
		{"a request", append(short(true, ""), short(false, "12345678")...), ""},
		{"a long frame within the bound", append(long(zmtpMaxFrame), make([]byte, zmtpMaxFrame)...), ""},
		{"a frame past the bound", long(zmtpMaxFrame + 1), "a frame of 4097 bytes"},
		{"2^62 bytes claimed", long(1 << 62), "a frame of 4611686018427387904 bytes"},
		{"16 frames", many(zmtpMaxFrames), ""},
		{"17 frames", many(zmtpMaxFrames + 1), "more than 16 frames"},
		{"messages of 16 frames, one after another", append(many(zmtpMaxFrames), many(zmtpMaxFrames)...), ""},
	} {
		a, b := net.Pipe()
		go func() {
			a.Write(append(append([]byte{}, greeting...), tc.stream...))
			a.Close()
		}()
		c := &zmtpConn{Conn: b, greet: 64}
		_, err := io.ReadAll(c)
		switch {
		case tc.fails == "" && err != nil:
			t.Errorf("%s: %v", tc.name, err)
		case tc.fails != "" && (err == nil || !strings.Contains(err.Error(), tc.fails)):
			t.Errorf("%s: err %v, want %q", tc.name, err, tc.fails)
		}
		b.Close()
	}
}

// zmtpSubscriber connects to a zmtpPub as a ZMTP SUB peer (the handshake
// done); it reads only when the test does.
func zmtpSubscriber(t *testing.T, addr string) (net.Conn, *zmq4.Conn) {
	t.Helper()
	c, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	zc, err := zmq4.Open(c, zmtpNull{}, zmq4.Sub, nil, false, nil)
	if err != nil {
		t.Fatal(err)
	}
	return c, zc
}

// pubWithSubscriber is a zmtpPub on loopback with one subscriber served.
func pubWithSubscriber(t *testing.T) (*zmtpPub, net.Conn, *zmq4.Conn) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	p := newZMTPPub(ln, 16, slog.New(slog.DiscardHandler))
	c, zc := zmtpSubscriber(t, ln.Addr().String())
	deadline := time.Now().Add(10 * time.Second)
	for {
		p.mu.Lock()
		n := len(p.subs)
		p.mu.Unlock()
		if n == 1 {
			return p, c, zc
		}
		if time.Now().After(deadline) {
			t.Fatal("the subscriber was not served")
		}
		time.Sleep(time.Millisecond)
	}
}

// Every write to a subscriber has a deadline of its own: a healthy one
// that was idle longer than the timeout still gets a batch larger than
// the write buffer, and one that reads nothing, before any flush, is
// dropped within the timeout rather than holding the publisher's close.
func TestZMTPWriteDeadlinePerWrite(t *testing.T) {
	defer func(d time.Duration) { zmtpWriteTimeout = d }(zmtpWriteTimeout)
	zmtpWriteTimeout = 300 * time.Millisecond
	big := make([]byte, 8<<20) // past the write buffer and the socket's

	t.Run("idle, then a large batch", func(t *testing.T) {
		p, c, zc := pubWithSubscriber(t)
		p.send(zmq4.NewMsgFrom([]byte{}, []byte("small")))
		if m, err := zc.RecvMsg(); err != nil || string(m.Frames[1]) != "small" {
			t.Fatalf("first: %v %v", m, err)
		}
		time.Sleep(2 * zmtpWriteTimeout) // idle past the last flush's deadline
		p.send(zmq4.NewMsgFrom([]byte{}, big))
		if m, err := zc.RecvMsg(); err != nil || len(m.Frames) != 2 || len(m.Frames[1]) != len(big) {
			t.Fatalf("a healthy subscriber idle a while lost the large batch: %v", err)
		}
		c.Close()
		p.close()
	})
	t.Run("never reading", func(t *testing.T) {
		p, c, _ := pubWithSubscriber(t)
		defer c.Close()
		p.send(zmq4.NewMsgFrom([]byte{}, big)) // never read
		// Its writer gives up within the timeout, before any close (whose
		// grace second would end it anyway), and the subscriber is gone.
		for deadline := time.Now().Add(10 * zmtpWriteTimeout); ; time.Sleep(time.Millisecond) {
			p.mu.Lock()
			n := len(p.subs)
			p.mu.Unlock()
			if n == 0 {
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("a subscriber that reads nothing is still served after %v", 10*zmtpWriteTimeout)
			}
		}
		closed := make(chan struct{})
		go func() {
			p.close()
			close(closed)
		}()
		select {
		case <-closed:
		case <-time.After(10 * zmtpWriteTimeout):
			t.Fatalf("close still waits on a subscriber that reads nothing after %v", 10*zmtpWriteTimeout)
		}
	})
}

// pong reads the raw bytes of a PONG command with context ctx from c.
func readPong(t *testing.T, c net.Conn, ctx string) {
	t.Helper()
	want := append([]byte{0x04, byte(5 + len(ctx)), 4}, "PONG"+ctx...)
	got := make([]byte, len(want))
	c.SetReadDeadline(time.Now().Add(5 * time.Second))
	if _, err := io.ReadFull(c, got); err != nil || !slices.Equal(got, want) {
		t.Fatalf("after a PING: % x (%v), want the PONG % x", got, err, want)
	}
	c.SetReadDeadline(time.Time{})
}

// A peer's ZMTP PING is answered with a PONG echoing its context, at once
// (flushed), on the PUB socket and on the replay endpoint, where the
// request that follows is then answered as usual.
func TestZMTPPingAnswered(t *testing.T) {
	ping := []byte{0, 100, 'c', 't', 'x'} // TTL 10 s, context "ctx"
	t.Run("pub", func(t *testing.T) {
		p, c, zc := pubWithSubscriber(t)
		defer p.close()
		defer c.Close()
		if err := zc.SendCmd(zmq4.CmdPing, ping); err != nil {
			t.Fatal(err)
		}
		readPong(t, c, "ctx")
	})
	t.Run("replay", func(t *testing.T) {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		defer ln.Close()
		p := &kvPublisher{o: KVEventsOptions{Format: kvFormatArray}, log: slog.New(slog.DiscardHandler), replay: ln}
		p.ctx, p.cancel = context.WithCancel(context.Background())
		defer p.cancel()
		p.keep(kvBatch{seq: 7, payload: []byte("batch")})
		go func() {
			if s, err := ln.Accept(); err == nil {
				p.serveReplayConn(s)
			}
		}()
		c, err := net.Dial("tcp", ln.Addr().String())
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		zc, err := zmq4.Open(c, zmtpNull{}, zmq4.Dealer, nil, false, nil)
		if err != nil {
			t.Fatal(err)
		}
		if err := zc.SendCmd(zmq4.CmdPing, ping); err != nil {
			t.Fatal(err)
		}
		readPong(t, c, "ctx")
		if err := zc.SendMsg(zmq4.NewMsgFrom([]byte{}, binary.BigEndian.AppendUint64(nil, 0))); err != nil {
			t.Fatal(err)
		}
		c.SetReadDeadline(time.Now().Add(5 * time.Second))
		m, err := zc.RecvMsg()
		if err != nil || len(m.Frames) != 4 || string(m.Frames[3]) != "batch" {
			t.Fatalf("the request after a PING: %v %v", m.Frames, err)
		}
	})
}

// A subscriber's queue is bounded in bytes as well as in messages: one
// that reads nothing loses what would take its queue past zmtpSubBytes.
func TestZMTPSubscriberQueueBoundInBytes(t *testing.T) {
	defer func(b int64) { zmtpSubBytes = b }(zmtpSubBytes)
	p, c, _ := pubWithSubscriber(t) // a queue of 16 messages; it reads nothing
	defer p.close()
	defer c.Close()
	p.send(zmq4.NewMsgFrom([]byte{}, make([]byte, 32<<20))) // the writer blocks on it, past the socket's buffers
	var s *zmtpSub
	p.mu.Lock()
	for s = range p.subs {
	}
	p.mu.Unlock()
	deadline := time.Now().Add(10 * time.Second)
	for s.queued.Load() != 0 || len(s.out) != 0 {
		if time.Now().After(deadline) {
			t.Fatal("the writer did not take the first message")
		}
		time.Sleep(time.Millisecond)
	}
	if p.lost.Load() != 0 {
		t.Fatal("the first message was lost")
	}
	zmtpSubBytes = 1 << 20 // read by send alone, on this goroutine
	for range 10 {
		p.send(zmq4.NewMsgFrom([]byte{}, make([]byte, 256<<10)))
	}
	if got := p.lost.Load(); got != 6 || len(s.out) != 4 {
		t.Fatalf("lost %d, queued %d (%d bytes); want 6 lost, 4 queued (1 MiB)", got, len(s.out), s.queued.Load())
	}
}

// The subscriber cap counts connections from before their handshake: one
// past it is closed at once, even while the others never finish theirs.
func TestZMTPSubscriberCapCountsHandshakes(t *testing.T) {
	defer func(n int32) { zmtpMaxSubscribers = n }(zmtpMaxSubscribers)
	zmtpMaxSubscribers = 2
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	p := newZMTPPub(ln, 16, slog.New(slog.DiscardHandler))
	defer p.close()
	var conns []net.Conn
	defer func() {
		for _, c := range conns {
			c.Close()
		}
	}()
	for range 2 { // they never send their greeting
		c, err := net.Dial("tcp", ln.Addr().String())
		if err != nil {
			t.Fatal(err)
		}
		conns = append(conns, c)
	}
	for deadline := time.Now().Add(10 * time.Second); p.conns.Load() != 2; time.Sleep(time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("%d connections counted, want 2", p.conns.Load())
		}
	}
	c, err := net.Dial("tcp", ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	conns = append(conns, c)
	c.SetReadDeadline(time.Now().Add(2 * time.Second))
	if got, err := io.ReadAll(c); err != nil {
		t.Fatalf("the third connection is still open after 2 s (%d bytes read, %v)", len(got), err)
	}
}

// Replay connections: as many as subscribers (zmtpMaxSubscribers), one
// more closed at once, and an idle one stays open (an engine's subscriber
// keeps its replay socket for life): after idling past the write timeout
// it is answered.
func TestKVReplayConnsLikeSubscribers(t *testing.T) {
	defer func(n int32, d time.Duration) { zmtpMaxSubscribers, zmtpWriteTimeout = n, d }(zmtpMaxSubscribers, zmtpWriteTimeout)
	zmtpMaxSubscribers, zmtpWriteTimeout = 2, 300*time.Millisecond
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	p := &kvPublisher{o: KVEventsOptions{Format: kvFormatArray}, log: slog.New(slog.DiscardHandler), replay: ln}
	p.ctx, p.cancel = context.WithCancel(context.Background())
	p.keep(kvBatch{seq: 7, payload: []byte("batch")})
	done := make(chan struct{})
	go func() {
		defer close(done)
		p.serveReplay()
	}()
	defer func() {
		p.cancel()
		ln.Close()
		<-done
	}()
	var zcs []*zmq4.Conn
	for range 2 {
		c, err := net.Dial("tcp", ln.Addr().String())
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		zc, err := zmq4.Open(c, zmtpNull{}, zmq4.Dealer, nil, false, nil)
		if err != nil {
			t.Fatal(err)
		}
		zcs = append(zcs, zc)
	}
	c, err := net.Dial("tcp", ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	c.SetReadDeadline(time.Now().Add(2 * time.Second))
	if got, err := io.ReadAll(c); err != nil {
		t.Fatalf("a third replay connection is still open after 2 s (%d bytes read, %v)", len(got), err)
	}
	time.Sleep(3 * zmtpWriteTimeout) // idle
	for i, zc := range zcs {
		if err := zc.SendMsg(zmq4.NewMsgFrom([]byte{}, binary.BigEndian.AppendUint64(nil, 0))); err != nil {
			t.Fatal(err)
		}
		m, err := zc.RecvMsg()
		if err != nil || len(m.Frames) != 4 || string(m.Frames[3]) != "batch" {
			t.Fatalf("connection %d, idle a while: %v %v", i, m.Frames, err)
		}
	}
}

// A subscriber that reads nothing loses its own batches (counted) once its
// queue is full, and holds up no other: the one that reads gets them all.
func TestZMTPPubSlowSubscriberLosesItsOwn(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	pub := newZMTPPub(ln, 100, slog.New(slog.NewTextHandler(io.Discard, nil)))
	defer pub.close()
	dial := func() (net.Conn, *zmq4.Conn) {
		c, err := net.Dial("tcp", ln.Addr().String())
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { c.Close() })
		zc, err := zmq4.Open(c, zmtpNull{}, zmq4.Sub, nil, false, nil)
		if err != nil {
			t.Fatal(err)
		}
		return c, zc
	}
	readerConn, reader := dial()
	dial() // handshaken, never read
	// The reader's queue on the publisher's side, once both are in.
	var readerQueue chan zmq4.Msg
	for deadline := time.Now().Add(10 * time.Second); ; {
		pub.mu.Lock()
		n := len(pub.subs)
		for s := range pub.subs {
			if s.c.RemoteAddr().String() == readerConn.LocalAddr().String() {
				readerQueue = s.out
			}
		}
		pub.mu.Unlock()
		if n == 2 && readerQueue != nil {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d subscribers registered", n)
		}
		time.Sleep(time.Millisecond)
	}
	payload := make([]byte, 64<<10)
	const batches = 2000 // 128 MiB to each: past the stalled one's queue and its socket's buffers
	got := make(chan int)
	go func() {
		n := 0
		for n < batches {
			if _, err := reader.RecvMsg(); err != nil {
				break
			}
			n++
		}
		got <- n
	}()
	for i := range batches {
		// The reader is not the one under test for losses: let its queue
		// drain when full (len of a channel is safe to read).
		for len(readerQueue) == cap(readerQueue) {
			time.Sleep(100 * time.Microsecond)
		}
		pub.send(zmq4.NewMsgFrom([]byte{}, binary.BigEndian.AppendUint64(nil, uint64(i)), payload))
	}
	if n := <-got; n != batches {
		t.Fatalf("the reading subscriber got %d of %d batches", n, batches)
	}
	if lost := pub.lost.Load(); lost == 0 || lost >= batches {
		t.Fatalf("the stalled subscriber lost %d of %d", lost, batches)
	}
}
