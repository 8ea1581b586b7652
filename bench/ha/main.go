// Command ha measures the master under --enable_ha at scale, with the
// real gostore-master binary and a real etcd (Debian's etcd-server) on
// loopback: for each object count, etcd's footprint under the cluster's
// prefix (keys and value bytes, read from etcd itself) at its largest
// while the objects are written and after; the leader's snapshot moving to
// a standby that starts empty (the HTTP transfer alone, and the standby's
// whole fetch: transfer, checks, fsync, decode), beside a loopback TCP
// copy of the same bytes, the limit; and failover (kill -9 the leader ->
// the first get of an old object answered by the standby), beside the
// lease it must wait out. With -old, a master binary of the previous
// design (snapshots on etcd) is measured the same way for etcd's
// footprint and failover. It prints a table and, with -json, writes the
// figures. It never fails on a number.
//
//	go run -ldflags=-checklinkname=0 ./bench/ha -objects 100000,1000000 -master PATH
package main

import (
	"bufio"
	"context"
	"encoding/binary"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/gostore/gostore/gostore/etcdkv"
	"github.com/gostore/gostore/gostore/journal"
	"github.com/gostore/gostore/gostore/rpc"
	"github.com/gostore/gostore/gostore/wire"
)

type row struct {
	Design  string  `json:"design"` // "disk" (this one) or "etcd" (-old)
	Objects int     `json:"objects"`
	PutSecs float64 `json:"put_seconds"`
	// The slowest batch of 1000 puts (start and end): a snapshot's pause.
	MaxBatchSecs float64 `json:"max_put_batch_seconds"`
	// etcd under the prefix: at most while writing (sampled every
	// tenth of the objects), and after the last write and a snapshot.
	EtcdMaxKeys    int   `json:"etcd_max_keys"`
	EtcdMaxBytes   int64 `json:"etcd_max_bytes"`
	EtcdKeysAfter  int   `json:"etcd_keys_after"`
	EtcdBytesAfter int64 `json:"etcd_bytes_after"`
	// The leader's snapshot to a standby (disk design only).
	SnapshotBytes   int64   `json:"snapshot_bytes,omitempty"`
	HTTPMBps        float64 `json:"http_transfer_mbps,omitempty"`
	FetchSecs       float64 `json:"standby_fetch_seconds,omitempty"` // transfer + checks + fsync + decode
	LoopbackTCPMBps float64 `json:"loopback_tcp_mbps,omitempty"`     // the limit
	// kill -9 the leader -> first get of an old object answered.
	FailoverSecs float64 `json:"failover_seconds"`
	LeaseSecs    float64 `json:"lease_seconds"` // what a takeover must wait out
	// Where the failover's time went, from the standby's log: kill ->
	// leadership won and the log read; -> serving (restored, snapshot).
	LeadingSecs  float64 `json:"leading_seconds"`
	RestoredSecs float64 `json:"restored_seconds"` // the core holds the state (Restore done)
	ServingSecs  float64 `json:"serving_seconds"`  // after the takeover's snapshot too
}

const lease = 2 * time.Second

func main() {
	objects := flag.String("objects", "100000,1000000", "object counts")
	master := flag.String("master", "", "the gostore-master binary")
	old := flag.String("old", "", "a gostore-master of the previous design (snapshots on etcd), measured too")
	out := flag.String("json", "", "write the figures here")
	flag.Parse()
	if *master == "" {
		die("-master is required")
	}
	var rows []row
	for _, s := range strings.Split(*objects, ",") {
		n, err := strconv.Atoi(s)
		if err != nil {
			die(err)
		}
		rows = append(rows, run(*master, n, false))
		fmt.Fprintf(os.Stderr, "bench/ha: %+v\n", rows[len(rows)-1])
		if *old != "" {
			rows = append(rows, run(*old, n, true))
			fmt.Fprintf(os.Stderr, "bench/ha: %+v\n", rows[len(rows)-1])
		}
	}
	fmt.Printf("%-6s %9s %7s %7s | %22s %22s | %10s %10s %8s %10s | %8s %6s %8s %8s %8s\n", "design", "objects", "put s", "batch",
		"etcd max keys/bytes", "etcd after keys/bytes", "snap MB", "HTTP MB/s", "fetch s", "TCP MB/s", "failover", "lease",
		"leading", "restored", "serving")
	for _, r := range rows {
		fmt.Printf("%-6s %9d %7.1f %6.2fs | %8d %13d %8d %13d | %10.1f %10.0f %8.2f %10.0f | %7.2fs %5.1fs %7.2fs %7.2fs %7.2fs\n",
			r.Design, r.Objects, r.PutSecs, r.MaxBatchSecs, r.EtcdMaxKeys, r.EtcdMaxBytes, r.EtcdKeysAfter, r.EtcdBytesAfter,
			float64(r.SnapshotBytes)/1e6, r.HTTPMBps, r.FetchSecs, r.LoopbackTCPMBps, r.FailoverSecs, r.LeaseSecs,
			r.LeadingSecs, r.RestoredSecs, r.ServingSecs)
	}
	if *out != "" {
		b, _ := json.MarshalIndent(rows, "", "  ")
		if err := os.WriteFile(*out, append(b, '\n'), 0o644); err != nil {
			die(err)
		}
	}
}

