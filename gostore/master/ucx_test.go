package master

import (
	"bytes"
	"encoding/base64"
	"encoding/binary"
	"encoding/json"
	"math/rand/v2"
	"strings"
	"testing"

	"github.com/vmihailenco/msgpack/v5"

	"github.com/gostore/gostore/gostore/wire"
	"github.com/gostore/gostore/gostore/wire/wiretest"
)

// changeBeforeUCX is Change's msgpack body with such a desc.
type changeBeforeUCX struct {
	_msgpack struct{} `msgpack:",as_array"`
	Kind     ChangeKind
	Key      string
	Object   DurableObject
	Segment  *wiretest.SegmentDescBeforeUCX
	SegID    uint64
	Storage  string
	Keys     []string
	Hold     *DurableHold
}

func ucxBlob(rng *rand.Rand, n int) []byte {
	b := make([]byte, n)
	for i := range b {
		b[i] = byte(rng.Uint32())
	}
	return b
}

// A journal record and a version-2 state written before SegmentDesc.UCX
// still read back, every field in place and no UCX descriptor.
func TestSegmentRecordsFromBeforeUCXRestore(t *testing.T) {
	old := wiretest.SegmentDescBeforeUCX{ID: 4, Name: "h:1", ClientID: "c", Size: 1 << 20, HostID: "hid", ShmPath: "/proc/1/fd/3",
		TransferAddr: "127.0.0.1:9", Base: 1 << 40}
	body, err := msgpack.Marshal(&changeBeforeUCX{Kind: SegmentMounted, Segment: &old})
	if err != nil {
		t.Fatal(err)
	}
	rec := append([]byte{byte(SegmentMounted)}, body...)
	ch, err := DecodeChange(rec)
	if err != nil {
		t.Fatalf("a record from before UCX: %v", err)
	}
	want := wire.SegmentDesc{ID: 4, Name: "h:1", ClientID: "c", Size: 1 << 20, HostID: "hid", ShmPath: "/proc/1/fd/3",
		TransferAddr: "127.0.0.1:9", Base: 1 << 40}
	if ch.Segment == nil || !equalDesc(*ch.Segment, want) {
		t.Fatalf("decoded %+v, want %+v", ch.Segment, want)
	}
	state := []byte(StateMagic)
	state = binary.AppendUvarint(state, 4)
	state = binary.AppendUvarint(state, 0)
	state = binary.AppendUvarint(state, 0)
	state = binary.AppendUvarint(state, uint64(len(rec)))
	state = append(append(state, rec...), 0)
	c, _ := newTestCore(t)
	if _, err := c.RestoreFrom(bytes.NewReader(state), nil); err != nil {
		t.Fatalf("a state from before UCX: %v", err)
	}
	if got := c.QuerySegments([]uint64{4}); len(got) != 1 || !equalDesc(got[0], want) {
		t.Fatalf("restored %+v, want %+v", got, want)
	}
}

func equalDesc(a, b wire.SegmentDesc) bool {
	ja, _ := msgpack.Marshal(&a)
	jb, _ := msgpack.Marshal(&b)
	return bytes.Equal(ja, jb) && bytes.Equal(a.UCX, b.UCX)
}

// A segment's UCX descriptor survives a restart byte for byte, from the
// journal alone and from a snapshot with the records after it; a remount
// that brings a new one (a fresh exposure) replaces it, journaled.
func TestUCXDescSurvivesARestart(t *testing.T) {
	rng := rand.New(rand.NewPCG(3, 4))
	var log recordLog
	c := New(Config{OnChange: log.add})
	ucxA := ucxBlob(rng, 300)
	a := wire.SegmentDesc{Name: "a", ClientID: "ca", Size: 1 << 20, ShmPath: "/x/a", UCX: ucxA}
	idA, err := c.MountSegment(a, nil)
	if err != nil {
		t.Fatal(err)
	}
	var snap bytes.Buffer
	seq := log.last()
	if _, err := c.WriteState(&snap); err != nil {
		t.Fatal(err)
	}
	ucxB := ucxBlob(rng, MaxUCXDesc)
	idB, err := c.MountSegment(wire.SegmentDesc{Name: "b", ClientID: "cb", Size: 1 << 20, ShmPath: "/x/b", UCX: ucxB}, nil)
	if err != nil {
		t.Fatal(err)
	}
	a.UCX = ucxBlob(rng, 280) // the owner remounts with a fresh exposure
	if id, err := c.MountSegment(a, nil); err != nil || id != idA {
		t.Fatalf("remount: %d, %v (want %d)", id, err, idA)
	}
	check := func(how string, r *Core) {
		t.Helper()
		got := r.QuerySegments([]uint64{idA, idB})
		if len(got) != 2 || !bytes.Equal(got[0].UCX, a.UCX) || !bytes.Equal(got[1].UCX, ucxB) {
			t.Fatalf("%s: %d segments, UCX descs not the ones last mounted", how, len(got))
		}
	}
	check("live", c)
	fromLog := NewState()
	log.replayOnto(t, fromLog, 0)
	r := New(Config{})
	r.Restore(fromLog)
	check("journal", r)
	r = New(Config{})
	if _, err := r.RestoreFrom(bytes.NewReader(snap.Bytes()), log.changesAfter(t, seq)); err != nil {
		t.Fatal(err)
	}
	check("snapshot + journal", r)
	var again bytes.Buffer
	if _, err := r.WriteState(&again); err != nil {
		t.Fatal(err)
	}
	r = New(Config{})
	if _, err := r.RestoreFrom(&again, nil); err != nil {
		t.Fatal(err)
	}
	check("snapshot of the restored", r)
	// The listing served over HTTP never shows it.
	j, _ := json.Marshal(r.Segments())
	for _, u := range [][]byte{a.UCX, ucxB} {
		if strings.Contains(string(j), base64.StdEncoding.EncodeToString(u)) {
			t.Fatalf("Segments as JSON shows a UCX desc: %s", j)
		}
	}
}

// A UCX descriptor past MaxUCXDesc is refused at mount, before anything
// is mounted or journaled.
func TestMountRefusesAnOversizedUCXDesc(t *testing.T) {
	var log recordLog
	c := New(Config{OnChange: log.add})
	_, err := c.MountSegment(wire.SegmentDesc{Name: "a", ClientID: "ca", Size: 1 << 20, UCX: make([]byte, MaxUCXDesc+1)}, nil)
	if wire.CodeOf(err) != wire.ErrInvalidParams || len(c.Segments()) != 0 || log.last() != 0 {
		t.Fatalf("mount with %d bytes of UCX desc: %v, %d segments, %d records", MaxUCXDesc+1, err, len(c.Segments()), log.last())
	}
	if !strings.Contains(err.Error(), "UCX") {
		t.Fatalf("the error does not say what was wrong: %v", err)
	}
}
