package etcdkv

import (
	"bytes"
	"context"
	"errors"
	"testing"
	"time"

	"github.com/gostore/gostore/gostore/internal/etcdtest"
)

func ctxT(t *testing.T, d time.Duration) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), d)
	t.Cleanup(cancel)
	return ctx
}

// Against a real three-member etcd: the calls, failover to another member
// when one dies, refusal without a quorum, and recovery when it returns.
func TestCallsAgainstARealCluster(t *testing.T) {
	cl := etcdtest.Start(t, 3)
	c := New(cl.Endpoints())
	ctx := ctxT(t, 30*time.Second)

	rev, err := c.Put(ctx, []byte("a/1"), []byte("one"), 0)
	if err != nil || rev == 0 {
		t.Fatalf("put: %d %v", rev, err)
	}
	c.Put(ctx, []byte("a/2"), []byte{0, 1, 0xff}, 0)
	c.Put(ctx, []byte("b"), []byte("other"), 0)
	kvs, _, err := c.Range(ctx, []byte("a/"), PrefixEnd([]byte("a/")), RangeOptions{})
	if err != nil || len(kvs) != 2 || string(kvs[0].Key) != "a/1" || !bytes.Equal(kvs[1].Value, []byte{0, 1, 0xff}) {
		t.Fatalf("range: %+v %v", kvs, err)
	}
	kv, found, err := c.Get(ctx, []byte("a/1"))
	if err != nil || !found || kv.CreateRevision != rev {
		t.Fatalf("get: %+v %v %v", kv, found, err)
	}
	if _, found, _ := c.Get(ctx, []byte("nope")); found {
		t.Fatal("a missing key was found")
	}
	// A transaction holds only when its comparisons do.
	ok, _, err := c.Txn(ctx, []Compare{{Key: []byte("a/1"), Target: "CREATE", Revision: rev}},
		[]KV{{Key: []byte("t"), Value: []byte("yes")}})
	if err != nil || !ok {
		t.Fatalf("txn on a true comparison: %v %v", ok, err)
	}
	ok, _, err = c.Txn(ctx, []Compare{{Key: []byte("a/1"), Target: "CREATE", Revision: rev + 100}},
		[]KV{{Key: []byte("t"), Value: []byte("no")}})
	if err != nil || ok {
		t.Fatalf("txn on a false comparison: %v %v", ok, err)
	}
	if kv, _, _ := c.Get(ctx, []byte("t")); string(kv.Value) != "yes" {
		t.Fatalf("t = %q", kv.Value)
	}
	if n, err := c.DeleteRange(ctx, []byte("t"), nil); n != 1 || err != nil {
		t.Fatalf("delete: %d %v", n, err)
	}
	if _, found, _ := c.Get(ctx, []byte("t")); found {
		t.Fatal("a deleted key was found")
	}
	// Leases: a key on a revoked lease is gone; keepalive of a gone one is 0.
	lease, err := c.Grant(ctx, 5)
	if err != nil || lease == 0 {
		t.Fatalf("grant: %d %v", lease, err)
	}
	c.Put(ctx, []byte("leased"), []byte("x"), lease)
	if ttl, err := c.KeepAlive(ctx, lease); err != nil || ttl <= 0 {
		t.Fatalf("keepalive: %d %v", ttl, err)
	}
	if err := c.Revoke(ctx, lease); err != nil {
		t.Fatal(err)
	}
	if _, found, _ := c.Get(ctx, []byte("leased")); found {
		t.Fatal("a key outlived its revoked lease")
	}
	if ttl, _ := c.KeepAlive(ctx, lease); ttl != 0 {
		t.Fatalf("keepalive of a revoked lease: %d", ttl)
	}

	// One member down: calls go to the others.
	cl.Stop(0)
	if _, err := c.Put(ctxT(t, 10*time.Second), []byte("a/3"), []byte("three"), 0); err != nil {
		t.Fatalf("put with one member down: %v", err)
	}
	// Two down: no quorum, the put fails (within its deadline).
	cl.Stop(1)
	if _, err := c.Put(ctxT(t, 2*time.Second), []byte("a/4"), []byte("four"), 0); err == nil {
		t.Fatal("a put without a quorum succeeded")
	}
	// A member's own copy still answers (what a client finds its master by).
	if kv, found, err := c.GetLocal(ctxT(t, 5*time.Second), []byte("a/3")); err != nil || !found || string(kv.Value) != "three" {
		t.Fatalf("a serializable read without a quorum: %q %v %v", kv.Value, found, err)
	}
	// Back: it works again, and nothing acknowledged was lost.
	cl.Start(0)
	cl.Start(1)
	cl.WaitHealthy()
	ctx = ctxT(t, 30*time.Second)
	var putErr error
	for i := 0; i < 100; i++ { // the first calls may land before a leader is elected
		if _, putErr = c.Put(ctx, []byte("a/5"), []byte("five"), 0); putErr == nil {
			break
		}
	}
	if putErr != nil {
		t.Fatalf("put after the quorum returned: %v", putErr)
	}
	kvs, _, _ = c.Range(ctx, []byte("a/"), PrefixEnd([]byte("a/")), RangeOptions{KeysOnly: true})
	var keys []string
	for _, kv := range kvs {
		keys = append(keys, string(kv.Key))
	}
	if len(keys) < 4 || keys[2] != "a/3" {
		t.Fatalf("after the outage: %v", keys)
	}
}

func TestNoEndpointAnswers(t *testing.T) {
	c := New([]string{"127.0.0.1:1", "127.0.0.1:2"})
	if _, err := c.Put(ctxT(t, 5*time.Second), []byte("k"), []byte("v"), 0); !errors.Is(err, ErrUnavailable) {
		t.Fatalf("no endpoint: %v", err)
	}
	if _, err := New(nil).Grant(context.Background(), 1); !errors.Is(err, ErrUnavailable) {
		t.Fatalf("no endpoints: %v", err)
	}
}

func TestPrefixEnd(t *testing.T) {
	for in, want := range map[string]string{"a/": "a0", "ab": "ac", "a\xff": "b", "\xff\xff": "\x00"} {
		if got := string(PrefixEnd([]byte(in))); got != want {
			t.Errorf("PrefixEnd(%q) = %q, want %q", in, got, want)
		}
	}
}