func die(v any) {
	fmt.Fprintln(os.Stderr, "bench/ha:", v)
	os.Exit(1)
}

func freePort() int {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		die(err)
	}
	defer ln.Close()
	return ln.Addr().(*net.TCPAddr).Port
}

// proc is a child process whose output goes to a file.
type proc struct {
	cmd    *exec.Cmd
	log    string
	exited chan struct{}
}

func start(log string, name string, args ...string) *proc {
	f, err := os.Create(log)
	if err != nil {
		die(err)
	}
	cmd := exec.Command(name, args...)
	cmd.Stdout, cmd.Stderr = f, f
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		die(err)
	}
	p := &proc{cmd: cmd, log: log, exited: make(chan struct{})}
	go func() { cmd.Wait(); f.Close(); close(p.exited) }()
	return p
}

func (p *proc) kill() { p.cmd.Process.Kill() }

// waitLog waits for a line of p's log matching re; its submatches.
func (p *proc) waitLog(re *regexp.Regexp, limit time.Duration) []string {
	deadline := time.Now().Add(limit)
	for time.Now().Before(deadline) {
		f, err := os.Open(p.log)
		if err == nil {
			sc := bufio.NewScanner(f)
			sc.Buffer(make([]byte, 1<<20), 1<<20)
			for sc.Scan() {
				if m := re.FindStringSubmatch(sc.Text()); m != nil {
					f.Close()
					return m
				}
			}
			f.Close()
		}
		time.Sleep(50 * time.Millisecond)
	}
	die(fmt.Sprintf("no line matching %q in %s within %v", re, p.log, limit))
	return nil
}

func waitDial(addr string, limit time.Duration) {
	deadline := time.Now().Add(limit)
	for time.Now().Before(deadline) {
		if c, err := net.Dial("tcp", addr); err == nil {
			c.Close()
			return
		}
		time.Sleep(20 * time.Millisecond)
	}
	die("nothing listens on " + addr)
}

// footprint reads every key under prefix, a page at a time (etcd's JSON
// gateway does not answer one range of hundreds of MB): keys, value bytes.
func footprint(ctx context.Context, kv *etcdkv.Client, prefix string) (int, int64) {
	var n int
	var b int64
	from, end := []byte(prefix), etcdkv.PrefixEnd([]byte(prefix))
	for {
		kvs, _, err := kv.Range(ctx, from, end, etcdkv.RangeOptions{Limit: 16})
		if err != nil {
			die(err)
		}
		for _, e := range kvs {
			n, b = n+1, b+int64(len(e.Value))
		}
		if len(kvs) < 16 {
			return n, b
		}
		from = append(append([]byte(nil), kvs[len(kvs)-1].Key...), 0)
	}
}

type master struct {
	p         *proc
	rpc, http string
	dir       string
}

func startMaster(bin, tmp, name, etcd string, old bool) *master {
	m := &master{rpc: fmt.Sprintf("127.0.0.1:%d", freePort()), http: fmt.Sprintf("127.0.0.1:%d", freePort()),
		dir: filepath.Join(tmp, name)}
	args := []string{"--rpc_address=127.0.0.1", "--rpc_port=" + strings.Split(m.rpc, ":")[1],
		"--metrics_port=" + strings.Split(m.http, ":")[1], "--enable_ha", "--etcd_endpoints=" + etcd,
		"--ha_lease_ttl_ms=" + strconv.Itoa(int(lease/time.Millisecond)), "--client_ttl=3600", "--log_level=info"}
	// A snapshot every 5 s: "after" is measured once one includes the
	// last write (the previous design's went to etcd).
	args = append(args, "--snapshot_interval_seconds=5")
	if !old {
		args = append(args, "--snapshot_backup_dir="+m.dir)
	}
	m.p = start(filepath.Join(tmp, name+".log"), bin, args...)
	return m
}

