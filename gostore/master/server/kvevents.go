// kvevents.go publishes the core's KV events (--enable_kv_events) over a
// ZeroMQ PUB socket, in the layout vLLM's and SGLang's KV event batches
// have, and serves a replay endpoint for a subscriber that missed some.

package server

import (
	"bufio"
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math"
	"net"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/go-zeromq/zmq4"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/gostore/gostore/gostore/auth"
	"github.com/gostore/gostore/gostore/master"
)

// KVEventsOptions are Mooncake's --kv_events_* flags and gostore's
// --kv_events_replay_endpoint (docs/master-flags.md, "KV events").
type KVEventsOptions struct {
	Enable       bool
	BindEndpoint string // the PUB socket: tcp://host:port
	// ReplayEndpoint, when set, is the ROUTER socket a subscriber asks for
	// the batches from a sequence number on (vLLM's replay_endpoint).
	ReplayEndpoint string
	BackendID      string // names this master's stream in every event
	// Stamped on every event for the engines' decoders and indexers.
	ModelName, TenantID, AdditionalSalt, LoraName string
	BlockSize, DPRank                             uint32
	// LegacyCompat: the engines' field names (type, block_hashes,
	// parent_block_hash, lora_id) beside RFC #1527's; without them vLLM's
	// and SGLang's decoders cannot read the events.
	LegacyCompat bool
	// ObjectKey: each event names its key; without it, an event whose key
	// is not a hash (decimal or 0x-hex u64) is not published.
	ObjectKey     bool
	QueueCapacity uint32 // events waiting for the publisher; 0: unbounded
	// Format is the batch's layout (--kv_events_format): kvFormatArray or
	// kvFormatMap. The engines' decoders differ: SGLang's and vLLM 0.32's
	// EventBatch is array_like, some vLLM releases' a map, and those
	// answer a replay without the topic frame.
	Format string
}

const (
	kvFormatArray = "array"
	kvFormatMap   = "map"
)

const (
	// kvBatchMax: events per published batch (Mooncake's publisher's).
	kvBatchMax = 64
	// kvSendHWM: batches the PUB socket queues for each subscriber before
	// that one loses them (Mooncake's ZMQ_SNDHWM is 10 000; a tenth keeps
	// a stalled subscriber's backlog to about 20 MB: 64 000 events, the
	// size of the default event queue).
	kvSendHWM = 1000
	// The replay buffer keeps the last kvReplayBatches batches (vLLM's
	// buffer_steps default), at most kvReplayBytes of them.
	kvReplayBatches = 10000
	kvReplayBytes   = 64 << 20
	// kvLinger: how long a batch may wait for more events while they
	// come as a stream (publishLoop).
	kvLinger = time.Millisecond
)

// kvEndSeq ends a replay: sequence number -1, as vLLM's END_SEQ.
var kvEndSeq = []byte{0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff}

// checkKVEvents refuses settings the publisher cannot run with, before
// anything is bound.
func checkKVEvents(o KVEventsOptions, allowInsecure bool) error {
	if !o.Enable {
		return nil
	}
	if o.BindEndpoint == "" {
		return errors.New("--enable_kv_events needs --kv_events_bind_endpoint (tcp://host:port)")
	}
	if o.BackendID == "" {
		return errors.New("--enable_kv_events needs --kv_events_backend_id (names this master's events)")
	}
	if o.Format != kvFormatArray && o.Format != kvFormatMap && o.Format != "" {
		return fmt.Errorf("--kv_events_format=%s: want %s or %s", o.Format, kvFormatArray, kvFormatMap)
	}
	for _, ep := range []struct{ flag, v string }{{"--kv_events_bind_endpoint", o.BindEndpoint},
		{"--kv_events_replay_endpoint", o.ReplayEndpoint}} {
		if ep.v == "" {
			continue
		}
		host, _, err := tcpEndpoint(ep.v)
		if err != nil {
			return fmt.Errorf("%s=%s: %w", ep.flag, ep.v, err)
		}
		// The ZeroMQ sockets carry no authentication (as the engines'
		// do not): the events name keys.
		if err := auth.Check(nil, "the KV events socket", host, allowInsecure); err != nil {
			return fmt.Errorf("%s=%s: %w (--allow_insecure)", ep.flag, ep.v, err)
		}
	}
	return nil
}

