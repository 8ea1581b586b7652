// The client: endpoints, one JSON call with failover, and the calls.

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
	"strings"
	"sync/atomic"
)

// ErrUnavailable: no endpoint answered.
var ErrUnavailable = errors.New("etcd: no endpoint answered")

// maxAnswer bounds what is read of one answer.
const maxAnswer = 64 << 20

// Client calls an etcd cluster.
type Client struct {
	endpoints []string
	http      *http.Client
	current   atomic.Int32 // the endpoint tried first
}

// New returns a client of the cluster at endpoints ("host:port" or
// "http://host:port").
func New(endpoints []string) *Client {
	c := &Client{http: &http.Client{}}
	for _, e := range endpoints {
		if e = strings.TrimSpace(e); e == "" {
			continue
		}
		if !strings.Contains(e, "://") {
			e = "http://" + e
		}
		c.endpoints = append(c.endpoints, strings.TrimRight(e, "/"))
	}
	return c
}

// Endpoints the client calls.
func (c *Client) Endpoints() []string { return append([]string(nil), c.endpoints...) }

// call posts req to path and decodes the answer into resp, trying each
// endpoint in turn from the current one.
func (c *Client) call(ctx context.Context, path string, req, resp any) error {
	body, err := json.Marshal(req)
	if err != nil {
		return err
	}
	n := len(c.endpoints)
	if n == 0 {
		return ErrUnavailable
	}
	first := int(c.current.Load())
	var last error
	for i := 0; i < n; i++ {
		k := (first + i) % n
		hreq, err := http.NewRequestWithContext(ctx, http.MethodPost, c.endpoints[k]+path, bytes.NewReader(body))
		if err != nil {
			return err
		}
		hreq.Header.Set("Content-Type", "application/json")
		hresp, err := c.http.Do(hreq)
		if err != nil {
			last = err
			if ctx.Err() != nil {
				return fmt.Errorf("%w: %v", ErrUnavailable, ctx.Err())
			}
			continue
		}
		raw, err := io.ReadAll(io.LimitReader(hresp.Body, maxAnswer))
		hresp.Body.Close()
		if err != nil {
			last = err
			continue
		}
		if hresp.StatusCode >= 500 {
			last = fmt.Errorf("%s: %s: %s", c.endpoints[k], hresp.Status, bytes.TrimSpace(raw))
			continue
		}
		c.current.Store(int32(k))
		var e struct {
			Error   string `json:"error"`
			Message string `json:"message"`
		}
		// A 4xx is an error whatever its body holds (even an "error" that
		// is not a string).
		if json.Unmarshal(raw, &e) == nil && e.Error != "" || hresp.StatusCode >= 400 {
			if e.Error == "" && e.Message == "" {
				e.Error = hresp.Status
			}
			return fmt.Errorf("etcd %s: %s%s", path, e.Error, e.Message)
		}
		return json.Unmarshal(raw, resp)
	}
	return fmt.Errorf("%w: %v", ErrUnavailable, last)
}

// KV is a key's value and revisions.
type KV struct {
	Key, Value     []byte
	CreateRevision int64
	ModRevision    int64
	Lease          int64
}

type header struct {
	Revision string `json:"revision"`
}

type jsonKV struct {
	Key            string `json:"key"`
	Value          string `json:"value"`
	CreateRevision string `json:"create_revision"`
	ModRevision    string `json:"mod_revision"`
	Lease          string `json:"lease"`
}

func (j jsonKV) kv() (KV, error) {
	k, err1 := base64.StdEncoding.DecodeString(j.Key)
	v, err2 := base64.StdEncoding.DecodeString(j.Value)
	if err := errors.Join(err1, err2); err != nil {
		return KV{}, err
	}
	return KV{Key: k, Value: v, CreateRevision: num(j.CreateRevision), ModRevision: num(j.ModRevision),
		Lease: num(j.Lease)}, nil
}

func num(s string) int64 {
	n, _ := strconv.ParseInt(s, 10, 64)
	return n
}

func b64(b []byte) string { return base64.StdEncoding.EncodeToString(b) }

// Put sets key to value (attached to lease when not 0); the revision.
func (c *Client) Put(ctx context.Context, key, value []byte, lease int64) (int64, error) {
	req := map[string]any{"key": b64(key), "value": b64(value)}
	if lease != 0 {
		req["lease"] = strconv.FormatInt(lease, 10)
	}
	var resp struct {
		Header header `json:"header"`
	}
	err := c.call(ctx, "/v3/kv/put", req, &resp)
	return num(resp.Header.Revision), err
}

// RangeOptions shape a Range beyond its keys.
type RangeOptions struct {
	Limit int64 // at most this many keys (0: all)
	// KeysOnly leaves the values out of the answer.
	KeysOnly bool
	// Serializable reads whichever member is reached from its own copy:
	// it answers without a quorum, and may be behind the cluster.
	Serializable bool
	// Descend returns the keys in descending order (with Limit 1: the
	// last key of the range).
	Descend bool
}

