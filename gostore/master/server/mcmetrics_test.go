package server

import (
	"bufio"
	"context"
	"os"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"testing"

	"github.com/gostore/gostore/gostore/rpc"
	"github.com/gostore/gostore/gostore/wire"
)

// mcLeftOut are the wheel's series this master cannot back with a real
// value (docs/master-flags.md says why, group by group).
var mcLeftOut = strings.Fields(`
	master_nof_allocated_bytes master_total_nof_capacity_bytes
	master_allocated_file_size_bytes master_total_file_capacity_bytes
	master_remount_segment_requests_total master_remount_segment_failures_total
	master_get_replica_list_by_regex_requests_total master_get_replica_list_by_regex_failures_total
	master_batch_query_ip_requests_total master_batch_query_ip_items_total master_batch_query_ip_failures_total
	master_batch_query_ip_partial_successes_total master_batch_query_ip_failed_items_total
	master_batch_replica_clear_requests_total master_batch_replica_clear_items_total master_batch_replica_clear_failures_total
	master_batch_replica_clear_partial_successes_total master_batch_replica_clear_failed_items_total
	master_copy_start_requests_total master_copy_start_failures_total master_copy_end_requests_total master_copy_end_failures_total
	master_copy_revoke_requests_total master_copy_revoke_failures_total master_move_start_requests_total master_move_start_failures_total
	master_move_end_requests_total master_move_end_failures_total master_move_revoke_requests_total master_move_revoke_failures_total
	master_fetch_tasks_requests_total master_fetch_tasks_failures_total
	master_promotion_candidate_admission_rejected_total master_promotion_candidate_admitted_total
	master_promotion_candidate_dropped_limit_total master_promotion_candidate_expired_evaluated_total
	master_promotion_candidate_expired_unevaluated_total master_promotion_candidate_recorded_total
	ha_oplog_applied_sequence_id ha_oplog_last_sequence_id ha_oplog_pending_entries ha_oplog_standby_lag
	ha_pending_mutation_queue_size ha_standby_state`)

func wheelMetrics(t *testing.T) map[string]string {
	t.Helper()
	f, err := os.Open("testdata/mooncake-0.3.13-master-metrics.txt")
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	out := map[string]string{}
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if line := sc.Text(); line != "" && line[0] != '#' {
			name, typ, _ := strings.Cut(line, "\t")
			out[name] = typ
		}
	}
	return out
}

var typeLine = regexp.MustCompile(`(?m)^# TYPE (\S+) (\S+)$`)

// scrape returns /metrics' unlabelled values and the types of the series
// that are not gostore's own.
func scrape(t *testing.T, s *Server) (values map[string]float64, types map[string]string) {
	t.Helper()
	_, body := get(t, "http://"+s.HTTPAddr()+"/metrics")
	values, types = map[string]float64{}, map[string]string{}
	for _, m := range typeLine.FindAllStringSubmatch(body, -1) {
		if !strings.HasPrefix(m[1], "gostore_") {
			types[m[1]] = m[2]
		}
	}
	for _, line := range strings.Split(body, "\n") {
		if name, v, ok := strings.Cut(line, " "); ok && line[0] != '#' && !strings.Contains(name, "{") {
			x, err := strconv.ParseFloat(v, 64)
			if err != nil {
				t.Fatalf("%q: %v", line, err)
			}
			values[name] = x
		}
	}
	return values, types
}

func TestMooncakeMetricNames(t *testing.T) {
	s := startForMetrics(t)
	wheel := wheelMetrics(t)
	_, served := scrape(t, s)
	for name, typ := range served {
		if wheel[name] != typ {
			t.Errorf("%s (%s) is not a %s series of Mooncake 0.3.13", name, typ, typ)
		}
	}
	for _, name := range mcLeftOut {
		if _, ok := served[name]; ok || wheel[name] == "" {
			t.Errorf("%s: left out, but served (%v) or not Mooncake's", name, ok)
		}
	}
	var missing []string
	for name := range wheel {
		if _, ok := served[name]; !ok && !contains(mcLeftOut, name) {
			missing = append(missing, name)
		}
	}
	sort.Strings(missing)
	if len(missing) > 0 {
		t.Errorf("neither served nor listed as left out: %v", missing)
	}
	if len(served) != 89 || len(wheel) != 133 {
		t.Errorf("%d series served of the wheel's %d", len(served), len(wheel))
	}
}

