package main

import (
	"encoding/json"
	"fmt"
	"math"
	"os"
	"strings"
)

// target is the size docs/operations.md budgets for: 100 hosts × 1 TB of
// DRAM in 1 MiB pages.
const target = 1e8

// project is a figure f measured at n carried to target: at the growth
// exponent g measured between the two largest sizes (g = 1 is linear).
func project(f, n, g float64) float64 {
	if math.IsNaN(f) || math.IsNaN(g) || n <= 0 {
		return math.NaN()
	}
	return f * math.Pow(target/n, g)
}

// markdown renders docs/operations.md's Scale table from a results file of
// this command (-markdown PATH), so that the section is refilled from a new
// run rather than by hand.
func markdown(path string) (string, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return "", err
	}
	var res struct {
		Runs []run `json:"runs"`
	}
	if err := json.Unmarshal(b, &res); err != nil {
		return "", err
	}
	return markdownTable(res.Runs), nil
}

func markdownTable(runs []run) string {
	var b strings.Builder
	if len(runs) == 0 {
		return ""
	}
	t := table(runs)
	fmt.Fprintf(&b, "| figure |")
	for _, r := range runs {
		fmt.Fprintf(&b, " %s |", short(r.Objects))
	}
	fmt.Fprintf(&b, " growth, two largest sizes measured | 10^8 at that growth | goal |\n|---|")
	for range runs {
		b.WriteString("---|")
	}
	b.WriteString("---|---|---|\n")
	for _, f := range t.rows {
		// The two largest sizes with a value: a size whose part failed
		// is skipped, not a reason to show nothing.
		var at []int
		for i := len(f.Values) - 1; i >= 0 && len(at) < 2; i-- {
			if !math.IsNaN(float64(f.Values[i])) {
				at = append(at, i)
			}
		}
		g := math.NaN()
		if len(f.Growth) > 0 && len(at) == 2 {
			g = growth(float64(runs[at[1]].Objects), float64(f.Values[at[1]]), float64(runs[at[0]].Objects), float64(f.Values[at[0]]))
		}
		name := strings.TrimSpace(f.Name)
		if f.Limit {
			name = "limit: " + name
		}
		fmt.Fprintf(&b, "| %s (%s) |", name, f.Unit)
		for _, v := range f.Values {
			fmt.Fprintf(&b, " %s |", num(float64(v)))
		}
		gs, proj := "-", "-"
		if !math.IsNaN(g) {
			gs = fmt.Sprintf("%.2f", g)
			proj = num(project(float64(f.Values[at[0]]), float64(runs[at[0]].Objects), g))
		}
		fmt.Fprintf(&b, " %s | %s | %s |\n", gs, proj, f.Goal)
	}
	return b.String()
}
