package main

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/gostore/gostore/gostore/rpc"
	"github.com/gostore/gostore/gostore/wire"
)

// e2eFigures are the figures of the real gostore-master at one size.
type e2eFigures struct {
	Objects    int     `json:"objects"`
	FillKeysPS float64 `json:"fill_keys_per_s"`     // batched PutStart+PutEnd over RPC, journal on
	FillWorstS float64 `json:"fill_slowest_call_s"` // the longest of those calls
	// Baseline: one client's gets while no snapshot can run (interval 1 h).
	Baseline latencies `json:"baseline"`
	// Snapshot: the gets overlapping the first snapshot after a restart,
	// from when it is due (the master listening + the interval) until its
	// file is in place.
	Snapshot latencies `json:"during_snapshot"`
	// WorstOverP99 is Snapshot.MaxUS / Baseline.P99US (goal <= 2).
	WorstOverP99 float64 `json:"worst_over_p99"`
	// FalseMisses: gets answering "not found" for a key that exists (in
	// every phase). OverLease: answers that came later than the lease
	// they granted (a client would have to look the object up again).
	FalseMisses int `json:"false_misses"`
	OverLease   int `json:"answers_after_their_lease"`
	Errors      int `json:"errors"`
	// SnapshotS: started → file in place; SnapshotFileS: its .tmp first seen
	// → in place (the part spent writing, when the writer makes the
	// .tmp first). SnapshotBytes: the file's size.
	SnapshotS     float64 `json:"snapshot_s"`
	SnapshotFileS float64 `json:"snapshot_file_s"`
	SnapshotBytes int64   `json:"snapshot_bytes"`
	// RestartS: kill -9 → the first get of an old object answered, on a
	// state directory holding a snapshot and a short log;
	// RestartJournalS: the same with everything in the log (no snapshot
	// yet). StateBytes: the directory's size at the first.
	RestartS        float64 `json:"restart_s"`
	RestartJournalS float64 `json:"restart_journal_only_s"`
	StateBytes      int64   `json:"state_dir_bytes"`
	// The limits, measured in the same run: a copy of the snapshot's
	// bytes in memory, a sequential write of them and one fsync, and a
	// sequential read of the state directory (warm cache: the page cache
	// cannot be dropped here).
	MemcpyS      float64 `json:"limit_memcpy_snapshot_s"`
	WriteFsyncS  float64 `json:"limit_write_fsync_snapshot_s"`
	ReadStateS   float64 `json:"limit_read_state_dir_warm_s"`
	SnapshotSeen bool    `json:"snapshot_seen"`
	// MasterPeakRSS: the largest peak RSS (VmHWM) of the three master
	// processes (fill, snapshot, restart on the snapshot).
	MasterPeakRSS int64 `json:"master_peak_rss_bytes"`
}

// e2eOptions shape the end-to-end run.
type e2eOptions struct {
	master   string        // the gostore-master binary
	interval time.Duration // snapshot interval of the snapshot phase
	baseline time.Duration // how long the baseline reads run
	timeout  time.Duration // bound on one restart or one snapshot
	lease    time.Duration // --default_kv_lease_ttl
	maxRSS   int64         // a master above this RSS is killed (0: no bound)
}

// masterProc is a running gostore-master.
type masterProc struct {
	cmd    *exec.Cmd
	addr   string
	listen time.Time // when its "listening" line was read
	peak   int64     // its peak RSS (VmHWM), read as it is killed
	over   atomic.Pointer[string]
	// exited closes once the process is gone and reaped (the one Wait);
	// done stops the guard.
	exited, done chan struct{}
}

