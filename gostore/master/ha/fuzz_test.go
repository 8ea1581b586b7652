// fuzz_test.go: a new leader reads etcd's keys under the prefix and trusts
// none of them: a log batch's value (unpackBatch), the log keys' sequence
// numbers, the snapshot head and its chunks may be anything a damaged or
// foreign etcd holds. `go test` replays the seeds and testdata/fuzz/; to
// explore:
//
//	go test -ldflags=-checklinkname=0 -run='^$' -fuzz='^FuzzUnpackBatch$' -fuzztime=60s -parallel=1 ./gostore/master/ha
//	go test -ldflags=-checklinkname=0 -run='^$' -fuzz='^FuzzRecover$' -fuzztime=60s -parallel=1 ./gostore/master/ha

package ha

import (
	"bytes"
	"context"
	"encoding/base64"
	"encoding/binary"
	"encoding/json"
	"fmt"
	"hash/crc32"
	"net/http"
	"net/http/httptest"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/gostore/gostore/gostore/internal/fuzzkit"
)

// splitRecords cuts data into records at each 0xff byte (which is left
// out), so that the fuzzer controls their number and lengths, empty
// records included.
func splitRecords(data []byte) [][]byte {
	return bytes.Split(data, []byte{0xff})
}

// FuzzUnpackBatch: the batch form is one-to-one, so any value either
// fails to unpack or unpacks to records that pack to exactly that value
// (nothing skipped, nothing after the batch); packing any records and
// unpacking gives them back; every proper prefix of a batch, and a batch
// with a byte more, is refused. A record returned aliases the value with
// its capacity cut, so appending to one never writes over the next, and
// the records' list costs at most what the value's length allows (a
// count field claiming 4 billion records allocates nothing; the bound
// leaves 64 KiB for the fuzz worker's own allocations).
func FuzzUnpackBatch(f *testing.F) {
	for _, recs := range [][][]byte{
		{}, {{}}, {[]byte("a"), {}, []byte("third record")}, records(1, 120),
	} {
		f.Add(packBatch(recs, 0))
	}
	f.Add([]byte{0xff, 0xff, 0xff, 0xff, 1, 0, 0, 0})      // a count past the batch
	f.Add([]byte{1, 0, 0, 0, 0xff, 0xff, 0xff, 0xff, 'x'}) // a length past the batch
	f.Add([]byte{2, 0, 0, 0, 1, 0, 0, 0, 'x'})             // cut short
	f.Add([]byte{1, 0, 0, 0, 1, 0, 0, 0, 'x', 'y'})        // a byte after it
	f.Add([]byte("record one\xffrecord two\xff\xff"))      // records to pack
	f.Fuzz(func(t *testing.T, data []byte) {
		var got [][]byte
		var err error
		if n := fuzzkit.Allocated(func() { got, err = unpackBatch(data) }); n > uint64(6*len(data))+64<<10 {
			t.Fatalf("unpacking %d bytes allocated %d", len(data), n)
		}
		if err == nil {
			if again := packBatch(got, 0); !bytes.Equal(again, data) {
				t.Fatalf("% x unpacked to %q, which packs to % x", data, got, again)
			}
			for i := 0; i+1 < len(got); i++ {
				if cap(got[i]) != len(got[i]) {
					t.Fatalf("record %d: capacity %d past its %d bytes", i, cap(got[i]), len(got[i]))
				}
			}
		}

		recs := splitRecords(data)
		b := packBatch(recs, 0)
		back, err := unpackBatch(b)
		if err != nil || len(back) != len(recs) {
			t.Fatalf("%q packed to % x, unpacked to %q, %v", recs, b, back, err)
		}
		for i := range recs {
			if !bytes.Equal(back[i], recs[i]) {
				t.Fatalf("record %d: %q unpacked as %q", i, recs[i], back[i])
			}
		}
		for _, bad := range [][]byte{b[:len(b)-1], append(b[:len(b):len(b)], 0)} {
			if got, err := unpackBatch(bad); err == nil {
				t.Fatalf("% x (a batch of %d records cut or grown) unpacked to %q", bad, len(recs), got)
			}
		}
	})
}

