package server

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"

	"github.com/gostore/gostore/gostore/master"
	"github.com/gostore/gostore/gostore/wire"
)

// lockedBuf is a log sink the test reads while the server writes.
type lockedBuf struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *lockedBuf) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *lockedBuf) lines(substr string) int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return strings.Count(l.b.String(), substr)
}

func post(t *testing.T, url, contentType, body string) (int, string) {
	t.Helper()
	resp, err := http.Post(url, contentType, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

// TestQueryPrefixBadInput: every request /query_prefix cannot read gets
// 400 (405 for a GET) naming what was wrong, and one log line; the master
// goes on answering.
func TestQueryPrefixBadInput(t *testing.T) {
	logs := &lockedBuf{}
	o := parse(t, "--rpc_address=127.0.0.1", "--rpc_port=0", "--metrics_port=0", "--max_key_bytes=64")
	o.Log = slog.New(slog.NewTextHandler(logs, nil))
	s, err := Start(o)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	url := "http://" + s.HTTPAddr() + "/query_prefix"
	manyKeys, _ := json.Marshal(map[string]any{"keys": make([]string, MaxPrefixKeys+1)})
	cases := []struct{ name, body, want string }{
		{"not JSON", `{"keys": [`, "not a JSON object"},
		{"empty body", ``, "empty body"},
		{"keys a string", `{"keys": "k0"}`, `"keys" must be a list of strings, not a JSON string`},
		{"a key a number", `{"keys": ["k0", 7]}`, `"keys" must be a list of strings, not a JSON number`},
		{"block_size a string", `{"keys": ["k0"], "block_size": "64"}`, `"block_size" must be a positive integer`},
		{"block_size zero", `{"keys": ["k0"], "block_size": 0}`, "block_size 0 is not in [1, 1048576]"},
		{"no keys", `{"block_size": 64}`, `"keys" is missing`},
		{"unknown field", `{"key": ["k0"]}`, `unknown field "key"`},
		{"two objects", `{"keys": []} {"keys": []}`, "more than one JSON object"},
		{"too many keys", string(manyKeys), fmt.Sprintf("%d keys exceed the limit of %d", MaxPrefixKeys+1, MaxPrefixKeys)},
		{"a key too long", `{"keys": ["` + strings.Repeat("k", 65) + `"]}`, "--max_key_bytes=64"},
		{"a body over the cap", `{"keys": ["` + strings.Repeat("k", maxPrefixBody) + `"]}`, "a body over 8388608 bytes"},
	}
	for i, tc := range cases {
		code, body := post(t, url, "application/json", tc.body)
		if code != http.StatusBadRequest || !strings.Contains(body, tc.want) {
			t.Errorf("%s: %d %q, want 400 with %q", tc.name, code, body, tc.want)
		}
		if n := logs.lines("query_prefix refused"); n != i+1 {
			t.Errorf("%s: %d log lines after %d refusals", tc.name, n, i+1)
		}
	}
	if code, body := get(t, url); code != http.StatusMethodNotAllowed || !strings.Contains(body, "POST") {
		t.Errorf("GET: %d %q, want 405 naming POST", code, body)
	}
	// Still serving, and an empty list is a prefix of 0.
	code, body := post(t, url, "application/json", `{"keys": []}`)
	var ans prefixAnswer
	if code != 200 || json.Unmarshal([]byte(body), &ans) != nil || ans.LongestMatched != 0 || len(ans.Instances) != 0 {
		t.Fatalf("empty query: %d %s", code, body)
	}
}

// TestQueryPrefixAnswer: the answer's shape, in pages and in tokens.
func TestQueryPrefixAnswer(t *testing.T) {
	o := parse(t, "--rpc_address=127.0.0.1", "--rpc_port=0", "--metrics_port=0", "--log_level=error")
	s, err := Start(o)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	c := s.Core()
	if _, err := c.MountSegment(wire.SegmentDesc{Name: "127.0.0.1:7000", ClientID: "c1", Size: 1 << 20}, nil); err != nil {
		t.Fatal(err)
	}
	keys := []string{"p0", "p1", "p2"}
	res, err := c.PutStart("c1", "", keys[:2], []uint64{100, 100}, wire.ReplicaConfig{})
	if err != nil || res[0].Code != wire.OK || res[1].Code != wire.OK {
		t.Fatalf("put start: %v %+v", err, res)
	}
	c.PutEnd("c1", keys[:2], nil)
	url := "http://" + s.HTTPAddr() + "/query_prefix"
	for _, tc := range []struct {
		body string
		want string
	}{
		{`{"keys": ["p0", "p1", "p2"]}`, `{"longest_matched":2,"GPU":0,"CPU":2,"DISK":0,"instances":{"127.0.0.1:7000":{"longest_matched":2,"GPU":0,"CPU":2,"DISK":0}}}`},
		{`{"keys": ["p0", "p1", "p2"], "block_size": 64}`, `{"longest_matched":128,"GPU":0,"CPU":128,"DISK":0,"instances":{"127.0.0.1:7000":{"longest_matched":128,"GPU":0,"CPU":128,"DISK":0}}}`},
		{`{"keys": ["p1", "p0"]}`, `{"longest_matched":2,"GPU":0,"CPU":2,"DISK":0,"instances":{"127.0.0.1:7000":{"longest_matched":2,"GPU":0,"CPU":2,"DISK":0}}}`},
		{`{"keys": ["p2", "p0"]}`, `{"longest_matched":0,"GPU":0,"CPU":0,"DISK":0,"instances":{}}`},
	} {
		code, body := post(t, url, "application/json", tc.body)
		if code != 200 || strings.TrimSpace(body) != tc.want {
			t.Errorf("%s: %d %s\nwant %s", tc.body, code, body, tc.want)
		}
	}
}

// FuzzQueryPrefix: whatever body a caller posts, /query_prefix answers 200
// with an answer within its request, or 400; it never panics.
func FuzzQueryPrefix(f *testing.F) {
	for _, seed := range []string{`{"keys": ["p0", "p1", "p2"]}`, `{"keys": ["p0"], "block_size": 64}`,
		`{"keys": [`, `{"keys": "p0"}`, `{"keys": [0]}`, `{"block_size": -1, "keys": []}`, `[]`, `null`,
		`{"keys": null}`, `{"keys": ["p0"]} x`, `{"keys": ["\u0000", ""], "block_size": 1048576}`} {
		f.Add([]byte(seed))
	}
	core := master.New(master.Config{})
	if _, err := core.MountSegment(wire.SegmentDesc{Name: "127.0.0.1:7000", ClientID: "c1", Size: 1 << 20}, nil); err != nil {
		f.Fatal(err)
	}
	keys := []string{"p0", "p1"}
	if res, err := core.PutStart("c1", "", keys, []uint64{100, 100}, wire.ReplicaConfig{}); err != nil || res[0].Code != wire.OK {
		f.Fatalf("put start: %v %+v", err, res)
	}
	core.PutEnd("c1", keys, nil)
	s := &Server{core: core, log: slog.New(slog.NewTextHandler(io.Discard, nil))}
	f.Fuzz(func(t *testing.T, body []byte) {
		w := httptest.NewRecorder()
		s.queryPrefix(w, httptest.NewRequest(http.MethodPost, "/query_prefix", bytes.NewReader(body)))
		switch w.Code {
		case http.StatusBadRequest:
		case http.StatusOK:
			var q prefixQuery
			json.Unmarshal(body, &q)
			var ans prefixAnswer
			if err := json.Unmarshal(w.Body.Bytes(), &ans); err != nil {
				t.Fatalf("200 with an answer that is not JSON: %q", w.Body.String())
			}
			bs := 1
			if q.BlockSize != nil {
				bs = *q.BlockSize
			}
			if ans.LongestMatched > len(q.Keys)*bs || ans.CPU > ans.LongestMatched {
				t.Fatalf("answer %+v beyond the request %q", ans, body)
			}
		default:
			t.Fatalf("status %d for %q", w.Code, body)
		}
	})
}