// tcpEndpoint splits tcp://host:port; host * is every interface.
func tcpEndpoint(ep string) (host, addr string, err error) {
	rest, ok := strings.CutPrefix(ep, "tcp://")
	if !ok {
		return "", "", errors.New("want tcp://host:port")
	}
	h, p, err := net.SplitHostPort(rest)
	if err != nil {
		return "", "", err
	}
	if _, err := strconv.ParseUint(p, 10, 16); err != nil {
		return "", "", fmt.Errorf("bad port %q", p)
	}
	if h == "*" {
		h = ""
	}
	return h, net.JoinHostPort(h, p), nil
}

// kvPublisher drains the core's event queue into batches on the PUB
// socket, numbered, and keeps the last ones for replay. Its goroutines
// never hold a core lock: the core only pushes into the queue.
type kvPublisher struct {
	o   KVEventsOptions
	q   *master.EventQueue
	log *slog.Logger
	now func() time.Time

	ctx    context.Context
	cancel context.CancelFunc
	pub    *zmtpPub
	replay net.Listener // nil without a replay endpoint
	wg     sync.WaitGroup

	seq     uint64 // the last batch's (the start's µs at first); the publishing goroutine's alone
	eventID uint64 // the last event's; likewise

	mu          sync.Mutex // guards the replay buffer
	buf         []kvBatch  // a ring of n batches from head, oldest first
	head, n     int
	bufBytes    int
	replayConns atomic.Int32

	batches, events, skipped atomic.Uint64
}

// kvBatch is one published batch: its number and its msgpack payload.
type kvBatch struct {
	seq     uint64
	payload []byte
}

// newKVPublisher binds the sockets; start runs the publisher.
func newKVPublisher(o KVEventsOptions, q *master.EventQueue, log *slog.Logger) (*kvPublisher, error) {
	ctx, cancel := context.WithCancel(context.Background())
	p := &kvPublisher{o: o, q: q, log: log, now: time.Now, ctx: ctx, cancel: cancel}
	// Numbered on from the wall clock's µs at the start, not from 1: a
	// subscriber of the master before a restart or failover sees the next
	// master's first batch as a gap (never as a number it already had) and
	// replays from its all-cleared on. A master publishes far fewer than a
	// batch per µs, so the numbers only grow across restarts.
	p.seq = uint64(p.now().UnixMicro())
	_, addr, _ := tcpEndpoint(o.BindEndpoint) // checked by checkKVEvents
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		cancel()
		return nil, fmt.Errorf("--kv_events_bind_endpoint=%s: %w", o.BindEndpoint, err)
	}
	p.pub = newZMTPPub(ln, kvSendHWM, log)
	if o.ReplayEndpoint != "" {
		_, addr, _ := tcpEndpoint(o.ReplayEndpoint) // checked by checkKVEvents
		ln, err := net.Listen("tcp", addr)
		if err != nil {
			cancel()
			p.pub.close()
			return nil, fmt.Errorf("--kv_events_replay_endpoint=%s: %w", o.ReplayEndpoint, err)
		}
		p.replay = ln
	}
	return p, nil
}

// kvEventsFor binds the publisher's sockets and gives the core its event
// queue, which starts with an all-cleared event: a subscriber forgets what
// an earlier master announced, then learns what this one restores. Nil
// without --enable_kv_events.
func kvEventsFor(opts Options, cfg *master.Config, log *slog.Logger) (*kvPublisher, error) {
	if !opts.KVEvents.Enable {
		return nil, nil
	}
	q := master.NewEventQueue(int(opts.KVEvents.QueueCapacity))
	// Held until the publisher starts: nothing drains it before, and a
	// restore announces every object it brings back (start releases it).
	q.Hold()
	q.Push(master.Event{Kind: master.EventAllCleared, At: time.Now().UnixNano()})
	p, err := newKVPublisher(opts.KVEvents, q, log)
	if err != nil {
		return nil, err
	}
	cfg.Events = q
	return p, nil
}