// fakeEtcd is the range call of etcd's JSON gateway over a sorted copy of
// the keys an iteration sets: what Recover and ReadLog read.
type fakeEtcd struct {
	mu   sync.Mutex
	keys []string // sorted
	vals map[string][]byte
}

func (e *fakeEtcd) set(kvs map[string][]byte) {
	e.mu.Lock()
	defer e.mu.Unlock()
	e.vals = kvs
	e.keys = e.keys[:0]
	for k := range kvs {
		e.keys = append(e.keys, k)
	}
	slices.Sort(e.keys)
}

func (e *fakeEtcd) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if r.URL.Path != "/v3/kv/range" {
		http.Error(w, `{"error":"not served"}`, http.StatusNotImplemented)
		return
	}
	var req struct {
		Key       string `json:"key"`
		End       string `json:"range_end"`
		Limit     string `json:"limit"`
		KeysOnly  bool   `json:"keys_only"`
		SortOrder string `json:"sort_order"`
	}
	if err := json.NewDecoder(r.Body).Decode(&req); err != nil {
		http.Error(w, `{"error":"bad request"}`, http.StatusBadRequest)
		return
	}
	key, _ := base64.StdEncoding.DecodeString(req.Key)
	end, _ := base64.StdEncoding.DecodeString(req.End)
	limit, _ := strconv.Atoi(req.Limit)
	e.mu.Lock()
	var in []string
	for _, k := range e.keys {
		switch {
		case req.End == "" && k == string(key),
			req.End != "" && k >= string(key) && (string(end) == "\x00" || k < string(end)):
			in = append(in, k)
		}
	}
	if req.SortOrder == "DESCEND" {
		slices.Reverse(in)
	}
	if limit > 0 && len(in) > limit {
		in = in[:limit]
	}
	type kv struct {
		Key            string `json:"key"`
		Value          string `json:"value,omitempty"`
		CreateRevision string `json:"create_revision"`
	}
	resp := struct {
		KVs []kv `json:"kvs,omitempty"`
	}{}
	for _, k := range in {
		j := kv{Key: base64.StdEncoding.EncodeToString([]byte(k)), CreateRevision: "2"}
		if !req.KeysOnly {
			j.Value = base64.StdEncoding.EncodeToString(e.vals[k])
		}
		resp.KVs = append(resp.KVs, j)
	}
	e.mu.Unlock()
	json.NewEncoder(w).Encode(resp)
}

// etcdState is what an iteration's etcd holds under the prefix, and
// whether a leader could have left it so.
type etcdState struct {
	kvs map[string][]byte
	// written: only log batches as Append writes them, none overlapping
	// another, and a snapshot head as Snapshot writes it (of the chunks
	// under its seq).
	written bool
}

