// check_test.go tests CheckBody: it passes whatever msgpack encodes and
// refuses the lengths and nesting msgpack would trust.

package wire

import (
	"bytes"
	"math"
	"runtime/metrics"
	"testing"
	"time"

	"github.com/vmihailenco/msgpack/v5"
)

func TestCheckBodyPassesEncodings(t *testing.T) {
	values := []any{
		nil, true, false, 0, 1, -1, -33, 127, 128, 255, 256, 65535, 65536, math.MaxUint32, uint64(math.MaxUint64),
		int64(math.MinInt64), int8(-100), float32(1.5), 2.5, math.NaN(), "", "s", string(make([]byte, 31)),
		string(make([]byte, 32)), string(make([]byte, 256)), string(make([]byte, 70000)),
		[]byte{}, []byte{1}, make([]byte, 300), make([]byte, 70000), []any{}, make([]any, 15), make([]any, 16),
		make([]any, 70000), map[string]any{}, map[string]any{"a": 1, "b": []any{"x", map[string]int{"y": 2}}},
		time.Unix(1, 2), time.Unix(1<<40, 0), // ext -1: fixext4, fixext8, ext8
	}
	big := map[int]bool{}
	for i := range 70000 {
		big[i] = true
	}
	values = append(values, big)
	for _, v := range messageSeeds() {
		values = append(values, v)
	}
	for _, v := range values {
		b, err := msgpack.Marshal(v)
		if err != nil {
			t.Fatal(err)
		}
		if err := CheckBody(b); err != nil {
			t.Errorf("%T: %v", v, err)
		}
		if err := CheckBody(append(b, 0xc1)); err != nil {
			t.Errorf("%T with a trailing byte: %v", v, err)
		}
	}
	// Every one-byte value, and MaxDepth nested arrays.
	for c := 0; c < 256; c++ {
		var v any
		if msgpack.Unmarshal([]byte{byte(c)}, &v) == nil {
			if err := CheckBody([]byte{byte(c)}); err != nil {
				t.Errorf("%#x: %v", c, err)
			}
		}
	}
	deep := append(bytes.Repeat([]byte{0x91}, MaxDepth), 0xc0)
	if err := CheckBody(deep); err != nil {
		t.Errorf("%d nested arrays: %v", MaxDepth, err)
	}
	if n := testing.AllocsPerRun(10, func() { CheckBody(deep) }); n != 0 {
		t.Errorf("CheckBody allocates (%v times)", n)
	}
}

func TestCheckBodyRefusesWhatMsgpackTrusts(t *testing.T) {
	huge := []byte{0xff, 0xff, 0xff, 0xff}
	cases := map[string][]byte{
		"empty":               {},
		"never used":          {0xc1},
		"str32 of 4 GiB":      append([]byte{0x91, 0xdb}, huge...),
		"bin32 of 4 GiB":      append([]byte{0xc6}, huge...),
		"ext32 of 4 GiB":      append([]byte{0xc9}, append(huge, 1)...),
		"array32 of 4G":       append([]byte{0xdd}, huge...),
		"map32 of 4G":         append([]byte{0xdf}, huge...),
		"map16 counts pairs":  {0xde, 0x00, 0x02, 0x01, 0x02, 0x03},
		"array one short":     {0x93, 0x01, 0x02},
		"str one short":       {0xa3, 'a', 'b'},
		"cut in a length":     {0xda, 0x01},
		"cut in a uint64":     {0xcf, 0, 0, 0, 0, 0, 0, 0},
		"cut in a fixext16":   append([]byte{0xd8, 1}, make([]byte, 15)...),
		"nested past the cap": append(bytes.Repeat([]byte{0x91}, MaxDepth+1), 0xc0),
		"8 MiB of nesting":    append(bytes.Repeat([]byte{0x91}, 8<<20), 0xc0),
	}
	for name, b := range cases {
		if err := CheckBody(b); err == nil {
			t.Errorf("%s: passed", name)
		}
	}
}

// The hand-written decoders bound what a list's length makes them
// allocate by themselves, CheckBody or not: a 4G-element list cut short
// fails on the missing bytes (msgpack's reflection decoder allocated the
// 32 GiB of QuerySegmentsReq.IDs first, a fatal out-of-memory).
func TestDecodersBoundListsAlone(t *testing.T) {
	huge := []byte{0xdd, 0xff, 0xff, 0xff, 0xff}
	cases := []struct {
		v    any
		body []byte
	}{
		{new(QuerySegmentsReq), append([]byte{0x91}, huge...)},
		{new(NotifyOffloadedReq), append([]byte{0x96, 0xa1, 'c', 0xa0, 0x90}, huge...)},
		{new(NotifyOffloadedReq), append([]byte{0x96, 0xa1, 'c', 0xa0, 0x90, 0x90, 0xa0}, huge...)},
		{new(RecoverDiskReq), append([]byte{0x95, 0xa1, 'c', 0xa0, 0xa0, 0x90}, huge...)},
		{new(StageReq), append([]byte{0x92, 0x90}, huge...)},
		{new(KeysReq), append([]byte{0x94, 0xa1, 'c', 0x90}, huge...)},
		{new(PutStartReq), append([]byte{0x95, 0xa1, 'c', 0x90}, huge...)},
		{new(GetReplicasResp), append([]byte{0x91}, huge...)},
	}
	samples := []metrics.Sample{{Name: "/gc/heap/allocs:bytes"}}
	for _, tc := range cases {
		a0 := heapAllocs(samples)
		err := msgpack.Unmarshal(tc.body, tc.v)
		if allocated := heapAllocs(samples) - a0; err == nil || allocated > allocSlack {
			t.Errorf("%T from % x: %v after allocating %d bytes", tc.v, tc.body, err, allocated)
		}
	}
}
