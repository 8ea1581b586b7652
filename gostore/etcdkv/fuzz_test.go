// fuzz_test.go: what an etcd member answers is read, not trusted: any
// status and any body, from each endpoint. `go test` replays the seeds
// and testdata/fuzz/; to explore:
//
//	go test -ldflags=-checklinkname=0 -run='^$' -fuzz='^FuzzAnswers$' -fuzztime=60s -parallel=1 ./gostore/etcdkv

package etcdkv

import (
	"bytes"
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"testing"
)

// answers is an http.RoundTripper that gives each endpoint (by host) its
// fixed answer, and counts who was asked.
type answers struct {
	status [2]int
	body   [2][]byte
	asked  [2]int
}

func (a *answers) RoundTrip(r *http.Request) (*http.Response, error) {
	if r.Body != nil {
		io.Copy(io.Discard, r.Body)
		r.Body.Close()
	}
	i := 0
	if r.URL.Host == "e1" {
		i = 1
	}
	a.asked[i]++
	return &http.Response{StatusCode: a.status[i], Status: strconv.Itoa(a.status[i]), Header: http.Header{},
		Body: io.NopCloser(bytes.NewReader(a.body[i])), Request: r}, nil
}

// modelKVs reads data as key/value pairs (split at 0xff: key, value, key,
// ...) with revisions from their index.
func modelKVs(data []byte) []KV {
	parts := bytes.Split(data, []byte{0xff})
	var kvs []KV
	for i := 0; i+1 < len(parts); i += 2 {
		kvs = append(kvs, KV{Key: parts[i], Value: parts[i+1], CreateRevision: int64(i + 1),
			ModRevision: int64(i + 2), Lease: int64(i)})
	}
	return kvs
}

// rangeAnswer is the gateway's answer to a range holding kvs.
func rangeAnswer(kvs []KV) []byte {
	var js []jsonKV
	for _, kv := range kvs {
		js = append(js, jsonKV{Key: b64(kv.Key), Value: b64(kv.Value), CreateRevision: strconv.FormatInt(kv.CreateRevision, 10),
			ModRevision: strconv.FormatInt(kv.ModRevision, 10), Lease: strconv.FormatInt(kv.Lease, 10)})
	}
	b, _ := json.Marshal(map[string]any{"header": map[string]string{"revision": "42"}, "kvs": js})
	return b
}