// stateOf reads data as entries, each a tag byte and its fields (what
// runs out reads as zeros):
//
//	tag%4 0: a batch as Append writes it: first seq (u16), then records
//	         (u8%8 of them, each u8%16 bytes of the data)
//	      1: a raw log key: u8%24 bytes of suffix, then u8 bytes of value
//	      2: the snapshot head naming seq (u16): its size and checksum
//	         are those of the chunks under seq at the end; with tag&0x10,
//	         instead, the head is u8%24 raw bytes
//	      3: a snapshot chunk of seq (u16), index (u8), u8 bytes of value
func stateOf(prefix string, data []byte) etcdState {
	st := etcdState{kvs: map[string][]byte{}, written: true}
	take := func(n int) []byte {
		n = min(n, len(data))
		b := data[:n]
		data = data[n:]
		return append(make([]byte, 0, n), b...)
	}
	u8 := func() int {
		if len(data) == 0 {
			return 0
		}
		return int(take(1)[0])
	}
	u16 := func() uint64 { return uint64(u8()) | uint64(u8())<<8 }
	type span struct{ first, end uint64 }
	var batches []span
	headSeq, head := uint64(0), false
	for len(data) > 0 {
		tag := u8()
		switch tag % 4 {
		case 0:
			first := u16()
			recs := make([][]byte, u8()%8)
			for i := range recs {
				recs[i] = take(u8() % 16)
			}
			st.kvs[string(logKey(prefix, first))] = packBatch(recs, 0)
			for _, s := range batches {
				if first < s.end && s.first < first+uint64(len(recs)) || first == s.first {
					st.written = false
				}
			}
			if len(recs) == 0 {
				st.written = false // Append writes no empty batch
			}
			batches = append(batches, span{first, first + uint64(len(recs))})
		case 1:
			k := prefix + "log/" + string(take(u8()%24))
			st.kvs[k] = take(u8())
			st.written = false
		case 2:
			if tag&0x10 != 0 {
				st.kvs[prefix+"snaphead"] = take(u8() % 24)
				head = false
				st.written = false
			} else {
				headSeq, head = u16(), true
			}
		case 3:
			seq := u16()
			k := fmt.Sprintf("%ssnap/%020d/%06d", prefix, seq, u8())
			st.kvs[k] = take(u8())
		}
	}
	if head {
		state := chunks(st.kvs, prefix, headSeq)
		h := binary.LittleEndian.AppendUint64(nil, headSeq)
		h = binary.LittleEndian.AppendUint64(h, uint64(len(state)))
		st.kvs[prefix+"snaphead"] = binary.LittleEndian.AppendUint32(h, crc32.Checksum(state, castagnoli))
	}
	return st
}

// chunks is the snapshot of seq as its chunks spell it, in key order.
func chunks(kvs map[string][]byte, prefix string, seq uint64) []byte {
	p := fmt.Sprintf("%ssnap/%020d/", prefix, seq)
	var keys []string
	for k := range kvs {
		if strings.HasPrefix(k, p) {
			keys = append(keys, k)
		}
	}
	slices.Sort(keys)
	var state []byte
	for _, k := range keys {
		state = append(state, kvs[k]...)
	}
	return state
}

// logged is every record the log holds at seq: in each batch whose key
// reads as a sequence number and whose value unpacks.
func logged(kvs map[string][]byte, prefix string, seq uint64) [][]byte {
	var out [][]byte
	for k, v := range kvs {
		first, err := strconv.ParseUint(strings.TrimPrefix(k, prefix+"log/"), 10, 64)
		if !strings.HasPrefix(k, prefix+"log/") || err != nil {
			continue
		}
		if recs, err := unpackBatch(v); err == nil && seq >= first && seq-first < uint64(len(recs)) {
			out = append(out, recs[seq-first])
		}
	}
	return out
}

