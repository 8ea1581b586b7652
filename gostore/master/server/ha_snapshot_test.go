package server

import (
	"bytes"
	"context"
	"crypto/tls"
	"encoding/binary"
	"fmt"
	"hash/crc32"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/gostore/gostore/gostore/auth"
	"github.com/gostore/gostore/gostore/auth/authtest"
	"github.com/gostore/gostore/gostore/etcdkv"
	"github.com/gostore/gostore/gostore/internal/etcdtest"
	"github.com/gostore/gostore/gostore/journal"
	"github.com/gostore/gostore/gostore/master/ha"
	"github.com/gostore/gostore/gostore/rpc"
	"github.com/gostore/gostore/gostore/wire"
)

// haCluster is masters on one etcd cluster under one cluster id, each on
// its own state directory.
type haCluster struct {
	t   *testing.T
	cl  *etcdtest.Cluster
	id  string
	ctx context.Context
}

func newHACluster(t *testing.T, id string) *haCluster {
	ctx, cancel := context.WithTimeout(context.Background(), 150*time.Second)
	t.Cleanup(cancel)
	return &haCluster{t: t, cl: etcdtest.Start(t, 1), id: id, ctx: ctx}
}

func (h *haCluster) hopts() ha.Options {
	return ha.Options{Endpoints: h.cl.Endpoints(), Prefix: "/gostore/" + h.id + "/master/"}
}

type started struct {
	s   *Server
	err error
}

// start runs a master on dir; its Start returns once it leads.
func (h *haCluster) start(dir string, flags ...string) <-chan started {
	up := make(chan started, 1)
	args := append([]string{"--rpc_address=127.0.0.1", "--rpc_port=0", "--metrics_port=0", "--log_level=error",
		"--client_ttl=60", "--snapshot_interval_seconds=3600", "--snapshot_backup_dir=" + dir}, h.cl.MasterFlags(h.id)...)
	o := parse(h.t, append(args, flags...)...)
	go func() {
		s, err := Start(o)
		up <- started{s, err}
	}()
	return up
}

func (h *haCluster) lead(up <-chan started) *Server {
	h.t.Helper()
	select {
	case r := <-up:
		if r.err != nil {
			h.t.Fatal(r.err)
		}
		h.t.Cleanup(r.s.Close)
		return r.s
	case <-h.ctx.Done():
		h.t.Fatal("no master led in time")
	}
	return nil
}

// writer mounts a segment on s and puts objects through it.
type writer struct {
	t   *testing.T
	ctx context.Context
	c   *rpc.Client
	n   int
}

func newWriter(t *testing.T, ctx context.Context, s *Server) *writer {
	c := rpc.NewClient(s.Addr())
	t.Cleanup(func() { c.Close() })
	var mr wire.MountResp
	if err := c.Call(ctx, wire.OpMountSegment, &wire.MountReq{Seg: wire.SegmentDesc{Name: "h:1", ClientID: "c1",
		Size: 256 << 20, ShmPath: "/x"}}, &mr); err != nil {
		t.Fatal(err)
	}
	return &writer{t: t, ctx: ctx, c: c}
}

// put adds n objects; their keys.
func (w *writer) put(n int) []string {
	w.t.Helper()
	keys, sizes := make([]string, n), make([]uint64, n)
	for i := range keys {
		keys[i], sizes[i] = fmt.Sprintf("obj-%06d", w.n), uint64(1000+w.n%1000)
		w.n++
	}
	var ps wire.PutStartResp
	if err := w.c.Call(w.ctx, wire.OpPutStart, &wire.PutStartReq{ClientID: "c1", Keys: keys, Sizes: sizes}, &ps); err != nil {
		w.t.Fatal(err)
	}
	var pe wire.CodesResp
	if err := w.c.Call(w.ctx, wire.OpPutEnd, &wire.KeysReq{ClientID: "c1", Keys: keys}, &pe); err != nil {
		w.t.Fatal(err)
	}
	for i, c := range pe.Codes {
		if c != wire.OK {
			w.t.Fatalf("put %s: %v", keys[i], c)
		}
	}
	return keys
}