func (p *kvPublisher) start() {
	p.q.Release()
	p.wg.Add(1)
	go func() {
		defer p.wg.Done()
		p.publishLoop()
	}()
	if p.replay != nil {
		p.wg.Add(1)
		go func() {
			defer p.wg.Done()
			p.serveReplay()
		}()
	}
	p.log.Info("kv events publishing", "endpoint", p.o.BindEndpoint, "replay", p.o.ReplayEndpoint,
		"backend_id", p.o.BackendID, "queue_capacity", p.o.QueueCapacity)
}

// close publishes what is queued, then closes the sockets; on a
// publisher that never started (or none) it only closes them.
func (p *kvPublisher) close() {
	if p == nil {
		return
	}
	p.cancel()
	if p.replay != nil {
		p.replay.Close()
	}
	p.wg.Wait()
	p.pub.close()
}

// publishLoop sends the queued events in batches of at most kvBatchMax
// until the publisher closes, then what is left. While events come as a
// stream (the last batch went out less than kvLinger ago) it does not
// park on the queue's Ready: it sleeps out the rest of kvLinger and looks
// again, and a batch not yet full waits that long for more. A parked
// publisher is woken by the pusher, inside a put, under a shard's lock:
// per event, that wake-up cost the master more CPU than the event itself
// (bench/kvevents); per kvLinger, nothing to speak of.
func (p *kvPublisher) publishLoop() {
	var evs []master.Event
	var enc kvEncoder
	var last time.Time
	linger := time.NewTimer(time.Hour)
	linger.Stop()
	wait := func(d time.Duration) {
		linger.Reset(d)
		select {
		case <-linger.C:
		case <-p.ctx.Done():
			linger.Stop()
		}
	}
	for {
		var lost uint64
		evs, lost = p.q.Drain(evs[:0], kvBatchMax)
		streaming := time.Since(last) < kvLinger && p.ctx.Err() == nil
		if len(evs) == 0 {
			if streaming {
				wait(kvLinger - time.Since(last))
				last = time.Time{} // then park, unless events came meanwhile
				continue
			}
			select {
			case <-p.q.Ready():
				continue
			case <-p.ctx.Done():
				return
			}
		}
		if len(evs) < kvBatchMax && streaming {
			wait(kvLinger - time.Since(last))
			var more uint64
			evs, more = p.q.Drain(evs, kvBatchMax-len(evs))
			lost += more
		}
		// Events dropped for room leave a gap of their number in the
		// sequence (as Mooncake's publisher): a subscriber sees it.
		p.seq += lost
		p.send(&enc, evs)
		last = time.Now()
	}
}

// send encodes evs as one batch and publishes it under the next sequence
// number (none when every event was skipped).
func (p *kvPublisher) send(enc *kvEncoder, evs []master.Event) {
	payload, n, skipped := enc.batch(p, evs)
	p.skipped.Add(skipped)
	if n == 0 {
		return
	}
	p.seq++
	seq := make([]byte, 8)
	binary.BigEndian.PutUint64(seq, p.seq)
	// The topic frame is empty, as Mooncake's and the engines' default.
	p.pub.send(zmq4.NewMsgFrom([]byte{}, seq, payload))
	p.batches.Add(1)
	p.events.Add(uint64(n))
	p.keep(kvBatch{seq: p.seq, payload: payload})
}

