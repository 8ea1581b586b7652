// summary.go renders the readable digest served at /metrics/summary.

package clientmetrics

import (
	"fmt"
	"io"
	"math"
	"sort"
	"strconv"
	"strings"
	"time"

	dto "github.com/prometheus/client_model/go"
)

// WriteSummary writes a plain-text digest of the series: bytes moved,
// transfer times, RPCs and interface calls, latencies as a mean and the
// bucket bounds under which 95% and all of the calls fell.
func (m *Metrics) WriteSummary(w io.Writer) error {
	fams, err := m.reg.Gather()
	if err != nil {
		return err
	}
	byName := make(map[string]*dto.MetricFamily, len(fams))
	for _, f := range fams {
		byName[f.GetName()] = f
	}
	var b strings.Builder
	up := m.now().Sub(m.began).Round(time.Millisecond)
	fmt.Fprintf(&b, "gostore client metrics (tenant %q, measuring for %s)\n", m.tenant, up)

	fmt.Fprintf(&b, "\nBytes moved\n")
	fmt.Fprintf(&b, "  read into callers' memory  %s\n", bytesText(counterValue(byName["mooncake_transfer_read_bytes"])))
	fmt.Fprintf(&b, "  written to replicas        %s\n", bytesText(counterValue(byName["mooncake_transfer_write_bytes"])))

	fmt.Fprintf(&b, "\nTime spent moving bytes (microseconds)\n")
	for _, t := range []struct{ label, name string }{
		{"get", "mooncake_transfer_get_latency"},
		{"batch get", "mooncake_transfer_batch_get_latency"},
		{"put", "mooncake_transfer_put_latency"},
		{"batch put", "mooncake_transfer_batch_put_latency"},
	} {
		fmt.Fprintf(&b, "  %-10s %s\n", t.label, histText(firstHistogram(byName[t.name])))
	}

	fmt.Fprintf(&b, "\nRPCs (microseconds)\n")
	errs := map[string]float64{}
	if f := byName["gostore_client_rpc_errors"]; f != nil {
		for _, mm := range f.GetMetric() {
			errs[label(mm, "rpc_name")] += mm.GetCounter().GetValue()
		}
	}
	rows := 0
	for _, mm := range sorted(byName["mooncake_client_rpc_latency"], "rpc_name") {
		name := label(mm, "rpc_name")
		fmt.Fprintf(&b, "  %-18s %s, %d failed\n", name, histText(mm.GetHistogram()), uint64(errs[name]))
		rows++
	}
	if rows == 0 {
		fmt.Fprintf(&b, "  none yet\n")
	}

	for _, d := range []struct{ title, prefix string }{
		{"Read calls", "mooncake_transfer_read_operation"},
		{"Write calls", "mooncake_transfer_write_operation"},
	} {
		fmt.Fprintf(&b, "\n%s that moved data (microseconds)\n", d.title)
		bytesOf := map[string]float64{}
		if f := byName[d.prefix+"_bytes"]; f != nil {
			for _, mm := range f.GetMetric() {
				bytesOf[label(mm, "op_name")] = mm.GetCounter().GetValue()
			}
		}
		rows := 0
		for _, mm := range sorted(byName[d.prefix+"_latency"], "op_name") {
			name := label(mm, "op_name")
			fmt.Fprintf(&b, "  %-18s %s, %s\n", name, histText(mm.GetHistogram()), bytesText(bytesOf[name]))
			rows++
		}
		if rows == 0 {
			fmt.Fprintf(&b, "  none yet\n")
		}
	}
	_, err = io.WriteString(w, b.String())
	return err
}

func counterValue(f *dto.MetricFamily) float64 {
	if f == nil || len(f.GetMetric()) == 0 {
		return 0
	}
	return f.GetMetric()[0].GetCounter().GetValue()
}

func firstHistogram(f *dto.MetricFamily) *dto.Histogram {
	if f == nil || len(f.GetMetric()) == 0 {
		return nil
	}
	return f.GetMetric()[0].GetHistogram()
}

func label(m *dto.Metric, name string) string {
	for _, l := range m.GetLabel() {
		if l.GetName() == name {
			return l.GetValue()
		}
	}
	return ""
}

// sorted returns f's series ordered by the value of label.
func sorted(f *dto.MetricFamily, by string) []*dto.Metric {
	if f == nil {
		return nil
	}
	ms := append([]*dto.Metric(nil), f.GetMetric()...)
	sort.Slice(ms, func(i, j int) bool { return label(ms[i], by) < label(ms[j], by) })
	return ms
}

// histText is "N calls, mean X, 95% <= Y, all <= Z" for h.
func histText(h *dto.Histogram) string {
	n := h.GetSampleCount()
	if n == 0 {
		return "no calls"
	}
	mean := h.GetSampleSum() / float64(n)
	return fmt.Sprintf("%d calls, mean %.0f, 95%% %s, all %s", n, mean,
		bound(h, uint64(math.Ceil(0.95*float64(n)))), bound(h, n))
}

// bound is the smallest bucket bound with at least want samples under it.
func bound(h *dto.Histogram, want uint64) string {
	bs := h.GetBucket()
	for _, b := range bs {
		if b.GetCumulativeCount() >= want {
			return "<= " + strconv.FormatFloat(b.GetUpperBound(), 'f', -1, 64)
		}
	}
	if len(bs) == 0 {
		return "unknown"
	}
	return "> " + strconv.FormatFloat(bs[len(bs)-1].GetUpperBound(), 'f', -1, 64)
}

// bytesText is n in binary units, with the exact count beside it.
func bytesText(n float64) string {
	const unit = 1024
	if n < unit {
		return fmt.Sprintf("%.0f B", n)
	}
	units := []string{"KiB", "MiB", "GiB", "TiB", "PiB"}
	v, i := n/unit, 0
	for v >= unit && i < len(units)-1 {
		v /= unit
		i++
	}
	return fmt.Sprintf("%.2f %s (%.0f B)", v, units[i], n)
}
