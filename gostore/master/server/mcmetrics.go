// mcmetrics.go serves, next to gostore_master_*, the series of Mooncake
// 0.3.13's master (master_*, and a few unprefixed ones) that this master
// can back with real values, so that dashboards built on Mooncake read it
// unchanged. docs/master-flags.md lists those left out.

package server

import (
	"sync/atomic"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/gostore/gostore/gostore/master"
	"github.com/gostore/gostore/gostore/wire"
)

// mcMetrics counts the RPCs under Mooncake's names.
type mcMetrics struct {
	putStart, putEnd, putRevoke, get, exist, remove, removeRegex, removeAll    mcOp
	mount, unmount, ping, copyTask, moveTask, queryTask, updateTask, evictDisk mcOp

	allocFailures, partialAllocations prometheus.Counter
	// Gets, per key: all, those served, and where from.
	gets, validGets, memHits, memHitBytes, fileHits, fileHitBytes prometheus.Counter
}

// mcOp is one operation's series. Mooncake has single-key RPCs
// (master_put_start_requests_total...) and batch ones
// (master_batch_put_start_*); this master's RPCs all carry lists, so a call
// with one key counts as Mooncake's single RPC and a longer one as its
// batch RPC, as Mooncake's clients send them for one key and for many.
type mcOp struct {
	requests, failures prometheus.Counter
	batch              *mcBatch // nil: Mooncake has no batch series for the op
	// perKey: every key counts as a request (Mooncake's BatchRemove counts
	// that way in master_remove_*).
	perKey bool
}

type mcBatch struct {
	requests, items, failures, partial, failedItems prometheus.Counter
}

// record counts a call on keys keys, failed of which failed.
func (op *mcOp) record(keys, failed int) {
	switch {
	case op.perKey:
		op.requests.Add(float64(keys))
		op.failures.Add(float64(failed))
	case op.batch == nil || keys == 1:
		op.requests.Inc()
		if failed > 0 {
			op.failures.Inc()
		}
	default:
		b := op.batch
		b.requests.Inc()
		b.items.Add(float64(keys))
		b.failedItems.Add(float64(failed))
		switch {
		case failed > 0 && failed == keys:
			b.failures.Inc()
		case failed > 0:
			b.partial.Inc()
		}
	}
}

// call counts a call whose outcome is one error.
func (op *mcOp) call(err error) {
	if err != nil {
		op.record(1, 1)
	} else {
		op.record(1, 0)
	}
}

// codes counts a call with a result code per key.
func (op *mcOp) codes(codes []wire.Code, failed func(wire.Code) bool) {
	n := 0
	for _, c := range codes {
		if failed(c) {
			n++
		}
	}
	op.record(len(codes), n)
}

func notOK(c wire.Code) bool { return c != wire.OK }

// existFailed: a missing key is Exist's "false", not a failure.
func existFailed(c wire.Code) bool { return c != wire.OK && c != wire.ErrObjectNotFound }