func contains(list []string, s string) bool {
	for _, x := range list {
		if x == s {
			return true
		}
	}
	return false
}

func startForMetrics(t *testing.T) *Server {
	t.Helper()
	o := parse(t, "--rpc_address=127.0.0.1", "--rpc_port=0", "--metrics_port=0", "--log_level=error")
	s, err := Start(o)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(s.Close)
	return s
}

// The series move with the calls: one-key calls count as Mooncake's single
// RPCs, longer ones as its batch RPCs.
func TestMooncakeMetricValues(t *testing.T) {
	s := startForMetrics(t)
	c := rpc.NewClient(s.Addr())
	defer c.Close()
	ctx := context.Background()
	call := func(op wire.Op, req, resp any) {
		t.Helper()
		if err := c.Call(ctx, op, req, resp); err != nil {
			t.Fatalf("%v: %v", op, err)
		}
	}
	call(wire.OpPing, &wire.PingReq{ClientID: "c1"}, &wire.PingResp{})
	call(wire.OpMountSegment, &wire.MountReq{Seg: wire.SegmentDesc{Name: "127.0.0.1:1", ClientID: "c1", Size: 1 << 20}}, &wire.MountResp{})
	put := func(keys ...string) {
		sizes := make([]uint64, len(keys))
		for i := range sizes {
			sizes[i] = 4096
		}
		var ps wire.PutStartResp
		call(wire.OpPutStart, &wire.PutStartReq{ClientID: "c1", Keys: keys, Sizes: sizes, Config: wire.ReplicaConfig{ReplicaNum: 2}}, &ps)
		call(wire.OpPutEnd, &wire.KeysReq{ClientID: "c1", Keys: keys}, &wire.CodesResp{})
	}
	put("a")
	put("b", "c", "a") // a exists: a partial success
	call(wire.OpGetReplicas, &wire.KeysReq{Keys: []string{"a"}}, &wire.GetReplicasResp{})
	call(wire.OpGetReplicas, &wire.KeysReq{Keys: []string{"b", "zz"}}, &wire.GetReplicasResp{})
	call(wire.OpExist, &wire.KeysReq{Keys: []string{"zz"}}, &wire.CodesResp{})
	call(wire.OpRemove, &wire.RemoveReq{Keys: []string{"c", "zz"}, Force: true}, &wire.CodesResp{})

	v, _ := scrape(t, s)
	for name, want := range map[string]float64{
		"master_key_count": 2, "master_allocated_bytes": 2 * 4096, "master_total_capacity_bytes": 1 << 20,
		"master_active_clients": 1, "mem_cache_nums_": 2, "file_cache_nums_": 0, "master_soft_pin_key_count": 0,
		"master_ping_requests_total": 1, "master_mount_segment_requests_total": 1, "master_mount_segment_failures_total": 0,
		"master_put_start_requests_total": 1, "master_put_start_failures_total": 0,
		"master_batch_put_start_requests_total": 1, "master_batch_put_start_items_total": 3,
		"master_batch_put_start_partial_successes_total": 1, "master_batch_put_start_failed_items_total": 1,
		"master_batch_put_start_failures_total": 0,
		// One segment cannot hold the two replicas asked for.
		"master_put_start_partial_allocations_total": 3, "master_put_start_alloc_failures_total": 0,
		"master_put_end_requests_total": 1, "master_batch_put_end_requests_total": 1, "master_batch_put_end_items_total": 3,
		"master_get_replica_list_requests_total": 1, "master_get_replica_list_failures_total": 0,
		"master_batch_get_replica_list_requests_total": 1, "master_batch_get_replica_list_partial_successes_total": 1,
		"total_get_nums_": 3, "valid_get_nums_": 2, "mem_cache_hit_nums_": 2, "mem_cache_hit_bytes_total": 2 * 4096,
		"file_cache_hit_nums_": 0, "file_cache_hit_bytes_total": 0,
		"master_exist_key_requests_total": 1, "master_exist_key_failures_total": 0,
		"master_remove_requests_total": 2, "master_remove_failures_total": 1,
	} {
		if got, ok := v[name]; !ok || got != want {
			t.Errorf("%s = %v (served %v), want %v", name, got, ok, want)
		}
	}
}
