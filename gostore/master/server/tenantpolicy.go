// tenantpolicy.go reads the tenants' quota policy from the file
// --tenant_quota_connector_uri names (Mooncake's YAML), puts it in force
// in the core, reads it again whenever the file changes, and serves the
// tenants' accounts as Mooncake's mooncake_tenant_* series and its
// GET /api/v1/tenant_quotas.

package server

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"os"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/gostore/gostore/gostore/master"
	"github.com/gostore/gostore/gostore/wire"
)

// policyPoll is how often the policy file is looked at: a change is in
// force within this long.
const policyPoll = time.Second

// policyStamp tells one version of the policy file from another: its
// modification time, size and bytes.
type policyStamp struct {
	mod  time.Time
	size int64
	body []byte
}

// loadTenantPolicy reads the policy at start: a policy that cannot be read
// or is not valid stops the master (a master that would refuse every
// tenant's writes, or admit them all, is no master to start).
func loadTenantPolicy(opts Options, core *master.Core, log *slog.Logger) (policyStamp, error) {
	if opts.TenantQuotaURI == "" {
		return policyStamp{}, nil
	}
	st, p, err := readPolicy(opts.TenantQuotaURI)
	if err != nil {
		return st, fmt.Errorf("--tenant_quota_connector_uri=%s: %w", opts.TenantQuotaURI, err)
	}
	core.SetTenantPolicy(p)
	log.Info("tenant quota policy in force", "file", opts.TenantQuotaURI, "tenants", len(p))
	return st, nil
}

// maxPolicyBytes bounds the policy file the master reads (a policy of
// thousands of tenants is some tens of KiB).
const maxPolicyBytes = 1 << 20

func readPolicy(path string) (policyStamp, master.TenantPolicy, error) {
	fi, err := os.Stat(path)
	if err != nil {
		return policyStamp{}, nil, err
	}
	if fi.Size() > maxPolicyBytes {
		return policyStamp{}, nil, fmt.Errorf("the policy file has %d bytes, over the %d this master reads", fi.Size(), maxPolicyBytes)
	}
	f, err := os.Open(path)
	if err != nil {
		return policyStamp{}, nil, err
	}
	defer f.Close()
	// Bounded again as read: the file may grow after the Stat.
	body, err := io.ReadAll(io.LimitReader(f, maxPolicyBytes+1))
	if err != nil {
		return policyStamp{}, nil, err
	}
	if len(body) > maxPolicyBytes {
		return policyStamp{}, nil, fmt.Errorf("the policy file has over %d bytes, the most this master reads", maxPolicyBytes)
	}
	st := policyStamp{mod: fi.ModTime(), size: fi.Size(), body: body}
	p, err := master.ParseTenantPolicy(body)
	return st, p, err
}

// watchTenantPolicy polls the policy file every policyPoll and puts each
// new valid version in force. A version that cannot be read or is not
// valid leaves the last good policy in force and is logged once.
func (s *Server) watchTenantPolicy(last policyStamp) {
	path := s.opts.TenantQuotaURI
	if path == "" {
		return
	}
	s.wg.Add(1)
	go func() {
		defer s.wg.Done()
		t := time.NewTicker(policyPoll)
		defer t.Stop()
		for {
			select {
			case <-s.stop:
				return
			case <-t.C:
			}
			fi, err := os.Stat(path)
			if err == nil && fi.ModTime().Equal(last.mod) && fi.Size() == last.size {
				continue
			}
			st, p, err := readPolicy(path)
			if st.mod.Equal(last.mod) && st.size == last.size && bytes.Equal(st.body, last.body) {
				continue // the same version (or still unreadable): acted on, or logged, already
			}
			last = st
			if err != nil {
				s.log.Error("tenant quota policy not reloaded: the last good one stays in force", "file", path, "err", err)
				continue
			}
			kept := s.core.SetTenantPolicy(p)
			s.log.Info("tenant quota policy reloaded", "file", path, "tenants", len(p))
			if len(kept) > 0 {
				s.log.Warn("tenants no longer in the policy still own objects: each keeps its last quota, its writes "+
					"refused, until its objects are removed or evicted", "tenants", kept)
			}
		}
	}()
}

// tenantCollector serves the core's tenant accounts as Mooncake's series.
type tenantCollector struct{ core *master.Core }