// replicas is what s answers for keys, one line per key.
func replicas(t *testing.T, ctx context.Context, s *Server, keys []string) []string {
	t.Helper()
	c := rpc.NewClient(s.Addr())
	defer c.Close()
	var r wire.GetReplicasResp
	if err := c.Call(ctx, wire.OpGetReplicas, &wire.KeysReq{Keys: keys}, &r); err != nil {
		t.Fatal(err)
	}
	out := make([]string, len(keys))
	for i, res := range r.Results {
		out[i] = fmt.Sprintf("%s %v %v", keys[i], res.Code, res.Replicas)
	}
	return out
}

func sameReplicas(t *testing.T, before, after []string) {
	t.Helper()
	for i := range before {
		if before[i] != after[i] || !strings.Contains(before[i], " OK [") {
			t.Fatalf("before: %s\nafter:  %s", before[i], after[i])
		}
	}
}

// snapshotSeq is the record of the newest snapshot in dir (0: none).
func snapshotSeq(t *testing.T, dir string) uint64 {
	seq, _, err := journal.NewestSnapshot(dir)
	if err != nil {
		t.Fatal(err)
	}
	return seq
}

// copySnapshot puts dir's newest snapshot file into to: a master that
// stopped right after it.
func copySnapshot(t *testing.T, dir, to string) uint64 {
	seq, f, _, err := journal.OpenNewestSnapshot(dir)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if _, _, err := journal.ReceiveSnapshot(to, f, nil); err != nil {
		t.Fatal(err)
	}
	return seq
}

// waitForSnapshot waits for the first snapshot in dir (a new leader takes
// one once it serves).
func waitForSnapshot(t *testing.T, ctx context.Context, dir string) {
	t.Helper()
	waitFor(t, ctx, "a snapshot in "+dir, func() bool {
		_, f, _, err := journal.OpenNewestSnapshot(dir)
		if err == nil {
			f.Close()
		}
		return err == nil
	})
}

func waitFor(t *testing.T, ctx context.Context, what string, cond func() bool) {
	t.Helper()
	for !cond() {
		select {
		case <-ctx.Done():
			t.Fatalf("timed out waiting for %s", what)
		case <-time.After(20 * time.Millisecond):
		}
	}
}

// A standby that missed several snapshots (it stopped after the first;
// the leader then wrote, snapshotted and trimmed its log past it) starts
// from its own snapshot, finds the log on etcd no longer reaches back to
// it, fetches the leader's snapshot over the leader's HTTP port, follows
// the tail, and after the leader dies serves every object as it was.
func TestStandbyThatMissedSnapshotsCatchesUpFromTheLeader(t *testing.T) {
	h := newHACluster(t, "missed")
	dirA, dirB := t.TempDir(), t.TempDir()
	a := h.lead(h.start(dirA, "--ha_log_tail_records=50"))
	w := newWriter(t, h.ctx, a)
	keys := w.put(100)
	if err := a.state.snapshot(a.core); err != nil {
		t.Fatal(err)
	}
	own := copySnapshot(t, dirA, dirB)
	for round := 0; round < 5; round++ {
		keys = append(keys, w.put(100)...)
		if err := a.state.snapshot(a.core); err != nil {
			t.Fatal(err)
		}
	}
	trimmed, err := ha.Trimmed(h.ctx, h.hopts())
	if err != nil || trimmed <= own {
		t.Fatalf("the log on etcd trimmed up to %d (%v): it should no longer reach back to the standby's %d", trimmed, err, own)
	}
	bUp := h.start(dirB)
	// The standby installs the leader's snapshot in its own directory.
	waitFor(t, h.ctx, "the standby's fetch of the leader's snapshot", func() bool { return snapshotSeq(t, dirB) >= trimmed })
	keys = append(keys, w.put(20)...) // the tail after it
	before := replicas(t, h.ctx, a, keys)
	a.stepDown() // a dies: no resignation, its lease lapses
	<-a.Done()
	b := h.lead(bUp)
	if b.state.fetched != 1 {
		t.Fatalf("the standby fetched %d snapshots, want 1", b.state.fetched)
	}
	sameReplicas(t, before, replicas(t, h.ctx, b, keys))
}

