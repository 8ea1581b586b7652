// grants_test.go runs a misbehaving second client against a real client's
// transfer server: what it crafts for another's range is refused and the
// bytes there stay as written.

package client

import (
	"bytes"
	"context"
	"encoding/binary"
	"fmt"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/gostore/gostore/gostore/grant"
	"github.com/gostore/gostore/gostore/internal/testbase"
	"github.com/gostore/gostore/gostore/internal/testkit"
	"github.com/gostore/gostore/gostore/transfer"
	"github.com/gostore/gostore/gostore/wire"
)

// A client that goes around the API — its own transfer engine, the
// owner's transfer address, requests it crafts — can touch only what the
// master granted it: every other request is refused (and logged by the
// owner), and the owner's bytes stay as they were.
func TestMisbehavingPeerIsRefused(t *testing.T) {
	forceTCP(t)
	m := testkit.StartMaster(t)
	var logs testbase.LogBuffer
	owner, err := New(edge(Config{LocalHostname: "127.0.0.1", MasterServerAddr: m.Addr(),
		GlobalSegmentSize: 1 << 20, LocalBufferSize: 1 << 20}), slog.New(slog.NewTextHandler(&logs, nil)))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { owner.Close() })
	mallory := newClient(t, m.Addr(), 0) // a consumer: every object lands on owner

	secret := testkit.Pattern(1, 4096)
	if c := owner.Writes().PutBatch([]PutItem{{Key: "secret", Parts: [][]byte{secret}}}, wire.ReplicaConfig{}); c[0] != wire.OK {
		t.Fatal(c[0])
	}
	// Mallory's own object, written through the API: the grants it holds.
	if c := mallory.Writes().PutBatch([]PutItem{{Key: "mine", Parts: [][]byte{testkit.Pattern(2, 4096)}}}, wire.ReplicaConfig{}); c[0] != wire.OK {
		t.Fatal(c[0])
	}
	look, err := mallory.Reads().GetStart([]string{"secret", "mine"})
	if err != nil {
		t.Fatal(err)
	}
	defer mallory.Reads().Abort(look)
	sec, mine := look.res[0].Replicas[0], look.res[1].Replicas[0]
	if sec.SegID != mine.SegID || len(sec.Grant) != grant.Size || len(mine.Grant) != grant.Size {
		t.Fatalf("replicas %+v %+v", sec, mine)
	}
	peer, ok := mallory.peers.get(sec.SegID)
	if !ok {
		t.Fatal("mallory did not resolve the owner's segment")
	}
	// A write grant of mallory's own: a put whose ranges it is given,
	// never ended (mallory keeps it to abuse it).
	var ps wire.PutStartResp
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := mallory.master.Call(ctx, wire.OpPutStart, &wire.PutStartReq{ClientID: mallory.id, Keys: []string{"pending"},
		Sizes: []uint64{4096}, HostID: "elsewhere"}, &ps); err != nil || ps.Results[0].Code != wire.OK {
		t.Fatalf("PutStart: %+v %v", ps, err)
	}
	pending := ps.Results[0].Replicas[0]

	forge := func(g []byte, f func(*grant.Fields)) []byte {
		d, err := grant.Decode(g)
		if err != nil {
			t.Fatal(err)
		}
		f(&d)
		other, _ := grant.NewKey(bytes.Repeat([]byte{0x66}, grant.KeySize))
		out := grant.Mint(nil, other, d) // a MAC under a key of mallory's making
		return out
	}
	retarget := func(g []byte, off uint64) []byte {
		b := bytes.Clone(g)
		copy(b[16:24], le64(off)) // the fields changed, the MAC left as it was
		return b
	}
	// An authentic grant for the secret's range, long expired: what a
	// writer holds once its time is up.
	ownerKey, _ := grant.NewKey(owner.own.server.GrantKey())
	expired := grant.Mint(nil, ownerKey, grant.Fields{SegID: sec.SegID, Offset: sec.Offset, Length: 4096, Write: true,
		Expiry: time.Now().Add(-time.Minute).UnixNano()})

	e := transfer.NewEngine(transfer.Options{ForceTCP: true, Log: quietLog()})
	defer e.Close()
	junk := bytes.Repeat([]byte{0xEE}, 4096)
	cases := []struct {
		name  string
		op    transfer.Op
		wantC wire.Code
	}{
		{"write without a grant", transfer.Op{Offset: sec.Offset, Bufs: [][]byte{junk}, Write: true}, wire.ErrIllegalClient},
		{"read without a grant", transfer.Op{Offset: sec.Offset, Bufs: [][]byte{make([]byte, 4096)}}, wire.ErrIllegalClient},
		{"write under the grant of another range", transfer.Op{Offset: sec.Offset, Bufs: [][]byte{junk}, Write: true, Grant: pending.Grant}, wire.ErrIllegalClient},
		{"write past the end of its grant", transfer.Op{Offset: pending.Offset + 100, Bufs: [][]byte{junk}, Write: true, Grant: pending.Grant}, wire.ErrIllegalClient},
		{"a grant retargeted, MAC kept", transfer.Op{Offset: sec.Offset, Bufs: [][]byte{junk}, Write: true, Grant: retarget(pending.Grant, sec.Offset)}, wire.ErrIllegalClient},
		{"a grant under a forged key", transfer.Op{Offset: sec.Offset, Bufs: [][]byte{junk}, Write: true,
			Grant: forge(pending.Grant, func(f *grant.Fields) { f.Offset = sec.Offset })}, wire.ErrIllegalClient},
		{"an expired grant", transfer.Op{Offset: sec.Offset, Bufs: [][]byte{junk}, Write: true, Grant: expired}, wire.ErrLeaseExpired},
		{"a read grant used to write", transfer.Op{Offset: sec.Offset, Bufs: [][]byte{junk}, Write: true, Grant: sec.Grant}, wire.ErrIllegalClient},
		{"a read grant of its own object used to read the secret", transfer.Op{Offset: sec.Offset, Bufs: [][]byte{make([]byte, 4096)}, Grant: mine.Grant}, wire.ErrIllegalClient},
	}
	for _, tc := range cases {
		tc.op.Peer = peer
		err := e.Do(ctx, []transfer.Op{tc.op})[0]
		if wire.CodeOf(err) != tc.wantC {
			t.Errorf("%s: %v, want %v", tc.name, err, tc.wantC)
		}
		if !tc.op.Write && bytes.Contains(tc.op.Bufs[0], secret[:64]) {
			t.Errorf("%s: the secret's bytes came back", tc.name)
		}
	}
	// What mallory was granted works: its pending write, and reading the
	// secret under its read grant.
	if err := e.Do(ctx, []transfer.Op{{Peer: peer, Offset: pending.Offset, Bufs: [][]byte{junk}, Write: true, Grant: pending.Grant}})[0]; err != nil {
		t.Fatalf("the granted write: %v", err)
	}
	back := make([]byte, 4096)
	if err := e.Do(ctx, []transfer.Op{{Peer: peer, Offset: sec.Offset, Bufs: [][]byte{back}, Grant: sec.Grant}})[0]; err != nil || !bytes.Equal(back, secret) {
		t.Fatalf("the granted read: %v", err)
	}

	// The owner's bytes are untouched.
	got := make([]byte, 4096)
	if n := owner.Reads().GetInto([]string{"secret"}, [][][]byte{{got}}); n[0] != 4096 || !bytes.Equal(got, secret) {
		t.Fatalf("the secret after the attempts: %d, %s", n[0], firstDiffIndex(got, secret))
	}
	// Logged by the owner: who and where (the first of the burst).
	text := logs.String()
	if !strings.Contains(text, "request refused") || !strings.Contains(text, "remote=127.0.0.1:") {
		t.Fatalf("the owner logged no refusal naming the remote:\n%s", text)
	}
	if strings.Count(text, "request refused") != 1 {
		t.Errorf("a burst of refusals logged %d lines, want 1", strings.Count(text, "request refused"))
	}
}

func le64(v uint64) []byte { return binary.LittleEndian.AppendUint64(nil, v) }

func firstDiffIndex(a, b []byte) string {
	for i := range min(len(a), len(b)) {
		if a[i] != b[i] {
			return fmt.Sprintf("first difference at byte %d", i)
		}
	}
	return "same prefix"
}

func quietLog() *slog.Logger { return slog.New(slog.NewTextHandler(nopWriter{}, nil)) }

type nopWriter struct{}

func (nopWriter) Write(p []byte) (int, error) { return len(p), nil }