// Range returns the keys in [key, end) (end nil: key alone; see
// PrefixEnd), in key order, and the store's revision.
func (c *Client) Range(ctx context.Context, key, end []byte, opt RangeOptions) ([]KV, int64, error) {
	req := map[string]any{"key": b64(key)}
	if end != nil {
		req["range_end"] = b64(end)
	}
	if opt.Limit > 0 {
		req["limit"] = strconv.FormatInt(opt.Limit, 10)
	}
	if opt.KeysOnly {
		req["keys_only"] = true
	}
	if opt.Serializable {
		req["serializable"] = true
	}
	if opt.Descend {
		req["sort_order"], req["sort_target"] = "DESCEND", "KEY"
	}
	var resp struct {
		Header header   `json:"header"`
		KVs    []jsonKV `json:"kvs"`
	}
	if err := c.call(ctx, "/v3/kv/range", req, &resp); err != nil {
		return nil, 0, err
	}
	out := make([]KV, 0, len(resp.KVs))
	for _, j := range resp.KVs {
		kv, err := j.kv()
		if err != nil {
			return nil, 0, err
		}
		out = append(out, kv)
	}
	return out, num(resp.Header.Revision), nil
}

// Get returns key's KV; found is false when it does not exist.
func (c *Client) Get(ctx context.Context, key []byte) (kv KV, found bool, err error) {
	return c.get(ctx, key, RangeOptions{Limit: 1})
}

// GetLocal is Get answered by whichever member is reached from its own
// copy (etcd's serializable read): it works without a quorum, and may be
// behind the cluster.
func (c *Client) GetLocal(ctx context.Context, key []byte) (kv KV, found bool, err error) {
	return c.get(ctx, key, RangeOptions{Limit: 1, Serializable: true})
}

func (c *Client) get(ctx context.Context, key []byte, opt RangeOptions) (KV, bool, error) {
	kvs, _, err := c.Range(ctx, key, nil, opt)
	if err != nil || len(kvs) == 0 {
		return KV{}, false, err
	}
	return kvs[0], true, nil
}

// PrefixEnd is the range end that covers every key starting with prefix.
func PrefixEnd(prefix []byte) []byte {
	end := append([]byte(nil), prefix...)
	for i := len(end) - 1; i >= 0; i-- {
		if end[i] < 0xff {
			end[i]++
			return end[:i+1]
		}
	}
	return []byte{0} // every key
}

// DeleteRange deletes the keys in [key, end) (end nil: key alone); how
// many it deleted.
func (c *Client) DeleteRange(ctx context.Context, key, end []byte) (int64, error) {
	req := map[string]any{"key": b64(key)}
	if end != nil {
		req["range_end"] = b64(end)
	}
	var resp struct {
		Deleted string `json:"deleted"`
	}
	err := c.call(ctx, "/v3/kv/deleterange", req, &resp)
	return num(resp.Deleted), err
}

// Grant creates a lease of ttl seconds; its id.
func (c *Client) Grant(ctx context.Context, ttl int64) (int64, error) {
	var resp struct {
		ID    string `json:"ID"`
		Error string `json:"error"`
	}
	if err := c.call(ctx, "/v3/lease/grant", map[string]any{"TTL": strconv.FormatInt(ttl, 10)}, &resp); err != nil {
		return 0, err
	}
	return num(resp.ID), nil
}

// KeepAlive refreshes lease id once; the TTL it has again, 0 when the
// lease is gone (expired or revoked).
func (c *Client) KeepAlive(ctx context.Context, id int64) (int64, error) {
	var resp struct {
		Result struct {
			TTL string `json:"TTL"`
		} `json:"result"`
	}
	err := c.call(ctx, "/v3/lease/keepalive", map[string]any{"ID": strconv.FormatInt(id, 10)}, &resp)
	return num(resp.Result.TTL), err
}

// Revoke ends lease id and deletes its keys.
func (c *Client) Revoke(ctx context.Context, id int64) error {
	var resp struct{}
	return c.call(ctx, "/v3/lease/revoke", map[string]any{"ID": strconv.FormatInt(id, 10)}, &resp)
}

// Compare is one condition of a transaction: the key's create or mod
// revision equals Revision.
type Compare struct {
	Key      []byte
	Target   string // "CREATE" or "MOD"
	Revision int64
}

// Txn puts every key of puts when all compares hold; whether they held.
func (c *Client) Txn(ctx context.Context, compares []Compare, puts []KV) (bool, int64, error) {
	return c.TxnOps(ctx, compares, puts, nil)
}

// Range names the keys [Key, End) (End nil: Key alone).
type Range struct{ Key, End []byte }

// TxnOps is Txn that also deletes the ranges of deletes (after the puts)
// when all compares hold: a fenced deletion.
func (c *Client) TxnOps(ctx context.Context, compares []Compare, puts []KV, deletes []Range) (bool, int64, error) {
	var cmps []map[string]any
	for _, cp := range compares {
		m := map[string]any{"key": b64(cp.Key), "target": cp.Target, "result": "EQUAL"}
		if cp.Target == "CREATE" {
			m["create_revision"] = strconv.FormatInt(cp.Revision, 10)
		} else {
			m["mod_revision"] = strconv.FormatInt(cp.Revision, 10)
		}
		cmps = append(cmps, m)
	}
	var ops []map[string]any
	for _, p := range puts {
		put := map[string]any{"key": b64(p.Key), "value": b64(p.Value)}
		if p.Lease != 0 {
			put["lease"] = strconv.FormatInt(p.Lease, 10)
		}
		ops = append(ops, map[string]any{"request_put": put})
	}
	for _, d := range deletes {
		del := map[string]any{"key": b64(d.Key)}
		if d.End != nil {
			del["range_end"] = b64(d.End)
		}
		ops = append(ops, map[string]any{"request_delete_range": del})
	}
	var resp struct {
		Header    header `json:"header"`
		Succeeded bool   `json:"succeeded"`
	}
	err := c.call(ctx, "/v3/kv/txn", map[string]any{"compare": cmps, "success": ops}, &resp)
	return resp.Succeeded, num(resp.Header.Revision), err
}