// FuzzRecover: a new leader's Recover over any keys under the prefix (see
// stateOf), served by a fake etcd gateway. It answers within its deadline
// and never panics. What it returns is what etcd holds: the snapshot is
// the head's chunks, of the head's length and checksum, and each record
// at seq s is the record at s of a batch whose key names a first seq and
// whose value unpacks (never bytes shifted or made up). A head that is
// not 20 bytes is refused. Where a leader could have written what etcd
// holds, Recover succeeds with the snapshot (when its chunks are whole)
// and every record from the one after it up to the first gap.
func FuzzRecover(f *testing.F) {
	// Scripts in stateOf's form.
	batch := func(first uint16, recs ...string) []byte {
		b := []byte{0, byte(first), byte(first >> 8), byte(len(recs))}
		for _, r := range recs {
			b = append(append(b, byte(len(r))), r...)
		}
		return b
	}
	cat := func(parts ...[]byte) []byte { return bytes.Join(parts, nil) }
	head := func(seq uint16) []byte { return []byte{2, byte(seq), byte(seq >> 8)} }
	chunk := func(seq uint16, i byte, v string) []byte {
		return append([]byte{3, byte(seq), byte(seq >> 8), i, byte(len(v))}, v...)
	}
	f.Add([]byte{})
	f.Add(batch(1, "a", "b", "c"))
	f.Add(cat(batch(1, "a", "b"), batch(3, "c"), batch(4, "d", "e", "")))
	// A gap.
	f.Add(cat(batch(1, "a", "b"), batch(5, "gap")))
	// A snapshot of records 1-3 in two chunks, and the log after it.
	f.Add(cat(chunk(3, 0, "state-"), chunk(3, 1, "three"), head(3), batch(3, "c", "d"), batch(5, "e")))
	// An empty snapshot past the log (its chunk is another seq's).
	f.Add(cat(chunk(3, 0, "state"), head(4), batch(1, "a")))
	// A log key that is no sequence number.
	f.Add(cat(batch(1, "a"), []byte{1, 3, 'x', 'y', 'z', 2, 'v', 'v'}))
	// A batch value cut short.
	f.Add(cat(batch(1, "a", "b"), []byte{1, 20}, []byte("00000000000000000002"), []byte{3, 9, 9, 9}))
	// A snapshot head of 19 bytes.
	f.Add(cat(batch(1, "a"), []byte{0x12, 19}, bytes.Repeat([]byte{7}, 19)))
	// Overlapping batches.
	f.Add(cat(batch(1, "a", "b", "c"), batch(2, "B")))

	fake := &fakeEtcd{}
	srv := httptest.NewServer(fake)
	f.Cleanup(srv.Close)
	opts := Options{Endpoints: []string{srv.URL}}
	opts.fill()
	f.Fuzz(func(t *testing.T, data []byte) {
		st := stateOf(opts.Prefix, data)
		fake.set(st.kvs)
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		rec, err := Recover(ctx, opts)
		if ctx.Err() != nil {
			t.Fatalf("Recover did not answer in 10 s: %v", err)
		}
		h, hasHead := st.kvs[opts.Prefix+"snaphead"]
		if hasHead && len(h) != 20 && err == nil {
			t.Fatalf("a head of %d bytes was read", len(h))
		}
		if err != nil {
			if st.written {
				t.Fatalf("what a leader could have written was refused: %v", err)
			}
			return
		}
		if hasHead {
			seq := binary.LittleEndian.Uint64(h)
			want := chunks(st.kvs, opts.Prefix, seq)
			if rec.SnapshotSeq != seq || !bytes.Equal(rec.Snapshot, want) ||
				uint64(len(want)) != binary.LittleEndian.Uint64(h[8:]) ||
				crc32.Checksum(want, castagnoli) != binary.LittleEndian.Uint32(h[16:]) {
				t.Fatalf("snapshot %d of %d bytes read for a head % x", rec.SnapshotSeq, len(rec.Snapshot), h)
			}
		} else if rec.Snapshot != nil || rec.SnapshotSeq != 0 {
			t.Fatalf("no head, but snapshot %d of %d bytes", rec.SnapshotSeq, len(rec.Snapshot))
		}
		for i, r := range rec.Records {
			s := rec.SnapshotSeq + 1 + uint64(i)
			if !slices.ContainsFunc(logged(st.kvs, opts.Prefix, s), func(b []byte) bool { return bytes.Equal(b, r) }) {
				t.Fatalf("record %d (%q) is not what the log holds there: %q", s, r, logged(st.kvs, opts.Prefix, s))
			}
		}
		if st.written {
			// Every record from the snapshot's next on, up to the first gap.
			n := 0
			for s := rec.SnapshotSeq + 1; len(logged(st.kvs, opts.Prefix, s)) > 0; s++ {
				n++
			}
			if len(rec.Records) != n {
				t.Fatalf("%d records read after snapshot %d, the log holds %d in a row", len(rec.Records), rec.SnapshotSeq, n)
			}
		}
	})
}