func run(bin string, n int, old bool) row {
	design := "disk"
	if old {
		design = "etcd"
	}
	r := row{Design: design, Objects: n, LeaseSecs: lease.Seconds()}
	fmt.Fprintf(os.Stderr, "bench/ha: %s design, %d objects\n", design, n)
	tmp, err := os.MkdirTemp("", "bench-ha-")
	if err != nil {
		die(err)
	}
	defer os.RemoveAll(tmp)
	etcdAddr := fmt.Sprintf("127.0.0.1:%d", freePort())
	peer := fmt.Sprintf("127.0.0.1:%d", freePort())
	etcd := start(filepath.Join(tmp, "etcd.log"), "etcd", "--name", "e0", "--data-dir", filepath.Join(tmp, "etcd"),
		"--listen-client-urls", "http://"+etcdAddr, "--advertise-client-urls", "http://"+etcdAddr,
		"--listen-peer-urls", "http://"+peer, "--initial-advertise-peer-urls", "http://"+peer,
		"--initial-cluster", "e0=http://"+peer, "--quota-backend-bytes", strconv.Itoa(8<<30),
		"--auto-compaction-mode", "revision", "--auto-compaction-retention", "1000", "--log-level", "error")
	defer etcd.kill()
	waitDial(etcdAddr, 30*time.Second)
	ctx := context.Background()
	kv := etcdkv.New([]string{etcdAddr})
	prefix := "/gostore/mooncake_cluster/master/"

	a := startMaster(bin, tmp, "a", etcdAddr, old)
	defer a.p.kill()
	waitDial(a.rpc, 30*time.Second)
	c := rpc.NewClient(a.rpc)
	defer c.Close()
	var mr wire.MountResp
	if err := c.Call(ctx, wire.OpMountSegment, &wire.MountReq{Seg: wire.SegmentDesc{Name: "bench:1", ClientID: "c1",
		Size: 64 << 30, ShmPath: "/bench"}}, &mr); err != nil {
		die(err)
	}
	const batch = 1000
	t0 := time.Now()
	keys, sizes := make([]string, batch), make([]uint64, batch)
	for i := 0; i < n; i += batch {
		for k := range keys {
			keys[k], sizes[k] = fmt.Sprintf("bench/%010d", i+k), 64
		}
		// A generous bound: a snapshot of this master holds its locks
		// while it copies the state (seconds at 10^6), and puts wait.
		cctx, cancel := context.WithTimeout(ctx, 5*time.Minute)
		tb := time.Now()
		var ps wire.PutStartResp
		if err := c.Call(cctx, wire.OpPutStart, &wire.PutStartReq{ClientID: "c1", Keys: keys, Sizes: sizes}, &ps); err != nil {
			die(err)
		}
		var pe wire.CodesResp
		if err := c.Call(cctx, wire.OpPutEnd, &wire.KeysReq{ClientID: "c1", Keys: keys}, &pe); err != nil {
			die(err)
		}
		cancel()
		r.MaxBatchSecs = max(r.MaxBatchSecs, time.Since(tb).Seconds())
		if (i/batch)%(max(n/batch/10, 1)) == 0 {
			k, b := footprint(ctx, kv, prefix)
			r.EtcdMaxKeys, r.EtcdMaxBytes = max(r.EtcdMaxKeys, k), max(r.EtcdMaxBytes, b)
		}
	}
	r.PutSecs = time.Since(t0).Seconds()
	// After: once a snapshot includes the last write (the previous design
	// takes one every 5 s; this one when its log since the last reaches
	// the tail's bound, so it is asked for by the standby's start below).
	last := lastRecord(ctx, kv, prefix)
	for deadline := time.Now().Add(5 * time.Minute); time.Now().Before(deadline); time.Sleep(500 * time.Millisecond) {
		if old {
			head, found, _ := kv.Get(ctx, []byte(prefix+"snaphead"))
			if found && len(head.Value) >= 8 && binary.LittleEndian.Uint64(head.Value) >= last {
				break
			}
		} else if newestFile(a.dir) >= last {
			time.Sleep(500 * time.Millisecond) // its trim follows the file
			break
		}
	}
	k, b := footprint(ctx, kv, prefix)
	r.EtcdKeysAfter, r.EtcdBytesAfter = k, b
	r.EtcdMaxKeys, r.EtcdMaxBytes = max(r.EtcdMaxKeys, k), max(r.EtcdMaxBytes, b)

	if !old {
		// The transfer alone: GET /ha/snapshot into nothing, and the limit,
		// the same bytes over a loopback TCP connection.
		_, f, size, err := journal.OpenNewestSnapshot(a.dir)
		if err != nil {
			die(err)
		}
		r.SnapshotBytes = size
		// The best of five each: the machine is shared.
		for i := 0; i < 5; i++ {
			r.LoopbackTCPMBps = max(r.LoopbackTCPMBps, tcpCopy(f, size))
			t := time.Now()
			resp, err := http.Get("http://" + a.http + "/ha/snapshot")
			if err != nil {
				die(err)
			}
			got, _ := io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
			r.HTTPMBps = max(r.HTTPMBps, float64(got)/1e6/time.Since(t).Seconds())
		}
		f.Close()
	}
	// The standby: starts empty (the log on etcd no longer reaches back to
	// record 1 once the leader trimmed), follows; then kill -9 the leader.
	trimmed, _, _ := kv.Get(ctx, []byte(prefix+"trimmed"))
	s := startMaster(bin, tmp, "b", etcdAddr, old)
	defer s.p.kill()
	if !old && len(trimmed.Value) > 0 {
		m := s.p.waitLog(regexp.MustCompile(`standby: fetched the leader's snapshot.* took=(\S+)`), 10*time.Minute)
		if d, err := time.ParseDuration(m[1]); err == nil {
			r.FetchSecs = d.Seconds()
		}
	} else {
		time.Sleep(2 * lease) // it reads the snapshot on etcd as it follows
	}
	time.Sleep(2 * lease) // following the tail: a hot standby
	probe := rpc.NewClient(s.rpc)
	defer probe.Close()
	a.p.kill()
	t1 := time.Now()
	for {
		pctx, cancel := context.WithTimeout(ctx, 200*time.Millisecond)
		var gr wire.GetReplicasResp
		err := probe.Call(pctx, wire.OpGetReplicas, &wire.KeysReq{Keys: []string{"bench/0000000000"}}, &gr)
		cancel()
		if err == nil && len(gr.Results) == 1 && gr.Results[0].Code == wire.OK {
			break
		}
		select {
		case <-s.p.exited: // the previous design's standby can fail its takeover
			fmt.Fprintf(os.Stderr, "bench/ha: the standby exited without serving: %s\n", tail(s.p.log))
			r.FailoverSecs = -1
			return r
		default:
		}
		if time.Since(t1) > 10*time.Minute {
			die("the standby never answered")
		}
		time.Sleep(5 * time.Millisecond)
	}
	r.FailoverSecs = time.Since(t1).Seconds()
	at := func(msg string) float64 {
		m := s.p.waitLog(regexp.MustCompile(`time=(\S+) .*msg="`+msg), time.Second)
		t, err := time.Parse(time.RFC3339Nano, m[1])
		if err != nil {
			return 0
		}
		return t.Sub(t1).Seconds()
	}
	r.LeadingSecs, r.RestoredSecs, r.ServingSecs = at("leading: state read from etcd"), at("state restored"), at("master serving")
	return r
}