// A standby that kept up takes over without any snapshot: the log on
// etcd held every record it had not applied yet.
func TestHotStandbyTakesOverWithoutASnapshot(t *testing.T) {
	h := newHACluster(t, "hot")
	dirA, dirB := t.TempDir(), t.TempDir()
	// A round below writes about 100 records: fewer than the tail, so a
	// standby caught up at its start stays within the log whatever the
	// leader trims meanwhile.
	a := h.lead(h.start(dirA, "--ha_log_tail_records=300"))
	// The standby writes its own snapshot every second it moved on: how
	// the test sees how far it got.
	bUp := h.start(dirB, "--snapshot_interval_seconds=1")
	w := newWriter(t, h.ctx, a)
	var keys []string
	for round := 0; round < 8; round++ {
		keys = append(keys, w.put(50)...)
		last := a.state.j.LastSeq()
		waitFor(t, h.ctx, "the standby's snapshot of the leader's last record", func() bool { return snapshotSeq(t, dirB) >= last })
		if err := a.state.snapshot(a.core); err != nil {
			t.Fatal(err)
		}
	}
	if tr, _ := ha.Trimmed(h.ctx, h.hopts()); tr == 0 {
		t.Fatal("the leader trimmed nothing: the test shows nothing")
	}
	keys = append(keys, w.put(10)...)
	before := replicas(t, h.ctx, a, keys)
	a.stepDown()
	<-a.Done()
	b := h.lead(bUp)
	if b.state.fetched != 0 {
		t.Fatalf("a standby that kept up fetched %d snapshots", b.state.fetched)
	}
	sameReplicas(t, before, replicas(t, h.ctx, b, keys))
}

// A master that wins the leadership with a state the log on etcd no longer
// reaches (its snapshot is old, the leader that trimmed is dead) does not
// serve: it gives the leadership back and waits. The dead leader, started
// again on its own directory, can serve (its snapshot meets the log); the
// waiting master then catches up from it, and takes over every object when
// it stops.
func TestNewLeaderWithAGapWaitsRatherThanServe(t *testing.T) {
	h := newHACluster(t, "gap")
	dirA, dirB := t.TempDir(), t.TempDir()
	a := h.lead(h.start(dirA, "--ha_log_tail_records=50"))
	w := newWriter(t, h.ctx, a)
	keys := w.put(100)
	if err := a.state.snapshot(a.core); err != nil {
		t.Fatal(err)
	}
	copySnapshot(t, dirA, dirB)
	for round := 0; round < 3; round++ {
		keys = append(keys, w.put(100)...)
		if err := a.state.snapshot(a.core); err != nil {
			t.Fatal(err)
		}
	}
	keys = append(keys, w.put(10)...) // in the log only
	before := replicas(t, h.ctx, a, keys)
	a.stepDown()
	<-a.Done()
	bUp := h.start(dirB)
	select {
	case r := <-bUp:
		t.Fatalf("a master whose state the log does not reach served: %+v", r)
	case <-time.After(3 * 2 * time.Second): // three leases: it won, and gave back, again and again
	}
	a2 := h.lead(h.start(dirA))
	if a2.state.fetched != 0 {
		// Its own snapshot is recent enough: the log on etcd reaches it.
		t.Fatalf("the old leader restarted on its directory fetched %d snapshots", a2.state.fetched)
	}
	sameReplicas(t, before, replicas(t, h.ctx, a2, keys))
	trimmed, _ := ha.Trimmed(h.ctx, h.hopts())
	waitFor(t, h.ctx, "the waiting master's fetch from the restarted leader", func() bool { return snapshotSeq(t, dirB) >= trimmed })
	a2.Close() // resigns
	b := h.lead(bUp)
	sameReplicas(t, before, replicas(t, h.ctx, b, keys))
}

