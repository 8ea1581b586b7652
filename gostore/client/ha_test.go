package client

import (
	"bytes"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/gostore/gostore/gostore/internal/etcdtest"
	"github.com/gostore/gostore/gostore/master/server"
	"github.com/gostore/gostore/gostore/wire"
)

// A client given "etcd://..." as its master finds the leader through etcd,
// and after a failover finds the new one by itself: its objects read back
// with their bytes and it writes again, without a new setup.
func TestClientFollowsTheLeaderThroughEtcd(t *testing.T) {
	cl := etcdtest.Start(t, 3)
	eps := strings.Join(cl.Endpoints(), ";")
	start := func() (*server.Server, error) {
		// Each master keeps its snapshots on its own disk and serves them
		// to a standby over its HTTP port (see server's HA).
		opts, err := server.ParseFlags(append([]string{"--rpc_address=127.0.0.1", "--rpc_port=0", "--metrics_port=0",
			"--metrics_host=127.0.0.1", "--snapshot_backup_dir=" + t.TempDir(), "--log_level=error", "--client_ttl=60"},
			cl.MasterFlags("ct")...), nil)
		if err != nil {
			return nil, err
		}
		return server.Start(opts)
	}
	a, err := start()
	if err != nil {
		t.Fatal(err)
	}
	c, err := New(edge(Config{LocalHostname: "127.0.0.1", MasterServerAddr: "etcd://" + eps, ClusterID: "ct",
		GlobalSegmentSize: 8 << 20, LocalBufferSize: 1 << 20, PingInterval: 50 * time.Millisecond}), nil)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	var items []PutItem
	for i := 0; i < 20; i++ {
		items = append(items, PutItem{Key: fmt.Sprintf("ha/%d", i), Parts: [][]byte{bytes.Repeat([]byte{byte(i)}, 1000+i)}})
	}
	for i, code := range c.Writes().PutBatch(items, wire.ReplicaConfig{}) {
		if code != wire.OK {
			t.Fatalf("put %d: %v", i, code)
		}
	}
	type started struct {
		s   *server.Server
		err error
	}
	bUp := make(chan started, 1)
	go func() {
		s, err := start()
		bUp <- started{s, err}
	}()
	a.Close() // a clean stop hands over at once
	b := <-bUp
	if b.err != nil {
		t.Fatal(b.err)
	}
	defer b.s.Close()
	read := func() bool {
		dsts := make([][][]byte, len(items))
		for i, it := range items {
			dsts[i] = [][]byte{make([]byte, len(it.Parts[0]))}
		}
		for i, n := range c.Reads().GetInto(keysOf(items), dsts) {
			if n != int64(len(items[i].Parts[0])) || !bytes.Equal(dsts[i][0], items[i].Parts[0]) {
				return false
			}
		}
		return true
	}
	deadline := time.Now().Add(30 * time.Second)
	for !read() { // the first calls may still reach the old leader's closed port
		if time.Now().After(deadline) {
			t.Fatal("the objects did not read back through the new leader")
		}
		time.Sleep(20 * time.Millisecond)
	}
	if code := c.Writes().PutBatch([]PutItem{{Key: "ha/new", Parts: [][]byte{[]byte("after the failover")}}}, wire.ReplicaConfig{}); code[0] != wire.OK {
		t.Fatalf("put through the new leader: %v", code[0])
	}
}

func keysOf(items []PutItem) []string {
	out := make([]string, len(items))
	for i, it := range items {
		out[i] = it.Key
	}
	return out
}