// keep adds b to the replay buffer, dropping the oldest beyond its bounds.
func (p *kvPublisher) keep(b kvBatch) {
	if p.replay == nil {
		return
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.buf == nil {
		p.buf = make([]kvBatch, kvReplayBatches)
	}
	for p.n == len(p.buf) || (p.n > 0 && p.bufBytes+len(b.payload) > kvReplayBytes) {
		p.bufBytes -= len(p.buf[p.head].payload)
		p.buf[p.head] = kvBatch{}
		p.head = (p.head + 1) % len(p.buf)
		p.n--
	}
	p.buf[(p.head+p.n)%len(p.buf)] = b
	p.n++
	p.bufBytes += len(b.payload)
}

// from is the buffered batches numbered start or later.
func (p *kvPublisher) from(start uint64) []kvBatch {
	p.mu.Lock()
	defer p.mu.Unlock()
	var out []kvBatch
	for i := range p.n {
		if b := p.buf[(p.head+i)%len(p.buf)]; b.seq >= start {
			out = append(out, b)
		}
	}
	return out
}

// serveReplay accepts replay connections until the publisher closes: as
// many at once as subscribers (an engine's subscriber keeps one open for
// its life).
func (p *kvPublisher) serveReplay() {
	var conns sync.WaitGroup
	defer conns.Wait()
	acceptCapped(p.replay, func() bool { return p.ctx.Err() != nil }, &p.replayConns, &conns, p.log, "replay", p.serveReplayConn)
}

// serveReplayConn answers one subscriber's replay requests: [empty
// delimiter, 8-byte big-endian start sequence] (a DEALER's request, as
// vLLM's and SGLang's subscribers send it) is answered with each buffered
// batch from there as [empty, topic, sequence, payload], then [empty,
// empty, -1, empty]. Anything else is logged once and ends the
// connection. Each connection is a ROUTER peer of its own, so an answer
// goes back on the connection that asked.
func (p *kvPublisher) serveReplayConn(c net.Conn) {
	defer c.Close()
	stop := context.AfterFunc(p.ctx, func() { c.Close() })
	defer stop()
	wc, err := zmtpOpen(c, zmq4.Router)
	if err != nil {
		if p.ctx.Err() == nil {
			p.log.Warn("kv events: replay handshake failed", "peer", c.RemoteAddr(), "err", err)
		}
		return
	}
	r := bufio.NewReaderSize(wc, 512)
	for {
		// No read deadline: an engine's subscriber keeps its replay
		// connection idle between gaps (writes have theirs: zmtpConn).
		frames, err := wc.readMsg(r) // answers the peer's PINGs itself
		if err != nil {
			if p.ctx.Err() == nil && !errors.Is(err, io.EOF) && !strings.Contains(err.Error(), "EOF") {
				p.log.Warn("kv events: replay connection ended", "peer", c.RemoteAddr(), "err", err)
			}
			return
		}
		if len(frames) != 2 || len(frames[0]) != 0 || len(frames[1]) != 8 {
			p.log.Warn("kv events: bad replay request: want an empty frame and an 8-byte big-endian start sequence",
				"peer", c.RemoteAddr(), "frames", len(frames), "sizes", frameSizes(frames))
			return
		}
		start := binary.BigEndian.Uint64(frames[1])
		seq := make([]byte, 8)
		// The answer's frames after the empty delimiter: the map format's
		// engines read [seq, payload], the others [topic, seq, payload].
		answer := func(seq, payload []byte) error {
			if p.o.Format == kvFormatMap {
				return wc.writeMsg(false, []byte{}, seq, payload)
			}
			return wc.writeMsg(false, []byte{}, []byte{}, seq, payload)
		}
		for _, b := range p.from(start) {
			binary.BigEndian.PutUint64(seq, b.seq)
			if err := answer(seq, b.payload); err != nil {
				return
			}
		}
		if err := answer(kvEndSeq, []byte{}); err != nil {
			return
		}
		if err := wc.flush(); err != nil {
			return
		}
	}
}

func frameSizes(frames [][]byte) []int {
	n := make([]int, 0, min(len(frames), 8))
	for i := range min(len(frames), 8) {
		n = append(n, len(frames[i]))
	}
	return n
}

// registerMetrics adds the publisher's series to reg.
func (p *kvPublisher) registerMetrics(reg *prometheus.Registry) {
	for _, c := range []struct {
		name, help string
		f          func() uint64
	}{
		{"gostore_master_kv_events_published_total", "KV events published.", p.events.Load},
		{"gostore_master_kv_events_batches_total", "KV event batches published (each one sequence number).", p.batches.Load},
		{"gostore_master_kv_events_dropped_total", "KV events dropped, the oldest, from a full queue (--kv_events_queue_capacity).", p.q.Dropped},
		{"gostore_master_kv_events_skipped_unparsed_keys_total", "KV events whose key is not a u64 hash (published only with --kv_events_emit_object_key).", p.skipped.Load},
		{"gostore_master_kv_events_subscriber_lost_total", "KV event batches a subscriber lost: its queue was full (it read too slowly).", p.pub.lost.Load},
	} {
		reg.MustRegister(prometheus.NewCounterFunc(prometheus.CounterOpts{Name: c.name, Help: c.help},
			func() float64 { return float64(c.f()) }))
	}
	reg.MustRegister(prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "gostore_master_kv_events_queued",
		Help: "KV events waiting for the publisher."}, func() float64 { return float64(p.q.Len()) }))
}