func newMCMetrics(reg *prometheus.Registry, core *master.Core) *mcMetrics {
	counter := func(name, help string) prometheus.Counter {
		c := prometheus.NewCounter(prometheus.CounterOpts{Name: name, Help: help})
		reg.MustRegister(c)
		return c
	}
	op := func(name, what string, batch bool) mcOp {
		o := mcOp{
			requests: counter("master_"+name+"_requests_total", what+" calls (one key each when the call carries keys)."),
			failures: counter("master_"+name+"_failures_total", what+" calls that failed."),
		}
		if batch {
			b := "master_batch_" + name
			o.batch = &mcBatch{
				requests:    counter(b+"_requests_total", what+" calls with more than one key."),
				items:       counter(b+"_items_total", "Keys in "+what+" calls with more than one key."),
				failures:    counter(b+"_failures_total", what+" calls with more than one key, all of which failed."),
				partial:     counter(b+"_partial_successes_total", what+" calls with more than one key, some of which failed."),
				failedItems: counter(b+"_failed_items_total", "Keys that failed in "+what+" calls with more than one key."),
			}
		}
		return o
	}
	m := &mcMetrics{
		putStart:    op("put_start", "PutStart", true),
		putEnd:      op("put_end", "PutEnd", true),
		putRevoke:   op("put_revoke", "PutRevoke", true),
		get:         op("get_replica_list", "GetReplicas", true),
		exist:       op("exist_key", "Exist", true),
		remove:      op("remove", "Remove (per key)", false),
		removeRegex: op("remove_by_regex", "RemoveByRegex", false),
		removeAll:   op("remove_all", "RemoveAll", false),
		mount:       op("mount_segment", "MountSegment", false),
		unmount:     op("unmount_segment", "UnmountSegment", false),
		ping:        op("ping", "Ping", false),
		copyTask:    op("create_copy_task", "CreateTask (copy)", false),
		moveTask:    op("create_move_task", "CreateTask (move)", false),
		queryTask:   op("query_task", "QueryTask", false),
		updateTask:  op("update_task", "TaskDone", false),
		evictDisk:   op("evict_disk_replica", "EvictDiskReplicas", false),

		allocFailures:      counter("master_put_start_alloc_failures_total", "PutStart keys that found no space."),
		partialAllocations: counter("master_put_start_partial_allocations_total", "PutStart keys given fewer replicas than asked for."),
		gets:               counter("total_get_nums_", "Keys looked up by GetReplicas."),
		validGets:          counter("valid_get_nums_", "GetReplicas keys found readable."),
		memHits:            counter("mem_cache_hit_nums_", "GetReplicas keys served from memory replicas."),
		memHitBytes:        counter("mem_cache_hit_bytes_total", "Bytes of the GetReplicas keys served from memory replicas."),
		fileHits:           counter("file_cache_hit_nums_", "GetReplicas keys served from a disk copy only."),
		fileHitBytes:       counter("file_cache_hit_bytes_total", "Bytes of the GetReplicas keys served from a disk copy only."),
	}
	m.remove.perKey = true
	registerMCCoreSeries(reg, core)
	return m
}

// registerMCCoreSeries serves the core's own counts and gauges under
// Mooncake's names.
func registerMCCoreSeries(reg *prometheus.Registry, core *master.Core) {
	st := core.Stats()
	counter := func(name, help string, f func() int64) {
		reg.MustRegister(prometheus.NewCounterFunc(prometheus.CounterOpts{Name: name, Help: help},
			func() float64 { return float64(f()) }))
	}
	counter("master_attempted_evictions_total", "Eviction passes run.", st.EvictionPasses.Load)
	counter("master_successful_evictions_total", "Eviction passes that evicted objects or asked for their disk copies.", st.EvictionPassesEffective.Load)
	counter("master_evicted_key_count", "Objects evicted.", st.EvictedObjects.Load)
	counter("master_evicted_size_bytes", "Replica bytes freed by eviction.", st.EvictedBytes.Load)
	counter("master_put_start_discard_cnt", "Writes whose ranges went to the quarantine (taken over, abandoned, preempted, moved away).", st.Discarded.Load)
	counter("master_put_start_release_cnt", "Quarantined writes whose ranges were released.", st.DiscardedReleased.Load)
	gauge := func(name, help string, f func() float64) {
		reg.MustRegister(prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: name, Help: help}, f))
	}
	gauge("master_allocated_bytes", "Bytes allocated to replicas.", func() float64 { return float64(core.Totals().Used) })
	gauge("master_total_capacity_bytes", "Bytes of the mounted segments.", func() float64 { return float64(core.Totals().Capacity) })
	gauge("master_key_count", "Objects in the index.", func() float64 { return float64(core.Totals().Objects) })
	gauge("master_active_clients", "Clients alive (pinged within client_ttl).", func() float64 { return float64(core.Clients()) })
	ps := core.PromotionStats()
	for _, p := range []struct {
		name, help string
		n          *atomic.Int64
	}{
		{"admitted", "Disk reads that queued their object for promotion.", &ps.Admitted},
		{"completed", "Promotions whose memory replica the disk holder wrote.", &ps.Completed},
		{"completed_bytes", "Bytes promoted from disk copies to memory.", &ps.CompletedBytes},
		{"expired", "Promotions the disk holder did not report within put_start_release_timeout_sec.", &ps.Expired},
		{"failed", "Promotions the disk holder reported failed.", &ps.Failed},
		{"cancelled", "Promotions dropped because the object, its disk copy, its holder or room on the holder went away.", &ps.Cancelled},
		{"rejected_frequency", "Disk reads of objects read fewer than promotion_admission_threshold times.", &ps.RejectedFrequency},
		{"rejected_watermark", "Disk reads not promoted because the pool was at or above the eviction high watermark.", &ps.RejectedWatermark},
		{"rejected_cap", "Disk reads not promoted because promotion_queue_limit promotions were in flight.", &ps.RejectedCap},
	} {
		counter("master_promotion_"+p.name+"_total", p.help, p.n.Load)
	}
	gauge("master_promotion_in_flight", "Promotions queued or running.", func() float64 { return float64(core.PromotionInFlight()) })
	gauge("master_put_start_discarded_staging_size", "Bytes held in the quarantine.", func() float64 {
		_, b := core.Quarantined()
		return float64(b)
	})
	reg.MustRegister(censusCollector{core})
}

