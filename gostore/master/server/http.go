// http.go defines the operator endpoints and the Prometheus metrics.

package server

import (
	"bufio"
	"encoding/json"
	"net/http"
	"strconv"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/gostore/gostore/gostore/master"
	"github.com/gostore/gostore/gostore/wire"
)

type metrics struct {
	reg     *prometheus.Registry
	calls   *prometheus.CounterVec
	latency *prometheus.HistogramVec
	// Per-op series resolved once: a label lookup per request measured a
	// visible share of the master's CPU at 100k+ requests/s.
	opLatency [64]prometheus.Observer
	opCalls   [64]sync.Map // wire.Code -> prometheus.Counter
	mc        *mcMetrics   // Mooncake's series
}

// newMetrics registers on a private registry: the master may live inside a
// Python process next to other Go code, so the global registry is off limits.
func newMetrics(core *master.Core) *metrics {
	m := &metrics{reg: prometheus.NewRegistry()}
	m.calls = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "gostore_master_rpc_total", Help: "Master RPCs answered, by operation and result code.",
	}, []string{"op", "code"})
	m.latency = prometheus.NewHistogramVec(prometheus.HistogramOpts{
		Name: "gostore_master_rpc_seconds", Help: "Time the master spent on an RPC, by operation.",
		Buckets: prometheus.ExponentialBuckets(1e-6, 4, 10),
	}, []string{"op"})
	m.reg.MustRegister(m.calls, m.latency)
	for op := wire.Op(1); op.Valid(); op++ {
		m.opLatency[op] = m.latency.WithLabelValues(op.String())
	}
	st := core.Stats()
	counter := func(name, help string, f func() int64) {
		m.reg.MustRegister(prometheus.NewCounterFunc(prometheus.CounterOpts{Name: name, Help: help},
			func() float64 { return float64(f()) }))
	}
	counter("gostore_master_put_start_total", "Keys asked for by PutStart.", st.PutStarts.Load)
	counter("gostore_master_put_end_total", "Keys asked for by PutEnd.", st.PutEnds.Load)
	counter("gostore_master_put_revoke_total", "Keys revoked by PutRevoke.", st.PutRevokes.Load)
	counter("gostore_master_get_total", "Keys asked for by GetReplicas.", st.Gets.Load)
	counter("gostore_master_get_miss_total", "GetReplicas keys that were missing.", st.GetMisses.Load)
	counter("gostore_master_remove_total", "Objects removed.", st.Removes.Load)
	counter("gostore_master_alloc_failure_total", "Puts that found no space.", st.AllocFailures.Load)
	counter("gostore_master_clients_expired_total", "Clients dropped after client_ttl.", st.ClientsExpired.Load)
	counter("gostore_master_clients_left_total", "Clients that closed and said so.", st.ClientsLeft.Load)
	counter("gostore_master_clients_taken_over_total", "Dead clients whose segment a new client of the same name took over.", st.ClientsTakenOver.Load)
	counter("gostore_master_free_error_total", "Allocator frees that broke an invariant (bugs).", st.FreeErrors.Load)
	counter("gostore_master_put_taken_over_total", "Abandoned puts taken over by a new put of the key.", st.PutsTakenOver.Load)
	counter("gostore_master_put_of_dead_client_total", "Unfinished puts dropped because their writer died.", st.PutsOfDeadClients.Load)
	counter("gostore_master_discarded_released_total", "Quarantined ranges of taken-over puts released.", st.DiscardedReleased.Load)
	counter("gostore_master_eviction_pass_total", "Eviction passes run.", st.EvictionPasses.Load)
	counter("gostore_master_evicted_object_total", "Objects evicted.", st.EvictedObjects.Load)
	counter("gostore_master_evicted_bytes_total", "Replica bytes freed by eviction.", st.EvictedBytes.Load)
	counter("gostore_master_upsert_start_total", "Keys asked for by UpsertStart.", st.UpsertStarts.Load)
	counter("gostore_master_upsert_in_place_total", "Upserts that rewrote an object in place.", st.UpsertsInPlace.Load)
	counter("gostore_master_write_preempted_total", "Unfinished writes preempted by an upsert.", st.WritesPreempted.Load)
	counter("gostore_master_task_created_total", "Replica tasks created.", st.TasksCreated.Load)
	counter("gostore_master_task_succeeded_total", "Replica tasks that succeeded.", st.TasksSucceeded.Load)
	counter("gostore_master_task_failed_total", "Replica tasks that failed.", st.TasksFailed.Load)
	counter("gostore_master_offloaded_total", "Objects that gained a LOCAL_DISK replica.", st.Offloaded.Load)
	counter("gostore_master_eviction_offload_wait_total", "Objects eviction left for their offload first.", st.EvictionsOffloadWait.Load)
	counter("gostore_master_puts_reclaimed_total", "Unfinished writes reclaimed after put_start_discard_timeout.", st.PutsReclaimed.Load)
	counter("gostore_master_disk_recovered_total", "Disk copies clients re-registered after a restart.", st.DiskRecovered.Load)
	hs := core.HotReplicaStats()
	counter("gostore_master_hot_objects_total", "Objects whose reads within one heat window reached the dynamic replication threshold.", hs.Hot.Load)
	counter("gostore_master_hot_replica_queued_total", "Hot objects queued for an extra memory replica (enforce).", hs.Queued.Load)
	counter("gostore_master_hot_replica_started_total", "Extra-replica tasks started for hot objects.", hs.Started.Load)
	counter("gostore_master_hot_replica_added_total", "Extra memory replicas of hot objects that became readable.", hs.Added.Load)
	counter("gostore_master_hot_replica_failed_total", "Extra-replica tasks that ended without a replica.", hs.Failed.Load)
	counter("gostore_master_hot_replica_dropped_total", "Extra replicas of hot objects dropped under memory pressure.", hs.Dropped.Load)
	counter("gostore_master_hot_replica_skipped_total", "Queued hot objects let go without a task: the pool was at or above its high watermark.", hs.Skipped.Load)
	m.reg.MustRegister(prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "gostore_master_hot_replicas",
		Help: "Extra memory replicas of hot objects that exist now."}, func() float64 { return float64(core.HotReplicasLive()) }))
	gauge := func(name, help string, f func(master.Totals) float64) {
		m.reg.MustRegister(prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: name, Help: help},
			func() float64 { return f(core.Totals()) }))
	}
	gauge("gostore_master_segments", "Mounted segments.", func(t master.Totals) float64 { return float64(t.Segments) })
	gauge("gostore_master_capacity_bytes", "Bytes contributed to the pool.", func(t master.Totals) float64 { return float64(t.Capacity) })
	gauge("gostore_master_used_bytes", "Bytes allocated to replicas.", func(t master.Totals) float64 { return float64(t.Used) })
	gauge("gostore_master_objects", "Objects in the index.", func(t master.Totals) float64 { return float64(t.Objects) })
	m.reg.MustRegister(prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "gostore_master_clients", Help: "Clients alive (pinged within client_ttl)."},
		func() float64 { return float64(core.Clients()) }))
	m.mc = newMCMetrics(m.reg, core)
	if core.Config().MultiTenants {
		m.reg.MustRegister(tenantCollector{core})
	}
	return m
}