// startMaster runs the binary with flags and waits (at most timeout) for
// the line saying it listens. Above maxRSS bytes of RSS (0: no bound) the
// master is killed, and what fails next says so.
func startMaster(bin string, timeout time.Duration, maxRSS int64, flags ...string) (*masterProc, error) {
	cmd := exec.Command(bin, flags...)
	cmd.Stderr = os.Stderr
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL} // never outlives the benchmark
	out, err := cmd.StdoutPipe()
	if err != nil {
		return nil, err
	}
	if err := cmd.Start(); err != nil {
		return nil, err
	}
	m := &masterProc{cmd: cmd, done: make(chan struct{}), exited: make(chan struct{})}
	go func() {
		cmd.Wait()
		close(m.exited)
	}()
	if maxRSS > 0 {
		go m.guard(maxRSS)
	}
	line := make(chan string, 1)
	go func() {
		br := bufio.NewReader(out)
		l, _ := br.ReadString('\n')
		line <- l
		io.Copy(io.Discard, br)
	}()
	select {
	case l := <-line:
		_, addr, ok := strings.Cut(l, "rpc=")
		if !ok {
			m.kill()
			return nil, fmt.Errorf("gostore-master did not start: %q%s", l, m.why())
		}
		m.addr, _, _ = strings.Cut(strings.TrimSpace(addr), " ")
		m.listen = time.Now()
		return m, nil
	case <-m.exited:
		m.kill()
		return nil, fmt.Errorf("gostore-master exited before listening%s", m.why())
	case <-time.After(timeout):
		m.kill()
		return nil, fmt.Errorf("gostore-master not listening after %v%s", timeout, m.why())
	}
}

// guard samples the master's RSS every 100 ms and kills it above max: a
// master that outgrows its share of a shared machine ends, and the run
// reports it instead of the machine running out.
func (m *masterProc) guard(max int64) {
	t := time.NewTicker(100 * time.Millisecond)
	defer t.Stop()
	for {
		select {
		case <-m.done:
			return
		case <-t.C:
			if rss := statusBytes(m.cmd.Process.Pid, "VmRSS"); rss > max {
				why := fmt.Sprintf(" (killed: %.1f GB of RSS, over -max-master-rss-gb=%.1f)", float64(rss)/1e9, float64(max)/1e9)
				m.over.Store(&why)
				m.cmd.Process.Kill()
				return
			}
		}
	}
}

// why is the guard's reason for a kill, or "".
func (m *masterProc) why() string {
	if w := m.over.Load(); w != nil {
		return *w
	}
	return ""
}

// statusBytes reads a "Name:   N kB" line of /proc/pid/status (0 if none).
func statusBytes(pid int, name string) int64 {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return 0
	}
	for _, l := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(l, name+":"); ok {
			kb, _ := strconv.ParseInt(strings.TrimSpace(strings.TrimSuffix(strings.TrimSpace(v), "kB")), 10, 64)
			return kb << 10
		}
	}
	return 0
}

// kill ends the master with SIGKILL and waits until it is reaped, noting
// its peak RSS. Killing one already gone does nothing.
func (m *masterProc) kill() {
	if m == nil {
		return
	}
	select {
	case <-m.done:
		return
	default:
	}
	m.peak = statusBytes(m.cmd.Process.Pid, "VmHWM")
	close(m.done)
	m.cmd.Process.Kill()
	<-m.exited
}

// gone is an error once the master process has ended (killed by the
// guard, or crashed), nil while it runs.
func (m *masterProc) gone() error {
	select {
	case <-m.exited:
		return fmt.Errorf("gostore-master exited%s", m.why())
	default:
		return nil
	}
}

// buildMaster builds gostore-master into dir.
func buildMaster(dir string) (string, error) {
	bin := filepath.Join(dir, "gostore-master")
	cmd := exec.Command("go", "build", "-ldflags=-checklinkname=0", "-o", bin,
		"github.com/gostore/gostore/gostore/master/cmd/gostore-master")
	cmd.Stdout, cmd.Stderr = os.Stderr, os.Stderr
	return bin, cmd.Run()
}