// kvStatus is /kv_events/status: Mooncake's fields.
type kvStatus struct {
	Enabled             bool   `json:"enabled"`
	PublishedBatches    uint64 `json:"published_batches"`
	PublishedEvents     uint64 `json:"published_events"`
	DroppedEvents       uint64 `json:"dropped_events"`
	SkippedUnparsedKeys uint64 `json:"skipped_unparsed_keys"`
}

func (p *kvPublisher) status() kvStatus {
	if p == nil {
		return kvStatus{}
	}
	return kvStatus{Enabled: true, PublishedBatches: p.batches.Load(), PublishedEvents: p.events.Load(),
		DroppedEvents: p.q.Dropped(), SkippedUnparsedKeys: p.skipped.Load()}
}

// kvEncoder writes batches; it is reused, one per publishing goroutine.
type kvEncoder struct {
	w      mpWriter
	fixed  []kvFixed   // by master.EventKind, built on first use
	hashes []keyHashOf // batch's events' keys read as hashes, by index
}

// keyHashOf is what keyHash made of one event's key.
type keyHashOf struct {
	hash   uint64
	isHash bool
}

// mpWriter appends msgpack to a slice: the few kinds a batch holds, each
// in its shortest form (as msgpack encoders write them), with no
// interface call per value (the publisher's rate is bound by it).
type mpWriter struct{ b []byte }

func (w *mpWriter) EncodeNil() { w.b = append(w.b, 0xc0) }

func (w *mpWriter) EncodeUint(v uint64) {
	switch {
	case v < 128:
		w.b = append(w.b, byte(v))
	case v <= math.MaxUint8:
		w.b = append(w.b, 0xcc, byte(v))
	case v <= math.MaxUint16:
		w.b = binary.BigEndian.AppendUint16(append(w.b, 0xcd), uint16(v))
	case v <= math.MaxUint32:
		w.b = binary.BigEndian.AppendUint32(append(w.b, 0xce), uint32(v))
	default:
		w.b = binary.BigEndian.AppendUint64(append(w.b, 0xcf), v)
	}
}

func (w *mpWriter) EncodeInt(v int64) {
	switch {
	case v >= 0:
		w.EncodeUint(uint64(v))
	case v >= -32:
		w.b = append(w.b, byte(v))
	case v >= math.MinInt8:
		w.b = append(w.b, 0xd0, byte(v))
	case v >= math.MinInt16:
		w.b = binary.BigEndian.AppendUint16(append(w.b, 0xd1), uint16(v))
	case v >= math.MinInt32:
		w.b = binary.BigEndian.AppendUint32(append(w.b, 0xd2), uint32(v))
	default:
		w.b = binary.BigEndian.AppendUint64(append(w.b, 0xd3), uint64(v))
	}
}

func (w *mpWriter) EncodeFloat64(v float64) {
	w.b = binary.BigEndian.AppendUint64(append(w.b, 0xcb), math.Float64bits(v))
}

func (w *mpWriter) EncodeString(v string) {
	n := len(v)
	switch {
	case n < 32:
		w.b = append(w.b, 0xa0|byte(n))
	case n <= math.MaxUint8:
		w.b = append(w.b, 0xd9, byte(n))
	case n <= math.MaxUint16:
		w.b = binary.BigEndian.AppendUint16(append(w.b, 0xda), uint16(n))
	default:
		w.b = binary.BigEndian.AppendUint32(append(w.b, 0xdb), uint32(n))
	}
	w.b = append(w.b, v...)
}

// header writes a length: fix (below 16, code fix|n), 16 or 32 bits.
func (w *mpWriter) header(n int, fix, c16, c32 byte) {
	switch {
	case n < 16:
		w.b = append(w.b, fix|byte(n))
	case n <= math.MaxUint16:
		w.b = binary.BigEndian.AppendUint16(append(w.b, c16), uint16(n))
	default:
		w.b = binary.BigEndian.AppendUint32(append(w.b, c32), uint32(n))
	}
}

