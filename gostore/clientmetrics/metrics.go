// metrics.go defines Metrics: the series and the calls that record them.

package clientmetrics

import (
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/gostore/gostore/gostore/wire"
)

// LatencyBuckets are the upper bounds, in microseconds, of every latency
// histogram: Mooncake's client uses the same, so quantiles computed from
// either compare.
var LatencyBuckets = []float64{
	50, 75, 125, 150, 200, 250, 300, 400, 500, 750,
	1000, 1500, 2000, 3000, 5000, 7000, 15000, 20000, 50000,
	100000, 200000, 500000, 1e6, 2e6, 5e6, 1e7, 2e7,
}

// The label every series carries: a gostore client is always a "real"
// client in Mooncake's terms (one that owns memory and talks to the
// master itself).
const (
	modeLabel = "client_mode"
	modeValue = "real"
)

// Dir tells reads from writes.
type Dir int

const (
	Read Dir = iota
	Write
)

// Options describe the client being measured.
type Options struct {
	// Tenant is the client's tenant_id, shown in the summary.
	Tenant string
	// Now is the clock (nil: time.Now); tests pass their own.
	Now func() time.Time
}

// Metrics holds one client's series. Its methods are safe for concurrent
// use, and do nothing on a nil *Metrics.
type Metrics struct {
	reg    *prometheus.Registry
	tenant string
	now    func() time.Time
	began  time.Time

	bytes     [2]prometheus.Counter   // by Dir
	latency   [2]prometheus.Histogram // by Dir, single-object calls
	batchLat  [2]prometheus.Histogram // by Dir, calls of several objects
	rpcCalls  *prometheus.CounterVec
	rpcLat    *prometheus.HistogramVec
	rpcErrors *prometheus.CounterVec
	opCount   [2]*prometheus.CounterVec
	opBytes   [2]*prometheus.CounterVec
	opLat     [2]*prometheus.HistogramVec
	spotReads [2]prometheus.Counter // [0] sent to a spot, [1] of those confirmed

	// Series resolved once per op: a label lookup per RPC is avoidable work.
	rpc [64]atomic.Pointer[rpcSeries]
	ops [2]sync.Map // op name -> *opSeries
}

type rpcSeries struct {
	calls   prometheus.Counter
	latency prometheus.Observer
}

type opSeries struct {
	count, bytes prometheus.Counter
	latency      prometheus.Observer
}

// New returns Metrics on a registry of their own.
func New(opt Options) *Metrics {
	m := &Metrics{reg: prometheus.NewRegistry(), tenant: opt.Tenant, now: opt.Now}
	if m.now == nil {
		m.now = time.Now
	}
	m.began = m.now()
	mode := prometheus.Labels{modeLabel: modeValue}
	counter := func(name, help string) prometheus.Counter {
		c := prometheus.NewCounter(prometheus.CounterOpts{Name: name, Help: help, ConstLabels: mode})
		m.reg.MustRegister(c)
		return c
	}
	histogram := func(name, help string) prometheus.Histogram {
		h := prometheus.NewHistogram(prometheus.HistogramOpts{Name: name, Help: help, ConstLabels: mode, Buckets: LatencyBuckets})
		m.reg.MustRegister(h)
		return h
	}
	counterVec := func(name, help string, labels ...string) *prometheus.CounterVec {
		c := prometheus.NewCounterVec(prometheus.CounterOpts{Name: name, Help: help, ConstLabels: mode}, labels)
		m.reg.MustRegister(c)
		return c
	}
	histogramVec := func(name, help string, labels ...string) *prometheus.HistogramVec {
		h := prometheus.NewHistogramVec(prometheus.HistogramOpts{Name: name, Help: help, ConstLabels: mode, Buckets: LatencyBuckets}, labels)
		m.reg.MustRegister(h)
		return h
	}
	m.bytes[Read] = counter("mooncake_transfer_read_bytes", "Bytes this client read into callers' memory.")
	m.bytes[Write] = counter("mooncake_transfer_write_bytes", "Bytes this client wrote to replicas (each replica counts).")
	m.latency[Read] = histogram("mooncake_transfer_get_latency", "Time a one-object get spent moving its bytes (us).")
	m.latency[Write] = histogram("mooncake_transfer_put_latency", "Time a one-object put spent moving its bytes, per round of transfers (us).")
	m.batchLat[Read] = histogram("mooncake_transfer_batch_get_latency", "Time a get of several objects spent moving their bytes (us).")
	m.batchLat[Write] = histogram("mooncake_transfer_batch_put_latency", "Time a put of several objects spent moving their bytes, per round of transfers (us).")
	m.rpcCalls = counterVec("mooncake_client_rpc_count", "RPCs this client made, by name.", "rpc_name")
	m.rpcLat = histogramVec("mooncake_client_rpc_latency", "Time an RPC of this client took, by name (us).", "rpc_name")
	m.rpcErrors = counterVec("gostore_client_rpc_errors", "RPCs of this client that failed, by name and error code.", "rpc_name", "code")
	m.opCount[Read] = counterVec("mooncake_transfer_read_operation_count", "Read calls that found at least one object, by interface.", "op_name")
	m.opBytes[Read] = counterVec("mooncake_transfer_read_operation_bytes", "Bytes returned by read calls, by interface.", "op_name")
	m.opLat[Read] = histogramVec("mooncake_transfer_read_operation_latency", "Time a read call took end to end, by interface (us).", "op_name")
	m.opCount[Write] = counterVec("mooncake_transfer_write_operation_count", "Write calls that stored at least one object, by interface.", "op_name")
	m.opBytes[Write] = counterVec("mooncake_transfer_write_operation_bytes", "Bytes stored by write calls, by interface.", "op_name")
	m.opLat[Write] = histogramVec("mooncake_transfer_write_operation_latency", "Time a write call took end to end, by interface (us).", "op_name")
	m.spotReads[0] = counter("gostore_client_spot_reads", "Single-object gets over TCP that read the object where this client last wrote or found it while asking the master.")
	m.spotReads[1] = counter("gostore_client_spot_reads_confirmed", "Spot reads whose bytes the master's answer confirmed (the others were read again).")
	return m
}