// freePort is a loopback port nobody listens on now, so a restarted master
// comes back where its clients look for it.
func freePort() (int, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, err
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port, nil
}

// reader reads random existing keys as a client's get does (GetReplicas
// for a read, one key) and records every call.
type reader struct {
	n   int
	rng *rand.Rand
	// timeout bounds each call: far above the client's default, so that
	// a long pause is measured, not cut short.
	timeout                    time.Duration
	falseMiss, overLease, errs int
}

// read does one get on cl and returns when it started and how long it took.
func (r *reader) read(ctx context.Context, cl *rpc.Client) (time.Time, time.Duration) {
	key := keyOf(r.rng.IntN(r.n))
	var resp wire.GetReplicasResp
	ctx, cancel := context.WithTimeout(ctx, r.timeout)
	defer cancel()
	start := time.Now()
	err := cl.Call(ctx, wire.OpGetReplicas, &wire.KeysReq{ClientID: "scale-reader", Keys: []string{key}, ForRead: true}, &resp)
	d := time.Since(start)
	r.classify(err, resp, d)
	return start, d
}

func (r *reader) classify(err error, resp wire.GetReplicasResp, d time.Duration) {
	var we *wire.Error
	switch {
	case errors.As(err, &we) && we.Code == wire.ErrObjectNotFound:
		r.falseMiss++
	case err != nil || len(resp.Results) != 1:
		r.errs++
	case resp.Results[0].Code == wire.ErrObjectNotFound:
		r.falseMiss++
	case resp.Results[0].Code != wire.OK:
		r.errs++
	case resp.Results[0].LeaseMS > 0 && d > time.Duration(resp.Results[0].LeaseMS)*time.Millisecond:
		r.overLease++
	}
}

// fillRPC puts objects [0, n) through cl in batches from four callers
// (while one waits for the journal's fsync the others' batches are
// decoded), each call bounded by timeout, and returns the longest call.
func fillRPC(ctx context.Context, cl *rpc.Client, n int, timeout time.Duration) (time.Duration, error) {
	const batch = 16384
	var slowest atomic.Int64
	call := func(op wire.Op, req, resp any) error {
		ctx, cancel := context.WithTimeout(ctx, timeout)
		defer cancel()
		start := time.Now()
		err := cl.Call(ctx, op, req, resp)
		d := int64(time.Since(start))
		for old := slowest.Load(); d > old && !slowest.CompareAndSwap(old, d); old = slowest.Load() {
		}
		return err
	}
	var next atomic.Int64
	var wg sync.WaitGroup
	errs := make([]error, 4)
	for g := range errs {
		wg.Add(1)
		go func() {
			defer wg.Done()
			sizes := make([]uint64, batch)
			for i := range sizes {
				sizes[i] = objectSize
			}
			for {
				lo := int(next.Add(batch)) - batch
				if lo >= n {
					return
				}
				ks := make([]string, min(batch, n-lo))
				for j := range ks {
					ks[j] = keyOf(lo + j)
				}
				var ps wire.PutStartResp
				if err := call(wire.OpPutStart, &wire.PutStartReq{ClientID: "scale", Keys: ks, Sizes: sizes[:len(ks)]}, &ps); err != nil {
					errs[g] = err
					return
				}
				for j, r := range ps.Results {
					if r.Code != wire.OK {
						errs[g] = fmt.Errorf("PutStart %s: %d", ks[j], r.Code)
						return
					}
				}
				var codes wire.CodesResp
				if err := call(wire.OpPutEnd, &wire.KeysReq{ClientID: "scale", Keys: ks}, &codes); err != nil {
					errs[g] = err
					return
				}
			}
		}()
	}
	wg.Wait()
	return time.Duration(slowest.Load()), errors.Join(errs...)
}