var (
	tenantGauges = []struct {
		d *prometheus.Desc
		v func(master.TenantSnapshot) float64
	}{
		{prometheus.NewDesc("mooncake_tenant_quota_requested_bytes", "Requested tenant quota bytes.", []string{"tenant_id"}, nil),
			func(t master.TenantSnapshot) float64 { return float64(t.RequestedQuotaBytes) }},
		{prometheus.NewDesc("mooncake_tenant_quota_effective_bytes", "Effective tenant quota bytes (its share of the pool).", []string{"tenant_id"}, nil),
			func(t master.TenantSnapshot) float64 { return float64(t.EffectiveQuotaBytes) }},
		{prometheus.NewDesc("mooncake_tenant_quota_charged_bytes", "Tenant quota charge in bytes (memory replicas, in-flight writes included).", []string{"tenant_id"}, nil),
			func(t master.TenantSnapshot) float64 { return float64(t.ChargedBytes) }},
		{prometheus.NewDesc("mooncake_tenant_quota_admission_closed", "Tenant quota admission closed flag.", []string{"tenant_id"}, nil),
			func(t master.TenantSnapshot) float64 { return b2f(t.AdmissionClosed) }},
		{prometheus.NewDesc("mooncake_tenant_quota_over_quota", "Tenant over-quota flag.", []string{"tenant_id"}, nil),
			func(t master.TenantSnapshot) float64 { return b2f(t.OverQuota) }},
		{prometheus.NewDesc("mooncake_tenant_quota_explicit_policy", "Tenant explicit policy flag.", []string{"tenant_id"}, nil),
			func(t master.TenantSnapshot) float64 { return b2f(t.HasExplicitPolicy) }},
	}
	tenantRejects = prometheus.NewDesc("mooncake_tenant_quota_reject_total", "Total number of tenant quota admission rejects.", []string{"tenant_id", "reason"}, nil)
	tenantEvicted = prometheus.NewDesc("mooncake_tenant_evict_bytes_total", "Total bytes evicted by tenant-scoped quota eviction.", []string{"tenant_id"}, nil)
	tenantCap     = prometheus.NewDesc("mooncake_tenant_quota_allocatable_capacity_bytes", "Global allocatable capacity the tenant shares are computed for.", nil, nil)
	tenantReqSum  = prometheus.NewDesc("mooncake_tenant_quota_requested_bytes_sum", "Global requested tenant quota bytes.", nil, nil)
	tenantEffSum  = prometheus.NewDesc("mooncake_tenant_quota_effective_bytes_sum", "Global effective tenant quota bytes.", nil, nil)
)

func b2f(b bool) float64 {
	if b {
		return 1
	}
	return 0
}

func (tenantCollector) Describe(ch chan<- *prometheus.Desc) {
	for _, g := range tenantGauges {
		ch <- g.d
	}
	ch <- tenantRejects
	ch <- tenantEvicted
	ch <- tenantCap
	ch <- tenantReqSum
	ch <- tenantEffSum
}

func (c tenantCollector) Collect(ch chan<- prometheus.Metric) {
	tenants, capacity := c.core.Tenants()
	var req, eff float64
	for _, t := range tenants {
		for _, g := range tenantGauges {
			ch <- prometheus.MustNewConstMetric(g.d, prometheus.GaugeValue, g.v(t), t.TenantID)
		}
		ch <- prometheus.MustNewConstMetric(tenantRejects, prometheus.CounterValue, float64(t.RejectQuotaExceeded), t.TenantID, "quota_exceeded")
		ch <- prometheus.MustNewConstMetric(tenantRejects, prometheus.CounterValue, float64(t.RejectNotRegistered), t.TenantID, "not_registered")
		ch <- prometheus.MustNewConstMetric(tenantEvicted, prometheus.CounterValue, float64(t.EvictedBytes), t.TenantID)
		req += float64(t.RequestedQuotaBytes)
		eff += float64(t.EffectiveQuotaBytes)
	}
	ch <- prometheus.MustNewConstMetric(tenantCap, prometheus.GaugeValue, float64(capacity))
	ch <- prometheus.MustNewConstMetric(tenantReqSum, prometheus.GaugeValue, req)
	ch <- prometheus.MustNewConstMetric(tenantEffSum, prometheus.GaugeValue, eff)
}

// tenantQuotas answers Mooncake's GET /api/v1/tenant_quotas (every
// tenant's account) and ?tenant_id=T (one), in Mooncake's JSON. The policy
// is the file's here, so the admin API's PUT and DELETE are refused (405).
func (s *Server) tenantQuotas(w http.ResponseWriter, r *http.Request) {
	fail := func(status int, code wire.Code, msg string) {
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(status)
		json.NewEncoder(w).Encode(map[string]any{"success": false, "error_code": code, "error_message": msg})
	}
	switch {
	case r.Method != http.MethodGet:
		w.Header().Set("Allow", http.MethodGet)
		fail(http.StatusMethodNotAllowed, wire.ErrInvalidParams,
			"the quota policy is the file --tenant_quota_connector_uri names: edit it (read again within a second)")
		return
	case !s.opts.EnableMultiTenants:
		fail(http.StatusConflict, codeUnavailableInCurrentMode, "UNAVAILABLE_IN_CURRENT_MODE: the master runs without --enable_multi_tenants")
		return
	}
	tenants, _ := s.core.Tenants()
	name, one := r.URL.Query()["tenant_id"]
	if !one {
		if tenants == nil {
			tenants = []master.TenantSnapshot{}
		}
		writeJSON(w, map[string]any{"success": true, "data": tenants})
		return
	}
	if len(name) != 1 || !wire.ValidTenant(name[0]) {
		fail(http.StatusBadRequest, wire.ErrInvalidParams, "Invalid tenant_id")
		return
	}
	for _, t := range tenants {
		if t.TenantID == name[0] {
			writeJSON(w, map[string]any{"success": true, "data": t})
			return
		}
	}
	fail(http.StatusNotFound, wire.ErrTenantNotRegistered, "TENANT_NOT_REGISTERED: no policy or object names "+name[0])
}

// codeUnavailableInCurrentMode is Mooncake's UNAVAILABLE_IN_CURRENT_MODE,
// which only this HTTP answer carries (no call of the contract returns it).
const codeUnavailableInCurrentMode = -1011