// tcpCopy sends size bytes of f over a loopback TCP connection to a
// reader that discards them: MB/s.
func tcpCopy(f *os.File, size int64) float64 {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		die(err)
	}
	defer ln.Close()
	done := make(chan time.Time, 1)
	go func() {
		c, err := ln.Accept()
		if err != nil {
			done <- time.Now()
			return
		}
		io.Copy(io.Discard, c)
		c.Close()
		done <- time.Now()
	}()
	c, err := net.Dial("tcp", ln.Addr().String())
	if err != nil {
		die(err)
	}
	t := time.Now()
	io.Copy(c, io.NewSectionReader(f, 0, size))
	c.Close()
	end := <-done
	return float64(size) / 1e6 / end.Sub(t).Seconds()
}

// lastRecord is the last record of the log on etcd.
func lastRecord(ctx context.Context, kv *etcdkv.Client, prefix string) uint64 {
	p := []byte(prefix + "log/")
	kvs, _, err := kv.Range(ctx, p, etcdkv.PrefixEnd(p), etcdkv.RangeOptions{Limit: 1, Descend: true})
	if err != nil || len(kvs) == 0 || len(kvs[0].Value) < 4 {
		return 0
	}
	first, _ := strconv.ParseUint(string(kvs[0].Key[len(p):]), 10, 64)
	return first + uint64(binary.LittleEndian.Uint32(kvs[0].Value)) - 1
}

// newestFile is the record of the newest snapshot file in dir, by name.
func newestFile(dir string) uint64 {
	var newest uint64
	entries, _ := os.ReadDir(dir)
	for _, e := range entries {
		name := e.Name()
		if strings.HasPrefix(name, "snap-") && strings.HasSuffix(name, ".gsnap") {
			if seq, err := strconv.ParseUint(strings.TrimSuffix(strings.TrimPrefix(name, "snap-"), ".gsnap"), 10, 64); err == nil {
				newest = max(newest, seq)
			}
		}
	}
	return newest
}

func tail(path string) string {
	b, _ := os.ReadFile(path)
	return string(b[max(0, len(b)-300):])
}