// firstGet polls an old key on a new client until the master answers it,
// and returns when it did.
func firstGet(ctx context.Context, m *masterProc, key string, deadline time.Time) (time.Time, error) {
	cl := rpc.NewClient(m.addr)
	defer cl.Close()
	for {
		if err := m.gone(); err != nil {
			return time.Time{}, err
		}
		var resp wire.GetReplicasResp
		cctx, cancel := context.WithTimeout(ctx, time.Second)
		err := cl.Call(cctx, wire.OpGetReplicas, &wire.KeysReq{ClientID: "scale-reader", Keys: []string{key}, ForRead: true}, &resp)
		cancel()
		if err == nil && len(resp.Results) == 1 && resp.Results[0].Code == wire.OK {
			return time.Now(), nil
		}
		if time.Now().After(deadline) {
			return time.Time{}, fmt.Errorf("no answer for %s: %v", key, err)
		}
		time.Sleep(time.Millisecond)
	}
}

// snapWatch reports snapshot files appearing in a state directory: the
// first new snap-*.gsnap.tmp and the first new snap-*.gsnap after start.
type snapWatch struct {
	tmpSeen, done time.Time
	file          string
	bytes         int64
}

// snapFiles names each snapshot file in dir by its name, inode and
// modification time: a snapshot with nothing new since the last one
// replaces a file of the same name (the log's sequence number names it).
func snapFiles(dir string) map[string]bool {
	out := map[string]bool{}
	entries, _ := os.ReadDir(dir)
	for _, e := range entries {
		if !strings.HasPrefix(e.Name(), "snap-") {
			continue
		}
		info, err := e.Info()
		if err != nil {
			continue // gone since the listing: renamed or folded
		}
		ino := uint64(0)
		if st, ok := info.Sys().(*syscall.Stat_t); ok {
			ino = st.Ino
		}
		out[fmt.Sprintf("%s %d %d", e.Name(), ino, info.ModTime().UnixNano())] = true
	}
	return out
}

// watchSnapshot polls dir every millisecond until a snapshot file that
// was not in old is in place, stop closes, or the deadline passes.
func watchSnapshot(dir string, old map[string]bool, stop <-chan struct{}, deadline time.Time) snapWatch {
	var w snapWatch
	for time.Now().Before(deadline) {
		select {
		case <-stop:
			return w
		default:
		}
		now := time.Now()
		for id := range snapFiles(dir) {
			if old[id] {
				continue
			}
			name, _, _ := strings.Cut(id, " ")
			if strings.HasSuffix(name, ".gsnap.tmp") && w.tmpSeen.IsZero() {
				w.tmpSeen = now
			}
			if strings.HasSuffix(name, ".gsnap") {
				w.done, w.file = now, name
				if info, err := os.Stat(filepath.Join(dir, name)); err == nil {
					w.bytes = info.Size()
				}
				return w
			}
		}
		time.Sleep(time.Millisecond)
	}
	return w
}

