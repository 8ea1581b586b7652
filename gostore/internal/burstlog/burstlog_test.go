package burstlog

import (
	"testing"
	"time"
)

// Every logs the first failure, counts those within the interval, and
// logs the next one after it with that count.
func TestEveryLogsOncePerInterval(t *testing.T) {
	e := Every{Interval: 10 * time.Second}
	t0 := time.Unix(1000, 0)
	var logged []int
	fail := func(at time.Duration) { e.Fail(t0.Add(at), func(others int) { logged = append(logged, others) }) }
	fail(0)
	fail(time.Second)
	fail(9 * time.Second)
	if len(logged) != 1 || logged[0] != 0 {
		t.Fatalf("within the interval: %v, want one line", logged)
	}
	fail(10 * time.Second)
	fail(11 * time.Second)
	if len(logged) != 2 || logged[1] != 2 {
		t.Fatalf("after the interval: %v, want a second line counting 2 others", logged)
	}
	fail(25 * time.Second)
	if len(logged) != 3 || logged[2] != 1 {
		t.Fatalf("lines %v", logged)
	}
}
