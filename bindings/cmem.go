// cmem.go converts C arrays and raw addresses into Go values.

package main

/*
#include <stdint.h>
*/
import "C"

import (
	"strings"
	"unsafe"
)

// mem aliases [ptr, ptr+size) as a byte slice. The caller has checked that
// the range is valid memory for the duration of the call.
func mem(ptr, size uint64) []byte {
	if size == 0 {
		return nil
	}
	p := *(*unsafe.Pointer)(unsafe.Pointer(&ptr))
	return unsafe.Slice((*byte)(p), size)
}

func addr(b []byte) uint64 {
	if len(b) == 0 {
		return 0
	}
	return uint64(uintptr(unsafe.Pointer(&b[0])))
}

func u32s(p *C.uint32_t, n int) []uint32 {
	if n <= 0 || p == nil {
		return nil
	}
	return unsafe.Slice((*uint32)(unsafe.Pointer(p)), n)
}

func u64s(p *C.uint64_t, n int) []uint64 {
	if n <= 0 || p == nil {
		return nil
	}
	return unsafe.Slice((*uint64)(unsafe.Pointer(p)), n)
}

func i64s(p *C.int64_t, n int) []int64 {
	if n <= 0 || p == nil {
		return nil
	}
	return unsafe.Slice((*int64)(unsafe.Pointer(p)), n)
}

func i32s(p *C.int32_t, n int) []int32 {
	if n <= 0 || p == nil {
		return nil
	}
	return unsafe.Slice((*int32)(unsafe.Pointer(p)), n)
}

// goString copies n bytes at p into a Go string.
func goString(p *C.char, n C.int) string {
	if p == nil || n <= 0 {
		return ""
	}
	return C.GoStringN(p, n)
}

// keyList splits the concatenated key bytes by their lengths. It reports
// false when the lengths do not fit a sane total.
func keyList(keys *C.char, lens *C.uint32_t, n int) ([]string, bool) {
	if n < 0 {
		return nil, false
	}
	ls := u32s(lens, n)
	var total uint64
	for _, l := range ls {
		total += uint64(l)
	}
	if n > 0 && (ls == nil || (total > 0 && keys == nil) || total > 1<<31) {
		return nil, false
	}
	all := string(mem(uint64(uintptr(unsafe.Pointer(keys))), total))
	out := make([]string, n)
	var off uint64
	for i, l := range ls {
		out[i] = all[off : off+uint64(l)]
		off += uint64(l)
	}
	return out, true
}

// putString writes s into out[:cap] and returns its length, or -10
// (BUFFER_OVERFLOW) when it does not fit.
func putString(s string, out *C.char, capacity C.int) C.int {
	if out == nil || int(capacity) < len(s) {
		return -10
	}
	copy(unsafe.Slice((*byte)(unsafe.Pointer(out)), int(capacity)), s)
	return C.int(len(s))
}

func splitNonEmpty(s, sep string) []string {
	var out []string
	for _, p := range strings.Split(s, sep) {
		if p = strings.TrimSpace(p); p != "" {
			out = append(out, p)
		}
	}
	return out
}

// recoverTo turns a panic in an export with one result into that result
// being INTERNAL_ERROR (ret may be nil for exports without one), logged:
// a panic crossing into C would abort the Python process.
func recoverTo(name string, ret any) {
	p := recover()
	if p == nil {
		return
	}
	logger.Error("internal error in exported call", "call", name, "panic", p)
	switch r := ret.(type) {
	case *C.int:
		*r = C.int(-1)
	case *C.int64_t:
		*r = C.int64_t(-1)
	case *C.double:
		*r = -1
	}
}