func (w *mpWriter) EncodeArrayLen(n int) { w.header(n, 0x90, 0xdc, 0xdd) }
func (w *mpWriter) EncodeMapLen(n int)   { w.header(n, 0x80, 0xde, 0xdf) }

// keyHash reads a key that is a block hash: a decimal or 0x-hex u64, as
// Mooncake's publisher reads them. By hand: strconv's error for every key
// that is not one would allocate, twice per event.
func keyHash(key string) (uint64, bool) {
	base, digits := uint64(10), key
	if len(key) > 2 && key[0] == '0' && (key[1] == 'x' || key[1] == 'X') {
		base, digits = 16, key[2:]
	}
	if digits == "" || len(digits) > 20 {
		return 0, false
	}
	var v uint64
	for i := 0; i < len(digits); i++ {
		c := digits[i]
		var d uint64
		switch {
		case '0' <= c && c <= '9':
			d = uint64(c - '0')
		case base == 16 && 'a' <= c && c <= 'f':
			d = uint64(c-'a') + 10
		case base == 16 && 'A' <= c && c <= 'F':
			d = uint64(c-'A') + 10
		default:
			return 0, false
		}
		if v > (1<<64-1-d)/base {
			return 0, false // past u64
		}
		v = v*base + d
	}
	return v, true
}

// batch encodes evs as a KVEventBatch, [ts, events, data_parallel_rank]
// with ts in seconds (a map of those three names in the map format), and returns it, the events in it and those skipped
// (keys that are not hashes, without --kv_events_emit_object_key).
// Each event is a map: the engines' tagged-struct fields (type and their
// names; decoders ignore the keys they do not know) and RFC #1527's. It
// appends to one buffer (mpWriter): the publisher's rate is bound by this
// loop (bench/kvevents).
func (e *kvEncoder) batch(p *kvPublisher, evs []master.Event) ([]byte, int, uint64) {
	e.w.b = e.w.b[:0]
	o := p.o
	n := 0
	var skipped uint64
	e.hashes = e.hashes[:0]
	for i := range evs {
		ev := &evs[i]
		hash, isHash := keyHash(ev.Key)
		e.hashes = append(e.hashes, keyHashOf{hash, isHash})
		if ev.Kind != master.EventAllCleared && !isHash {
			skipped++
			if !o.ObjectKey {
				continue
			}
		}
		n++
	}
	if n == 0 {
		return nil, 0, skipped
	}
	w := &e.w
	ts := float64(p.now().UnixNano()) / 1e9
	if o.Format == kvFormatMap {
		w.EncodeMapLen(3)
		w.EncodeString("ts")
		w.EncodeFloat64(ts)
		w.EncodeString("events")
	} else {
		w.EncodeArrayLen(3)
		w.EncodeFloat64(ts)
	}
	w.EncodeArrayLen(n)
	for i := range evs {
		ev, h := &evs[i], e.hashes[i]
		if ev.Kind != master.EventAllCleared && !h.isHash && !o.ObjectKey {
			continue
		}
		p.eventID++
		e.event(p, ev, h.hash, h.isHash)
	}
	if o.Format == kvFormatMap {
		w.EncodeString("data_parallel_rank")
	}
	w.EncodeUint(uint64(o.DPRank))
	return bytes.Clone(w.b), n, skipped
}