// A cluster whose etcd holds a snapshot in the old format (an older
// gostore's leader wrote "snaphead" and "snap/<seq>/<chunk>", and deleted
// the log it covered) is taken over: the new leader reads it once, serves
// its objects, and its first trim deletes it from etcd.
func TestOldFormatSnapshotOnEtcdIsTakenOverThenDeleted(t *testing.T) {
	h := newHACluster(t, "old")
	dirA := t.TempDir()
	a := h.lead(h.start(dirA))
	w := newWriter(t, h.ctx, a)
	keys := w.put(300)
	if err := a.state.snapshot(a.core); err != nil {
		t.Fatal(err)
	}
	before := replicas(t, h.ctx, a, keys)
	a.stepDown()
	<-a.Done()
	seq, state, err := journal.NewestSnapshot(dirA)
	if err != nil || seq != a.state.j.LastSeq() {
		t.Fatalf("snapshot %d (%v) of a log at %d", seq, err, a.state.j.LastSeq())
	}
	// etcd as the old leader left it: the snapshot in chunks, its head, and
	// no log record it covers.
	kv := etcdkv.New(h.cl.Endpoints())
	p := h.hopts().Prefix
	if _, err := kv.DeleteRange(h.ctx, []byte(p+"log/"), etcdkv.PrefixEnd([]byte(p+"log/"))); err != nil {
		t.Fatal(err)
	}
	kv.DeleteRange(h.ctx, []byte(p+"trimmed"), nil)
	const chunk = 1 << 20
	for i := 0; i == 0 || i*chunk < len(state); i++ {
		part := state[i*chunk : min((i+1)*chunk, len(state))]
		if _, err := kv.Put(h.ctx, []byte(fmt.Sprintf("%ssnap/%020d/%06d", p, seq, i)), part, 0); err != nil {
			t.Fatal(err)
		}
	}
	head := binary.LittleEndian.AppendUint64(nil, seq)
	head = binary.LittleEndian.AppendUint64(head, uint64(len(state)))
	head = binary.LittleEndian.AppendUint32(head, crc32c(state))
	if _, err := kv.Put(h.ctx, []byte(p+"snaphead"), head, 0); err != nil {
		t.Fatal(err)
	}
	b := h.lead(h.start(t.TempDir()))
	sameReplicas(t, before, replicas(t, h.ctx, b, keys))
	// Its first snapshot, taken once it serves, trims the old one away.
	waitFor(t, h.ctx, "the old snapshot's head to go", func() bool {
		_, found, err := kv.Get(h.ctx, []byte(p+"snaphead"))
		return err == nil && !found
	})
	old, _, err := kv.Range(h.ctx, []byte(p+"snap/"), etcdkv.PrefixEnd([]byte(p+"snap/")), etcdkv.RangeOptions{KeysOnly: true})
	_, headLeft, herr := kv.Get(h.ctx, []byte(p+"snaphead"))
	if err != nil || herr != nil || len(old) != 0 || headLeft {
		t.Fatalf("%d chunks of the old snapshot left on etcd after the takeover, head %v (%v %v)", len(old), headLeft, err, herr)
	}
}

