package server

import (
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/vmihailenco/msgpack/v5"

	"github.com/gostore/gostore/gostore/journal"
	"github.com/gostore/gostore/gostore/master"
	"github.com/gostore/gostore/gostore/wire"
)

var writeV1State = flag.Bool("write_v1_state", false, "write testdata/state-v1 again (as a master before state version 2 did)")

// v1Keys are the objects of testdata/state-v1: k0..k9 in the snapshot,
// k3 removed and k10 put by records after it; "open" was being written.
func v1Keys() (present, absent []string) {
	for i := 0; i <= 10; i++ {
		if i == 3 {
			absent = append(absent, fmt.Sprintf("k%d", i))
		} else {
			present = append(present, fmt.Sprintf("k%d", i))
		}
	}
	return present, append(absent, "open")
}

// TestWriteV1State writes testdata/state-v1 as the masters before state
// version 2 wrote a state directory: the state copied under every lock
// (Core.DurableState), in the msgpack envelope, then records after it.
func TestWriteV1State(t *testing.T) {
	if !*writeV1State {
		t.Skip("-write_v1_state writes the test data again")
	}
	dir := filepath.Join("testdata", "state-v1")
	os.RemoveAll(dir)
	var records [][]byte
	core := master.New(master.Config{ClientTTL: time.Hour, OnChange: func(ch master.Change) {
		b, err := master.EncodeChange(nil, ch)
		if err != nil {
			t.Fatal(err)
		}
		records = append(records, b)
	}})
	for i, name := range []string{"10.0.0.1:1", "10.0.0.2:1"} {
		key := []byte(strings.Repeat(fmt.Sprint(i), 32))
		if _, err := core.MountSegment(wire.SegmentDesc{Name: name, ClientID: fmt.Sprint("c", i), Size: 64 << 20, ShmPath: "/x"}, key); err != nil {
			t.Fatal(err)
		}
	}
	put := func(k string, end bool) {
		res, err := core.PutStart("c0", "", []string{k}, []uint64{uint64(4096 + len(k))}, wire.ReplicaConfig{ReplicaNum: 2})
		if err != nil || res[0].Code != wire.OK {
			t.Fatalf("put %s: %v %+v", k, err, res)
		}
		if end {
			core.PutEnd("c0", []string{k}, nil)
		}
	}
	for i := 0; i < 10; i++ {
		put(fmt.Sprintf("k%d", i), true)
	}
	put("open", false)
	j, _, err := journal.Open(journal.Options{Dir: dir})
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range records {
		j.Append(r)
	}
	st := core.DurableState(nil)
	b, err := msgpack.Marshal(&snapshotEnvelope{Version: stateVersion, State: st})
	if err != nil {
		t.Fatal(err)
	}
	if err := j.Snapshot(j.LastSeq(), b); err != nil {
		t.Fatal(err)
	}
	records = nil
	core.Remove([]string{"k3"}, false)
	put("k10", true)
	for _, r := range records {
		j.Append(r)
	}
	j.Close()
	os.Remove(filepath.Join(dir, "boot"))
}

// copyDir copies the files of src into a new temporary directory.
func copyDir(t *testing.T, src string) string {
	t.Helper()
	dst := t.TempDir()
	entries, err := os.ReadDir(src)
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range entries {
		b, err := os.ReadFile(filepath.Join(src, e.Name()))
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(dst, e.Name()), b, 0o600); err != nil {
			t.Fatal(err)
		}
	}
	return dst
}

// A state directory written before state version 2 (a msgpack snapshot
// and records after it) restores; the snapshot taken after the restore is
// of version 2, and a restart from it restores the same objects from the
// same ranges.
func TestAVersion1StateRestoresAndIsSnapshottedAsVersion2(t *testing.T) {
	dir := copyDir(t, filepath.Join("testdata", "state-v1"))
	start := func() *Server {
		t.Helper()
		s, err := Start(parse(t, "--rpc_address=127.0.0.1", "--rpc_port=0", "--metrics_port=-1", "--log_level=error",
			"--snapshot_backup_dir="+dir))
		if err != nil {
			t.Fatal(err)
		}
		return s
	}
	present, absent := v1Keys()
	check := func(s *Server) []wire.GetResult {
		t.Helper()
		got := s.Core().PeekReplicas(append(slices.Clone(present), absent...))
		for i, g := range got {
			want := wire.OK
			if i >= len(present) {
				want = wire.ErrObjectNotFound
			}
			if g.Code != want || want == wire.OK && (len(g.Replicas) != 2 || g.Size != uint64(4096+len(present[i]))) {
				t.Fatalf("key %d after the restore: %+v", i, g)
			}
		}
		if segs := s.Core().Segments(); len(segs) != 2 {
			t.Fatalf("segments %+v", segs)
		}
		return got
	}
	s := start()
	before := check(s)
	deadline := time.Now().Add(10 * time.Second)
	for s.state.snapshots.Load() == 0 && time.Now().Before(deadline) { // the snapshot after the restore
		time.Sleep(10 * time.Millisecond)
	}
	s.Close()
	snaps, _ := filepath.Glob(filepath.Join(dir, "snap-*.gsnap"))
	if len(snaps) != 1 {
		t.Fatalf("snapshots %v", snaps)
	}
	j, rec, err := journal.Open(journal.Options{Dir: dir})
	if err != nil {
		t.Fatal(err)
	}
	j.Close()
	if !strings.HasPrefix(string(rec.Snapshot), master.StateMagic) {
		t.Fatalf("the snapshot after the restore starts % x, not version 2", rec.Snapshot[:min(8, len(rec.Snapshot))])
	}
	s = start()
	defer s.Close()
	after := check(s)
	for i := range present {
		if !slices.EqualFunc(before[i].Replicas, after[i].Replicas, func(a, b wire.Replica) bool {
			return a.SegID == b.SegID && a.Offset == b.Offset
		}) {
			t.Fatalf("%s: replicas %+v before the restart, %+v after", present[i], before[i].Replicas, after[i].Replicas)
		}
	}
}