// censusCollector serves the gauges that need a look at every object, from
// one Census per scrape.
type censusCollector struct{ core *master.Core }

var (
	softPinDesc  = prometheus.NewDesc("master_soft_pin_key_count", "Objects whose soft pin is running.", nil, nil)
	memCacheDesc = prometheus.NewDesc("mem_cache_nums_", "Objects with a complete memory replica.", nil, nil)
	diskDesc     = prometheus.NewDesc("file_cache_nums_", "Objects with a disk copy in an SSD tier.", nil, nil)
)

func (censusCollector) Describe(ch chan<- *prometheus.Desc) {
	ch <- softPinDesc
	ch <- memCacheDesc
	ch <- diskDesc
}

func (c censusCollector) Collect(ch chan<- prometheus.Metric) {
	n := c.core.Census()
	ch <- prometheus.MustNewConstMetric(softPinDesc, prometheus.GaugeValue, float64(n.SoftPinned))
	ch <- prometheus.MustNewConstMetric(memCacheDesc, prometheus.GaugeValue, float64(n.InMemory))
	ch <- prometheus.MustNewConstMetric(diskDesc, prometheus.GaugeValue, float64(n.OnDisk))
}

// putStarted counts PutStart's per-key outcomes: failures, keys that found
// no space, and keys given fewer replicas than asked. An RPC error fails
// every key.
func (m *mcMetrics) putStarted(r *wire.PutStartReq, res []wire.PutStartResult, err error) {
	failed, want := 0, max(r.Config.ReplicaNum, 1)
	for _, x := range res {
		switch {
		case x.Code == wire.ErrNoAvailableHandle:
			m.allocFailures.Inc()
			failed++
		case x.Code != wire.OK:
			failed++
		case len(x.Replicas) < want:
			m.partialAllocations.Inc()
		}
	}
	if err != nil {
		failed = len(r.Keys)
	}
	m.putStart.record(len(r.Keys), failed)
}

// got counts GetReplicas' per-key outcomes as Mooncake's cache counters
// do: a readable key is a hit from memory when it has a memory replica,
// else from its disk copy.
func (m *mcMetrics) got(res []wire.GetResult) {
	failed := 0
	m.gets.Add(float64(len(res)))
	for _, x := range res {
		switch {
		case x.Code != wire.OK:
			failed++
		case len(x.Replicas) > 0:
			m.validGets.Inc()
			m.memHits.Inc()
			m.memHitBytes.Add(float64(x.Size))
		default:
			m.validGets.Inc()
			m.fileHits.Inc()
			m.fileHitBytes.Add(float64(x.Size))
		}
	}
	m.get.record(len(res), failed)
}