// The transfer path refuses what it cannot use, with an error saying
// why, and installs nothing: the leader's endpoint wants its secret and
// GET; a standby refuses an answer that is not a whole snapshot of a
// state.
func TestSnapshotTransferRefusesWrongInput(t *testing.T) {
	h := newHACluster(t, "wrong")
	secret := filepath.Join(t.TempDir(), "secret")
	os.WriteFile(secret, []byte("0123456789abcdef0123456789abcdef"), 0o600)
	dirA := t.TempDir()
	a := h.lead(h.start(dirA, "--auth_secret_file="+secret))
	waitForSnapshot(t, h.ctx, dirA)
	url, err := ha.SnapshotSource(h.ctx, h.hopts())
	if err != nil || url != "http://"+a.HTTPAddr()+snapshotPath {
		t.Fatalf("snapshot source %q (%v)", url, err)
	}
	get := func(method string, bearer string) (int, []byte) {
		req, _ := http.NewRequest(method, url, nil)
		if bearer != "" {
			req.Header.Set("Authorization", "Bearer "+bearer)
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, b
	}
	if code, body := get("GET", ""); code != http.StatusUnauthorized {
		t.Fatalf("without the secret: %d %q", code, body)
	}
	if code, body := get("GET", "not the secret at all, no"); code != http.StatusUnauthorized {
		t.Fatalf("with a wrong secret: %d %q", code, body)
	}
	if code, body := get("POST", "0123456789abcdef0123456789abcdef"); code != http.StatusMethodNotAllowed {
		t.Fatalf("POST: %d %q", code, body)
	}
	code, file := get("GET", "0123456789abcdef0123456789abcdef")
	seq, f, _, _ := journal.OpenNewestSnapshot(dirA)
	disk, _ := io.ReadAll(f)
	f.Close()
	if code != http.StatusOK || !bytes.Equal(file, disk) {
		t.Fatalf("GET with the secret: %d, %d bytes; snapshot %d on disk has %d", code, len(file), seq, len(disk))
	}
	// The standby's side, against peers answering wrong things.
	guard, err := auth.New(auth.Options{SecretFile: secret})
	if err != nil {
		t.Fatal(err)
	}
	notState := append([]byte(nil), file...)
	payload := notState[28:]
	for i := range payload {
		payload[i] = 0xc1 // never valid msgpack
	}
	binary.LittleEndian.PutUint32(notState[24:], crc32c(payload))
	huge := append([]byte(nil), file[:28]...)
	binary.LittleEndian.PutUint64(huge[16:], 1<<62)
	flipped := append([]byte(nil), file...)
	flipped[len(flipped)-1] ^= 1
	for _, c := range []struct {
		name   string
		status int
		body   []byte
		want   string
	}{
		{"an error status", http.StatusServiceUnavailable, []byte("no snapshot"), "503"},
		{"nothing", 200, nil, "header"},
		{"a short header", 200, file[:10], "header"},
		{"another file", 200, append([]byte("GSWAL\x00"), file[6:]...), "not a version-1 snapshot"},
		{"a payload claimed past the bound", 200, huge, "at most"},
		{"a payload cut short", 200, file[:len(file)-5], "payload bytes"},
		{"a byte after the payload", 200, append(append([]byte(nil), file...), 0), "bytes after"},
		{"a flipped bit", 200, flipped, "checksum"},
		{"bytes that are no state", 200, notState, "cannot be read"},
	} {
		srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			if r.Header.Get("Authorization") == "" {
				t.Errorf("%s: the standby sent no secret", c.name)
			}
			w.WriteHeader(c.status)
			w.Write(c.body)
		}))
		dirB := t.TempDir()
		_, _, err := fetchSnapshot(h.ctx, srv.URL+snapshotPath, guard, dirB)
		srv.Close()
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: %v, want an error saying %q", c.name, err, c.want)
		}
		if left, _ := os.ReadDir(dirB); len(left) != 0 {
			t.Errorf("%s: %d files left in the standby's directory", c.name, len(left))
		}
	}
	// The real answer is taken.
	got, st, err := fetchSnapshot(h.ctx, url, guard, t.TempDir())
	if err != nil || got != seq || st == nil {
		t.Fatalf("the leader's snapshot: %d %v", got, err)
	}
}

func crc32c(b []byte) uint32 { return crc32.Checksum(b, crc32.MakeTable(crc32.Castagnoli)) }

// Under mutual TLS the leader serves its snapshot over HTTPS to a standby
// presenting a certificate of the CA, and refuses a client without one.
func TestSnapshotTransferUnderMutualTLS(t *testing.T) {
	h := newHACluster(t, "mtls")
	dir := t.TempDir()
	ca := authtest.NewCA(t, dir, "ha")
	leaderCert, standbyCert := ca.Issue(t, "leader"), ca.Issue(t, "standby")
	dirA := t.TempDir()
	a := h.lead(h.start(dirA, "--tls_ca_file="+leaderCert.CAFile, "--tls_cert_file="+leaderCert.CertFile,
		"--tls_key_file="+leaderCert.KeyFile))
	waitForSnapshot(t, h.ctx, dirA)
	url, err := ha.SnapshotSource(h.ctx, h.hopts())
	if err != nil || url != "https://"+a.HTTPAddr()+snapshotPath {
		t.Fatalf("snapshot source %q (%v)", url, err)
	}
	seq, st, err := fetchSnapshot(h.ctx, url, authtest.Must(t, standbyCert), t.TempDir())
	if err != nil || seq != snapshotSeq(t, dirA) || st == nil {
		t.Fatalf("fetch with the CA's certificate: %d %v", seq, err)
	}
	noCert := &http.Client{Transport: &http.Transport{TLSClientConfig: &tls.Config{InsecureSkipVerify: true}}}
	resp, err := noCert.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusUnauthorized {
		t.Fatalf("without a certificate: %s", resp.Status)
	}
}
