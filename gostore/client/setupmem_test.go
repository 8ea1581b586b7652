// setupmem_test.go tests that setup weighs the memory it takes up front
// (segment and local buffer) against what the host can give before taking
// it, and before it talks to the master.

package client

import (
	"bytes"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/gostore/gostore/gostore/memlimit"
	"github.com/gostore/gostore/gostore/storage"
	"github.com/gostore/gostore/gostore/wire"
)

func TestSetupRefusesMemoryBeyondTheHost(t *testing.T) {
	limit, ok := memlimit.Probe{}.Tightest()
	if !ok {
		t.Fatal("no memory bound readable")
	}
	for _, tc := range []struct {
		name            string
		segment, buffer uint64
		want            string
	}{
		{"segment", limit.Free + 1<<30, 1 << 20, "global_segment_size"},
		{"local buffer", 0, 1 << 50, "local_buffer_size 1 PiB"},
		{"together", limit.Free/2 + 1<<30, limit.Free/2 + 1<<30, "global_segment_size"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var logs bytes.Buffer
			log := slog.New(slog.NewTextHandler(&logs, nil))
			start := time.Now()
			// A master nobody serves: the refusal must come before any call to it.
			c, err := New(edge(Config{LocalHostname: "127.0.0.1", MasterServerAddr: "127.0.0.1:1",
				GlobalSegmentSize: tc.segment, LocalBufferSize: tc.buffer}), log)
			if c != nil {
				c.Close()
			}
			if wire.CodeOf(err) != wire.ErrInvalidParams || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("New: %v", err)
			}
			if took := time.Since(start); took > time.Second {
				t.Errorf("refused after %v", took)
			}
			if lines := strings.Count(logs.String(), "more than this process may take"); lines != 1 {
				t.Errorf("%d log lines about it:\n%s", lines, logs.String())
			}
		})
	}
	// The SSD tier's staging buffer is taken at setup too.
	env := func(v string) func(string) (string, bool) {
		return func(k string) (string, bool) { return v, k == storage.EnvBufferSize }
	}
	if err := checkMemory(Config{EnableSSDOffload: true, Getenv: env("1125899906842624")}); wire.CodeOf(err) != wire.ErrInvalidParams ||
		!strings.Contains(err.Error(), "SSD tier's staging buffer (MOONCAKE_OFFLOAD_LOCAL_BUFFER_SIZE_BYTES) 1 PiB") {
		t.Fatalf("a 1 PiB SSD staging buffer: %v", err)
	}
	if err := checkMemory(Config{EnableSSDOffload: true, Getenv: env("x"), LocalBufferSize: 1 << 20}); err != nil {
		t.Fatalf("the default staging buffer: %v", err)
	}
	// A segment on a GPU is not host memory: only the buffer counts.
	if err := checkMemory(Config{SegmentLocation: "cuda:0", GlobalSegmentSize: 1 << 50, LocalBufferSize: 1 << 20}); err != nil {
		t.Fatalf("GPU segment counted as host memory: %v", err)
	}
}