// FuzzAnswers: every call, given any status and body from each of two
// endpoints, returns (no panic) and follows the failover rules of the
// package text: an answer under 500 from the first endpoint is the
// call's, and the second is never asked; an error status (400-499) or a
// body with "error" is an error; a 5xx moves to the second endpoint, and
// two of them are ErrUnavailable. A Range that succeeds returns one KV per
// entry of the answer's "kvs", each the base64 decoding of its strings.
// With model set, the first endpoint answers a range holding the records
// data spells (modelKVs) as etcd would, and Range returns exactly them.
func FuzzAnswers(f *testing.F) {
	ok := []byte(`{"header":{"revision":"7"},"kvs":[{"key":"YQ==","value":"MQ==","create_revision":"3","mod_revision":"5","lease":"9"}]}`)
	f.Add(false, uint16(200), ok, uint16(200), []byte(`{}`))
	f.Add(false, uint16(503), []byte("etcdserver: no leader"), uint16(200), ok)
	f.Add(false, uint16(500), []byte{}, uint16(599), []byte{})
	f.Add(false, uint16(400), []byte(`{"error":"etcdserver: key not found","code":5}`), uint16(200), ok)
	f.Add(false, uint16(200), []byte(`{"error":"lease not found"}`), uint16(200), ok)
	f.Add(false, uint16(200), []byte(`{"kvs":[{"key":"!!","value":"MQ=="}]}`), uint16(200), ok)
	f.Add(false, uint16(200), []byte(`{"kvs":{}}`), uint16(200), ok)
	f.Add(false, uint16(200), []byte(`{"header":{"revision":"99999999999999999999"},"result":{"TTL":"-1"},"ID":"x","succeeded":true,"deleted":"3"}`), uint16(200), ok)
	f.Add(false, uint16(200), []byte("not json"), uint16(200), ok)
	// A 400 whose "error" is no string: an error all the same.
	f.Add(false, uint16(300), []byte(`{"error":5}`), uint16(200), ok)
	f.Add(true, uint16(0), []byte("key\xffvalue\xff\xff\xff\x00\x01\xfflast"), uint16(0), []byte{})
	f.Fuzz(func(t *testing.T, model bool, s0 uint16, b0 []byte, s1 uint16, b1 []byte) {
		a := &answers{status: [2]int{100 + int(s0)%500, 100 + int(s1)%500}, body: [2][]byte{b0, b1}}
		var want []KV
		if model {
			want = modelKVs(b0)
			a.status[0], a.body[0] = 200, rangeAnswer(want)
		}
		calls := []struct {
			name string
			call func(c *Client) error
		}{
			{"range", func(c *Client) error {
				kvs, _, err := c.Range(context.Background(), []byte("k"), []byte("l"), RangeOptions{})
				if err == nil {
					checkRange(t, a.body[a.answered()], kvs)
				}
				if model && (err != nil || fmt.Sprint(kvs) != fmt.Sprint(want)) {
					t.Fatalf("range over %+v: %+v, %v", want, kvs, err)
				}
				return err
			}},
			{"get", func(c *Client) error { _, _, err := c.Get(context.Background(), []byte("k")); return err }},
			{"put", func(c *Client) error { _, err := c.Put(context.Background(), []byte("k"), []byte("v"), 3); return err }},
			{"delete", func(c *Client) error { _, err := c.DeleteRange(context.Background(), []byte("k"), nil); return err }},
			{"grant", func(c *Client) error { _, err := c.Grant(context.Background(), 5); return err }},
			{"keepalive", func(c *Client) error { _, err := c.KeepAlive(context.Background(), 3); return err }},
			{"revoke", func(c *Client) error { return c.Revoke(context.Background(), 3) }},
			{"txn", func(c *Client) error {
				_, _, err := c.Txn(context.Background(), []Compare{{Key: []byte("k"), Target: "CREATE"}},
					[]KV{{Key: []byte("k"), Value: []byte("v")}})
				return err
			}},
		}
		for _, cl := range calls {
			name, call := cl.name, cl.call
			if model && name != "range" {
				continue
			}
			a.asked = [2]int{}
			c := New([]string{"e0", "e1"})
			c.http.Transport = a
			err := call(c)
			s := a.status
			switch {
			case s[0] < 500 && (a.asked != [2]int{1, 0}):
				t.Fatalf("%s: status %d from the first endpoint, asked %v", name, s[0], a.asked)
			case s[0] >= 500 && (a.asked != [2]int{1, 1}):
				t.Fatalf("%s: status %d from the first endpoint, asked %v", name, s[0], a.asked)
			case s[0] >= 500 && s[1] >= 500 && !errors.Is(err, ErrUnavailable):
				t.Fatalf("%s: statuses %v answered %v", name, s, err)
			}
			if st, body := s[a.answered()], a.body[a.answered()]; st < 500 && err == nil {
				var e struct {
					Error string `json:"error"`
				}
				if st >= 400 || json.Unmarshal(body, &e) == nil && e.Error != "" {
					t.Fatalf("%s: status %d, %q answered no error", name, st, body)
				}
			}
		}
	})
}

// answered is the endpoint whose answer the call took: the last asked.
func (a *answers) answered() int {
	if a.asked[1] > 0 {
		return 1
	}
	return 0
}

// checkRange: kvs, what Range made of body, hold one KV per entry of the
// body's "kvs", each its strings decoded.
func checkRange(t *testing.T, body []byte, kvs []KV) {
	t.Helper()
	var resp struct {
		KVs []jsonKV `json:"kvs"`
	}
	if err := json.Unmarshal(body, &resp); err != nil {
		t.Fatalf("Range read %q, which does not decode: %v", body, err)
	}
	if len(kvs) != len(resp.KVs) {
		t.Fatalf("Range read %d KVs from %q", len(kvs), body)
	}
	for i, j := range resp.KVs {
		if b64(kvs[i].Key) != canonical(j.Key) || b64(kvs[i].Value) != canonical(j.Value) {
			t.Fatalf("KV %d: %+v read from %+v", i, kvs[i], j)
		}
	}
}

// canonical re-encodes a base64 string (the decoder takes some encodings
// of the same bytes, e.g. with \r or \n between characters).
func canonical(s string) string {
	b, err := base64.StdEncoding.DecodeString(s)
	if err != nil {
		return "undecodable " + s
	}
	return b64(b)
}