// endToEnd runs the real master at n objects: fill, baseline reads, kill
// -9 and restart (everything in the journal), reads through the first
// snapshot, kill -9 and restart (snapshot + short log), then the limits.
func endToEnd(n int, o e2eOptions) (e2eFigures, error) {
	f := e2eFigures{Objects: n}
	ctx := context.Background()
	dir, err := os.MkdirTemp("", "gostore-scale-")
	if err != nil {
		return f, err
	}
	defer os.RemoveAll(dir)
	state := filepath.Join(dir, "state")
	port, err := freePort()
	if err != nil {
		return f, err
	}
	flags := func(interval time.Duration) []string {
		return []string{"--rpc_address=127.0.0.1", "--rpc_port=" + strconv.Itoa(port), "--metrics_port=-1",
			"--log_level=warn", "--client_ttl=3600", "--snapshot_backup_dir=" + state,
			"--default_kv_lease_ttl=" + strconv.FormatInt(o.lease.Milliseconds(), 10),
			"--snapshot_interval_seconds=" + strconv.FormatInt(interval.Milliseconds(), 10) + "ms"}
	}
	m, err := startMaster(o.master, o.timeout, o.maxRSS, flags(time.Hour)...)
	if err != nil {
		return f, err
	}
	defer func() { m.kill() }()
	killed := func() { // kill -9, keeping the figure of its peak RSS
		m.kill()
		f.MasterPeakRSS = max(f.MasterPeakRSS, m.peak)
	}
	cl := rpc.NewClient(m.addr)
	segKey := make([]byte, 32)
	segKey[0] = 7
	seg := wire.SegmentDesc{Name: "127.0.0.1:" + strconv.Itoa(port+1), ClientID: "scale", Size: uint64(n)*objectSize*2 + 64<<20}
	if err := cl.Call(ctx, wire.OpMountSegment, &wire.MountReq{Seg: seg, GrantKey: segKey}, &wire.MountResp{}); err != nil {
		cl.Close()
		return f, fmt.Errorf("mount: %w", err)
	}
	start := time.Now()
	slowest, err := fillRPC(ctx, cl, n, o.timeout)
	if err != nil {
		cl.Close()
		return f, fmt.Errorf("fill: %w%s", err, m.why())
	}
	f.FillKeysPS = float64(n) / time.Since(start).Seconds()
	f.FillWorstS = slowest.Seconds()

	rd := &reader{n: n, rng: rand.New(rand.NewPCG(uint64(n), 7)), timeout: o.timeout}
	var base []time.Duration
	for end := time.Now().Add(o.baseline); time.Now().Before(end); {
		if err := m.gone(); err != nil {
			cl.Close()
			return f, fmt.Errorf("baseline reads: %w", err)
		}
		_, d := rd.read(ctx, cl)
		base = append(base, d)
	}
	cl.Close()
	f.Baseline = summarize(base)

	// Restart on a directory holding only the journal.
	oldKey := keyOf(n - 1)
	kill := time.Now()
	killed()
	if m, err = startMaster(o.master, o.timeout, o.maxRSS, flags(o.interval)...); err != nil {
		return f, fmt.Errorf("restart: %w", err)
	}
	got, err := firstGet(ctx, m, oldKey, time.Now().Add(o.timeout))
	if err != nil {
		return f, fmt.Errorf("restart: %w%s", err, m.why())
	}
	f.RestartJournalS = got.Sub(kill).Seconds()

	// Reads through the first snapshot the restarted master takes: the
	// one after its restore (which runs while it serves) or, were that
	// one done already, the first periodic one.
	old := snapFiles(state)
	due := m.listen.Add(o.interval)
	stop := make(chan struct{})
	seen := make(chan snapWatch, 1)
	go func() { seen <- watchSnapshot(state, old, stop, due.Add(o.timeout)) }()
	type call struct {
		start time.Time
		d     time.Duration
	}
	var calls []call
	cl = rpc.NewClient(m.addr)
	var w snapWatch
reading:
	for {
		if err := m.gone(); err != nil {
			close(stop)
			cl.Close()
			return f, fmt.Errorf("reads through a snapshot: %w", err)
		}
		s, d := rd.read(ctx, cl)
		calls = append(calls, call{s, d})
		select {
		case w = <-seen:
			// One more read: a get queued behind the snapshot's end.
			s, d := rd.read(ctx, cl)
			calls = append(calls, call{s, d})
			break reading
		default:
		}
	}
	close(stop)
	cl.Close()
	f.SnapshotSeen = !w.done.IsZero()
	// The snapshot ran from its .tmp's first sight (or, missed: from when
	// it was due, or from the listening line for one done before that) to
	// its file in place.
	begin := w.tmpSeen
	if begin.IsZero() {
		begin = due
		if w.done.Before(due) {
			begin = m.listen
		}
	}
	if f.SnapshotSeen {
		f.SnapshotS = w.done.Sub(begin).Seconds()
		if !w.tmpSeen.IsZero() {
			f.SnapshotFileS = w.done.Sub(w.tmpSeen).Seconds()
		}
		f.SnapshotBytes = w.bytes
	}
	var during []time.Duration
	for _, c := range calls {
		if c.start.Add(c.d).After(begin) && (w.done.IsZero() || c.start.Before(w.done)) {
			during = append(during, c.d)
		}
	}
	f.Snapshot = summarize(during)
	if f.Baseline.P99US > 0 {
		f.WorstOverP99 = f.Snapshot.MaxUS / f.Baseline.P99US
	}
	f.FalseMisses, f.OverLease, f.Errors = rd.falseMiss, rd.overLease, rd.errs

	// Restart on the snapshot and the log written since.
	kill = time.Now()
	killed()
	f.StateBytes = dirBytes(state)
	if m, err = startMaster(o.master, o.timeout, o.maxRSS, flags(time.Hour)...); err != nil {
		return f, fmt.Errorf("second restart: %w", err)
	}
	if got, err = firstGet(ctx, m, oldKey, time.Now().Add(o.timeout)); err != nil {
		return f, fmt.Errorf("second restart: %w%s", err, m.why())
	}
	f.RestartS = got.Sub(kill).Seconds()
	killed()

	// The limits, with no master running.
	if f.SnapshotBytes > 0 {
		f.MemcpyS = memcpyTime(f.SnapshotBytes)
		f.WriteFsyncS, err = writeFsyncTime(filepath.Join(dir, "limit-write"), f.SnapshotBytes)
		if err != nil {
			return f, err
		}
	}
	f.ReadStateS, err = readDirTime(state)
	return f, err
}