// Registry is where the series live (what /metrics serves).
func (m *Metrics) Registry() *prometheus.Registry { return m.reg }

func micros(d time.Duration) float64 { return float64(d) / float64(time.Microsecond) }

// RPC records one RPC as it returned; it has the signature of
// rpc.ClientOptions.Observe.
func (m *Metrics) RPC(op wire.Op, d time.Duration, err error) {
	if m == nil {
		return
	}
	var s *rpcSeries
	if int(op) < len(m.rpc) {
		s = m.rpc[op].Load()
	}
	if s == nil {
		name := op.String()
		s = &rpcSeries{calls: m.rpcCalls.WithLabelValues(name), latency: m.rpcLat.WithLabelValues(name)}
		if int(op) < len(m.rpc) {
			m.rpc[op].Store(s)
		}
	}
	s.calls.Inc()
	s.latency.Observe(micros(d))
	if err != nil {
		m.rpcErrors.WithLabelValues(op.String(), strconv.Itoa(int(wire.CodeOf(err)))).Inc()
	}
}

// Transfer records the transfers of one call, or of one round of them:
// bytes moved in dir and the time they took. objects is how many objects
// the call was about: one goes to the get/put histogram, more to the
// batch one. A call that moved nothing is not recorded.
func (m *Metrics) Transfer(dir Dir, objects int, bytes uint64, d time.Duration) {
	if m == nil || bytes == 0 {
		return
	}
	m.bytes[dir].Add(float64(bytes))
	if objects > 1 {
		m.batchLat[dir].Observe(micros(d))
	} else {
		m.latency[dir].Observe(micros(d))
	}
}

// Spot records a get that read from a spot (client/spots.go), and whether
// the master's answer confirmed what it read.
func (m *Metrics) Spot(confirmed bool) {
	if m == nil {
		return
	}
	m.spotReads[0].Inc()
	if confirmed {
		m.spotReads[1].Inc()
	}
}

// Op records one interface-level call that succeeded for at least one
// object: its name (the client's choice: "put", "get_buffer", ...), the
// bytes it stored or returned, and how long it took end to end.
func (m *Metrics) Op(dir Dir, name string, bytes uint64, d time.Duration) {
	if m == nil {
		return
	}
	v, ok := m.ops[dir].Load(name)
	if !ok {
		v, _ = m.ops[dir].LoadOrStore(name, &opSeries{
			count:   m.opCount[dir].WithLabelValues(name),
			bytes:   m.opBytes[dir].WithLabelValues(name),
			latency: m.opLat[dir].WithLabelValues(name),
		})
	}
	s := v.(*opSeries)
	s.count.Inc()
	s.bytes.Add(float64(bytes))
	s.latency.Observe(micros(d))
}