// event writes one event's map (see batch): its head and tail, the same
// for every event of its kind (kvFixed), around the fields that vary.
func (e *kvEncoder) event(p *kvPublisher, ev *master.Event, hash uint64, isHash bool) {
	if e.fixed == nil {
		e.fixed = kvFixedParts(p.o)
	}
	w, o, f := &e.w, p.o, &e.fixed[ev.Kind]
	w.b = append(w.b, f.head...)
	w.EncodeString("event_id")
	w.EncodeUint(p.eventID)
	w.EncodeString("timestamp")
	w.EncodeInt(ev.At / 1e6)
	if ev.Kind != master.EventAllCleared {
		if o.LegacyCompat {
			w.EncodeString("block_hashes")
			if isHash {
				w.EncodeArrayLen(1)
				w.EncodeInt(int64(hash)) // the engines' hashes are signed 64-bit
			} else {
				w.EncodeArrayLen(0)
			}
		}
		w.EncodeString("seq_hashes")
		if isHash {
			w.EncodeArrayLen(1)
			w.EncodeUint(hash)
		} else {
			w.EncodeArrayLen(0)
		}
		if o.ObjectKey {
			kv(w, "object_key", ev.Key)
		}
		kv(w, "medium", ev.Medium.String())
		tenant := ev.Tenant
		if tenant == "" {
			tenant = o.TenantID
		}
		kv(w, "tenant_id", tenant)
	}
	w.b = append(w.b, f.tail...)
}

// kvFixed is what every event of a kind has alike, encoded once: the
// map's header and tag (head), and the fields from the flags (tail).
type kvFixed struct{ head, tail []byte }

// kvFixedParts encodes each kind's fixed parts under o.
func kvFixedParts(o KVEventsOptions) []kvFixed {
	out := make([]kvFixed, master.EventAllCleared+1)
	for _, kind := range []master.EventKind{master.EventStored, master.EventRemoved, master.EventAllCleared} {
		stored := kind == master.EventStored
		legacy, rfc := "AllBlocksCleared", "cleared"
		switch kind {
		case master.EventStored:
			legacy, rfc = "BlockStored", "stored"
		case master.EventRemoved:
			legacy, rfc = "BlockRemoved", "removed"
		}
		// The map's length: event_id, timestamp, event_type, backend_id
		// for all; 10 more for stored and removed (seq_hashes, medium,
		// tenant_id, group_id, model_name, additional_salt, lora_name,
		// block_size, dp_rank, base_block_idx), 2 more when stored
		// (parent_hash, token_ids); object_key; the engines' type, and
		// block_hashes, with parent_block_hash and lora_id when stored.
		fields := 4
		if kind != master.EventAllCleared {
			fields += 10
			if stored {
				fields += 2
			}
			if o.ObjectKey {
				fields++
			}
			if o.LegacyCompat {
				fields++
				if stored {
					fields += 2
				}
			}
		}
		if o.LegacyCompat {
			fields++
		}
		var w mpWriter
		w.EncodeMapLen(fields)
		// The tag first: msgspec finds it anywhere, other decoders may not.
		if o.LegacyCompat {
			kv(&w, "type", legacy)
		}
		head := w.b
		w = mpWriter{}
		kv(&w, "event_type", rfc)
		kv(&w, "backend_id", o.BackendID)
		if kind != master.EventAllCleared {
			if o.LegacyCompat && stored {
				w.EncodeString("parent_block_hash")
				w.EncodeNil()
				w.EncodeString("lora_id")
				w.EncodeNil()
			}
			w.EncodeString("group_id")
			w.EncodeNil()
			optKV(&w, "model_name", o.ModelName)
			optKV(&w, "additional_salt", o.AdditionalSalt)
			optKV(&w, "lora_name", o.LoraName)
			w.EncodeString("block_size")
			w.EncodeUint(uint64(o.BlockSize))
			w.EncodeString("dp_rank")
			w.EncodeUint(uint64(o.DPRank))
			w.EncodeString("base_block_idx")
			if stored {
				// A master's key is one block on its own: depth 0, no
				// parent, its tokens unknown here (an empty list the
				// engines' decoders accept where null they would not).
				w.EncodeUint(0)
				w.EncodeString("parent_hash")
				w.EncodeNil()
				w.EncodeString("token_ids")
				w.EncodeArrayLen(0)
			} else {
				w.EncodeNil()
			}
		}
		out[kind] = kvFixed{head: head, tail: w.b}
	}
	return out
}

func kv(w *mpWriter, name, v string) {
	w.EncodeString(name)
	w.EncodeString(v)
}

// optKV writes v, or nil when empty (Mooncake's unset field).
func optKV(w *mpWriter, name, v string) {
	w.EncodeString(name)
	if v == "" {
		w.EncodeNil()
		return
	}
	w.EncodeString(v)
}