func dirBytes(dir string) int64 {
	var n int64
	entries, _ := os.ReadDir(dir)
	for _, e := range entries {
		if info, err := e.Info(); err == nil && !e.IsDir() {
			n += info.Size()
		}
	}
	return n
}

// limitChunk bounds the memory the limits take: larger amounts are
// copied or written chunk by chunk, at the same rate.
const limitChunk = 64 << 20

// memcpyTime is how long copying n bytes between two warm buffers takes.
func memcpyTime(n int64) float64 {
	size := min(n, limitChunk)
	src, dst := make([]byte, size), make([]byte, size)
	for i := range src {
		src[i] = byte(i)
	}
	copy(dst, src) // warm both
	start := time.Now()
	for left := n; left > 0; left -= size {
		copy(dst[:min(left, size)], src)
	}
	return time.Since(start).Seconds()
}

// writeFsyncTime writes n bytes to a new file sequentially, then one fsync.
func writeFsyncTime(path string, n int64) (float64, error) {
	buf := make([]byte, min(n, 1<<20))
	for i := range buf {
		buf[i] = byte(i * 7)
	}
	start := time.Now()
	fd, err := os.Create(path)
	if err != nil {
		return 0, err
	}
	defer os.Remove(path)
	defer fd.Close()
	for left := n; left > 0; left -= int64(len(buf)) {
		if _, err := fd.Write(buf[:min(left, int64(len(buf)))]); err != nil {
			return 0, err
		}
	}
	if err := fd.Sync(); err != nil {
		return 0, err
	}
	return time.Since(start).Seconds(), nil
}

// readDirTime reads every file of dir sequentially (from the page cache
// where they are in it).
func readDirTime(dir string) (float64, error) {
	buf := make([]byte, 1<<20)
	start := time.Now()
	entries, err := os.ReadDir(dir)
	if err != nil {
		return 0, err
	}
	for _, e := range entries {
		if e.IsDir() {
			continue
		}
		fd, err := os.Open(filepath.Join(dir, e.Name()))
		if err != nil {
			return 0, err
		}
		for {
			if _, err := fd.Read(buf); err != nil {
				break
			}
		}
		fd.Close()
	}
	return time.Since(start).Seconds(), nil
}
