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
	exited  []chan struct{} // closed when member i's process has ended
	initial string
}

// Start runs an n-member cluster for the test's lifetime. The members'
// ports are picked free just before etcd binds them, so another process
// may take one first: a member that exits while the cluster comes up
// gets the whole cluster started again on new ports (a few times).
func Start(t testing.TB, n int) *Cluster {
	t.Helper()
	bin, err := exec.LookPath("etcd")
	if err != nil {
		t.Skip("etcd is not installed (apt-get install etcd-server)")
	}
	var why string
	for attempt := 1; attempt <= startAttempts; attempt++ {
		c := newCluster(t, bin, n)
		t.Cleanup(c.stopAll)
		for i := range c.names {
			c.Start(i)
		}
		var exited bool
		if why, exited = c.healthy(); why == "" {
			return c
		}
		c.stopAll()
		if !exited {
			break // running but not serving: starting again would not help
		}
		t.Logf("etcd cluster, attempt %d of %d: %s", attempt, startAttempts, why)
	}
	t.Fatalf("etcd cluster did not start: %s", why)
	return nil
}

// startAttempts is how many times Start brings a cluster up when one of its
// members exits on the way.
const startAttempts = 3

func newCluster(t testing.TB, bin string, n int) *Cluster {
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
	c.exited = make([]chan struct{}, n)
	return c
}

func (c *Cluster) stopAll() {
	for i := range c.procs {
		c.Stop(i)
	}
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
	done := make(chan struct{})
	go func() {
		cmd.Wait()
		if logf != nil {
			logf.Close()
		}
		close(done)
	}()
	c.procs[i], c.exited[i] = cmd, done
}

// Stop kills member i (SIGKILL).
func (c *Cluster) Stop(i int) {
	if p := c.procs[i]; p != nil {
		p.Process.Kill()
		<-c.exited[i]
		c.procs[i] = nil
	}
}

// healthy waits for every running member to answer /health with a
// leader: "" once they do, else why not (with the member's log), and
// whether it is because a member exited.
func (c *Cluster) healthy() (why string, exited bool) {
	deadline := time.Now().Add(30 * time.Second)
	for i, p := range c.procs {
		if p == nil {
			continue
		}
		for !c.serving(i) {
			select {
			case <-c.exited[i]:
				return fmt.Sprintf("etcd %s exited: %s", c.names[i], c.logTail(i)), true
			default:
			}
			if time.Now().After(deadline) {
				return fmt.Sprintf("etcd %s did not become healthy: %s", c.names[i], c.logTail(i)), false
			}
			time.Sleep(50 * time.Millisecond)
		}
	}
	return "", false
}

// serving is whether member i answers /health with a leader.
func (c *Cluster) serving(i int) bool {
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	req, _ := http.NewRequestWithContext(ctx, http.MethodGet, "http://"+c.client[i]+"/health", nil)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return false
	}
	resp.Body.Close()
	return resp.StatusCode == 200
}

// logTail is the end of member i's log, for a failure message.
func (c *Cluster) logTail(i int) string {
	b, err := os.ReadFile(c.dirs[i] + ".log")
	if err != nil {
		return fmt.Sprintf("(no log: %v)", err)
	}
	if len(b) > 2000 {
		b = b[len(b)-2000:]
	}
	return strings.TrimSpace(string(b))
}

// WaitHealthy waits for every running member to be healthy.
func (c *Cluster) WaitHealthy() {
	c.t.Helper()
	if why, _ := c.healthy(); why != "" {
		c.t.Fatal(why)
	}
}