func (m *metrics) observe(op wire.Op, code wire.Code, took time.Duration) {
	if !op.Valid() {
		return
	}
	c, ok := m.opCalls[op].Load(code)
	if !ok {
		c, _ = m.opCalls[op].LoadOrStore(code, m.calls.WithLabelValues(op.String(), strconv.Itoa(int(code))))
	}
	c.(prometheus.Counter).Inc()
	m.opLatency[op].Observe(took.Seconds())
}

// openHTTP names the endpoints served without authentication: numbers
// and liveness, nothing that names a key or a client.
func openHTTP(path string) bool { return path == "/metrics" || path == "/health" }

func (s *Server) httpHandler() http.Handler {
	mux := http.NewServeMux()
	mux.Handle("/metrics", promhttp.HandlerFor(s.metrics.reg, promhttp.HandlerOpts{}))
	mux.HandleFunc("/health", func(w http.ResponseWriter, r *http.Request) {
		w.Write([]byte("OK\n"))
	})
	if s.opts.EnableHA {
		mux.HandleFunc(snapshotPath, serveSnapshot(s.opts.StateDir, s.log))
	}
	mux.HandleFunc("/kv_events/status", func(w http.ResponseWriter, r *http.Request) {
		writeJSON(w, s.events.status())
	})
	mux.HandleFunc("/get_all_segments", func(w http.ResponseWriter, r *http.Request) {
		writeJSON(w, s.core.Segments())
	})
	mux.HandleFunc("/query_key", func(w http.ResponseWriter, r *http.Request) {
		key := r.URL.Query().Get("key")
		if key == "" {
			http.Error(w, "missing ?key=", http.StatusBadRequest)
			return
		}
		scoped := []string{key}
		if err := s.httpKeys(r, scoped); err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		info, ok := s.core.QueryKey(scoped[0])
		info.Key = key
		if !ok {
			http.Error(w, "key not found", http.StatusNotFound)
			return
		}
		writeJSON(w, info)
	})
	mux.HandleFunc("/get_all_keys", s.getAllKeys)
	mux.HandleFunc("/query_prefix", s.queryPrefix)
	mux.HandleFunc("/api/v1/tenant_quotas", s.tenantQuotas)
	return mux
}

// getAllKeys answers Mooncake's /get_all_keys: every key, one a line;
// under --enable_multi_tenants those of ?tenant_id= (the default tenant's
// without it, as Mooncake lists). The keys are written a shard at a time,
// none held under a lock while the client reads.
func (s *Server) getAllKeys(w http.ResponseWriter, r *http.Request) {
	tenant, err := s.tenantOf(r.URL.Query().Get("tenant_id"))
	if err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	w.Header().Set("Content-Type", "text/plain; version=0.0.4")
	bw := bufio.NewWriter(w)
	s.core.KeysOf(tenant, func(keys []string) bool {
		for _, k := range keys {
			bw.WriteString(k)
			if err := bw.WriteByte('\n'); err != nil {
				return false // the client went away
			}
		}
		return true
	})
	bw.Flush()
}

func writeJSON(w http.ResponseWriter, v any) {
	w.Header().Set("Content-Type", "application/json")
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	enc.Encode(v)
}
