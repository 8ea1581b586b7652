package loadonce

import (
	"sync"
	"testing"
)

// The options set before the first Get are the ones loaded with; load runs
// once, however many callers race; later options are refused.
func TestOnce(t *testing.T) {
	var o Once[string, string]
	if !o.Configure("first") || !o.Configure("second") {
		t.Fatal("Configure before the load refused")
	}
	loads := 0
	var wg sync.WaitGroup
	got := make([]string, 8)
	for i := range got {
		wg.Add(1)
		go func() {
			defer wg.Done()
			got[i] = o.Get(func(opt string) string { loads++; return "loaded " + opt })
		}()
	}
	wg.Wait()
	for _, v := range got {
		if v != "loaded second" {
			t.Fatalf("Get = %q", v)
		}
	}
	if loads != 1 {
		t.Fatalf("loaded %d times", loads)
	}
	if o.Configure("third") {
		t.Fatal("Configure after the load accepted")
	}
	if v := o.Get(func(string) string { return "again" }); v != "loaded second" {
		t.Fatalf("Get after a late Configure = %q", v)
	}
}
