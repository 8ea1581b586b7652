// Package etcdtest runs a real etcd cluster (Debian's etcd-server binary)
// of several members on loopback for tests, and stops and restarts its
// members one by one. Tests skip, with the reason, where the binary is
// missing.
package etcdtest

import (
	"context"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// Cluster is a running etcd cluster.
type Cluster struct {
	t       testing.TB
	bin     string
	names   []string
	client  []string // "127.0.0.1:port" per member
	peer    []string
	dirs    []string
	procs   []*exec.Cmd
	initial string
}

// Start runs an n-member cluster for the test's lifetime.
func Start(t testing.TB, n int) *Cluster {
	t.Helper()
	bin, err := exec.LookPath("etcd")
	if err != nil {
		t.Skip("etcd is not installed (apt-get install etcd-server)")
	}
	c := &Cluster{t: t, bin: bin}
	base := t.TempDir()
	var initial []string
	for i := 0; i < n; i++ {
		c.names = append(c.names, fmt.Sprintf("m%d", i))
		c.client = append(c.client, freeAddr(t))
		c.peer = append(c.peer, freeAddr(t))
		c.dirs = append(c.dirs, filepath.Join(base, c.names[i]))
		initial = append(initial, fmt.Sprintf("%s=http://%s", c.names[i], c.peer[i]))
	}
	c.initial = strings.Join(initial, ",")
	c.procs = make([]*exec.Cmd, n)
	for i := range c.names {
		c.Start(i)
	}
	t.Cleanup(func() {
		for i := range c.procs {
			c.Stop(i)
		}
	})
	for i := range c.names {
		c.waitHealthy(i)
	}
	return c
}

func freeAddr(t testing.TB) string {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	return ln.Addr().String()
}

// Endpoints are the members' client addresses.
func (c *Cluster) Endpoints() []string { return append([]string(nil), c.client...) }

// MasterFlags are the gostore-master flags of an HA master on this
// cluster, under clusterID, with a 2 s lease (a test's failover is quick).
func (c *Cluster) MasterFlags(clusterID string) []string {
	return []string{"--enable_ha", "--etcd_endpoints=" + strings.Join(c.client, ";"),
		"--cluster_id=" + clusterID, "--ha_lease_ttl_ms=2000"}
}

// Start (re)starts member i on its data directory.
func (c *Cluster) Start(i int) {
	if c.procs[i] != nil {
		return
	}
	state := "new"
	if _, err := os.Stat(filepath.Join(c.dirs[i], "member")); err == nil {
		state = "existing"
	}
	cmd := exec.Command(c.bin, "--name", c.names[i], "--data-dir", c.dirs[i],
		"--listen-client-urls", "http://"+c.client[i], "--advertise-client-urls", "http://"+c.client[i],
		"--listen-peer-urls", "http://"+c.peer[i], "--initial-advertise-peer-urls", "http://"+c.peer[i],
		"--initial-cluster", c.initial, "--initial-cluster-state", state,
		"--heartbeat-interval", "50", "--election-timeout", "500", "--log-level", "error")
	logf, err := os.Create(c.dirs[i] + ".log")
	if err == nil {
		cmd.Stdout, cmd.Stderr = logf, logf
	}
	if err := cmd.Start(); err != nil {
		c.t.Fatalf("etcd %s: %v", c.names[i], err)
	}
	c.procs[i] = cmd
}

// Stop kills member i (SIGKILL).
func (c *Cluster) Stop(i int) {
	if p := c.procs[i]; p != nil {
		p.Process.Kill()
		p.Wait()
		c.procs[i] = nil
	}
}

// waitHealthy waits for member i to answer /health with a leader.
func (c *Cluster) waitHealthy(i int) {
	deadline := time.Now().Add(30 * time.Second)
	for time.Now().Before(deadline) {
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		req, _ := http.NewRequestWithContext(ctx, http.MethodGet, "http://"+c.client[i]+"/health", nil)
		resp, err := http.DefaultClient.Do(req)
		cancel()
		if err == nil {
			ok := resp.StatusCode == 200
			resp.Body.Close()
			if ok {
				return
			}
		}
		time.Sleep(50 * time.Millisecond)
	}
	c.t.Fatalf("etcd %s did not become healthy", c.names[i])
}

// WaitHealthy waits for every running member to be healthy.
func (c *Cluster) WaitHealthy() {
	for i, p := range c.procs {
		if p != nil {
			c.waitHealthy(i)
		}
	}
}
