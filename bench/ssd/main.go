// Command ssd is the SSD tier benchmark of `make bench`: offload write and
// SSD load throughput per backend, io_uring against pread, for 64 KiB,
// 1 MiB and 16 MiB objects, beside the raw sequential O_DIRECT write and
// read bandwidth of the same filesystem measured in the same run with dd.
//
// Write is Backend.BatchOffload in batches of up to 256 MiB (what one
// pipeline batch of the client writes), durable (each call datasyncs).
// Load is FileStorage.Stage (disk → the registered staging buffer, the
// first half of a remote reader's load) after the files' pages were
// dropped from the page cache (fadvise DONTNEED), so reads hit the disk.
// Every loaded object is compared with what was written.
//
// A second table runs the tier end to end in this process (master, a
// holder with a segment an eighth of the data, a reader without one): put
// rate while the tier makes room, offload rate, and the reader's get rate,
// most objects coming from the holder's disk through its staging buffer
// (each cell over shared memory, then over TCP: client.Config.ForceTCP).
package main

import (
	"bytes"
	"encoding/json"
	"flag"
	"fmt"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"time"

	"golang.org/x/sys/unix"

	"github.com/gostore/gostore/gostore/storage"
	"github.com/gostore/gostore/gostore/storage/fileio"
)

type result struct {
	Backend    string  `json:"backend"`
	Engine     string  `json:"engine"`
	ObjectSize int     `json:"object_size"`
	Objects    int     `json:"objects"`
	WriteGBps  float64 `json:"write_gbps"`
	LoadGBps   float64 `json:"load_gbps"`
	WritePct   float64 `json:"write_pct_of_raw"`
	LoadPct    float64 `json:"load_pct_of_raw"`
	FixedReads uint64  `json:"fixed_reads"`
	PlainReads uint64  `json:"plain_reads"`
	Verified   bool    `json:"verified"`
}

type report struct {
	Dir           string      `json:"dir"`
	Filesystem    string      `json:"filesystem"`
	TotalBytes    int64       `json:"bytes_per_cell"`
	RawWriteGBps  float64     `json:"raw_odirect_write_gbps"`
	RawReadGBps   float64     `json:"raw_odirect_read_gbps"`
	Raw4WriteGBps float64     `json:"raw_odirect_4streams_write_gbps"`
	Raw4ReadGBps  float64     `json:"raw_odirect_4streams_read_gbps"`
	Target        string      `json:"target"`
	Results       []result    `json:"results"`
	EndToEnd      []e2eResult `json:"end_to_end"`
	Nproc         int         `json:"nproc"`
	When          string      `json:"when"`
}

const batchBytes = 256 << 20

func main() {
	dir := flag.String("dir", os.TempDir(), "directory on the filesystem to measure")
	total := flag.Int64("bytes", 512<<20, "bytes written and loaded per cell")
	jsonOut := flag.String("json", "", "write the results here")
	quick := flag.Bool("quick", false, "64 MiB per cell")
	flag.Parse()
	if *quick {
		*total = 64 << 20
	}
	root, err := os.MkdirTemp(*dir, "gostore-ssd-bench-")
	if err != nil {
		fail(err)
	}
	defer os.RemoveAll(root)

	rep := report{Dir: *dir, Filesystem: fsName(*dir), TotalBytes: *total, Nproc: runtime.NumCPU(),
		When:   time.Now().UTC().Format(time.RFC3339),
		Target: "offload write and SSD load >= 80% of the raw O_DIRECT figure for objects >= 1 MiB"}
	rep.RawWriteGBps, rep.RawReadGBps = rawDDParallel(root, *total, 1)
	rep.Raw4WriteGBps, rep.Raw4ReadGBps = rawDDParallel(root, *total, 4)
	fmt.Printf("SSD tier on %s (%s), %d MiB per cell\n", *dir, rep.Filesystem, *total>>20)
	fmt.Printf("raw sequential O_DIRECT (dd, 16 MiB blocks): write %.2f GB/s, read %.2f GB/s (the \"of raw\" reference)\n", rep.RawWriteGBps, rep.RawReadGBps)
	fmt.Printf("raw O_DIRECT, 4 dd at once:                  write %.2f GB/s, read %.2f GB/s (the device under parallel I/O)\n\n", rep.Raw4WriteGBps, rep.Raw4ReadGBps)
	fmt.Printf("%-34s %-8s %7s %7s  %10s %7s  %10s %7s  %s\n", "backend", "engine", "object", "objects", "write GB/s", "of raw", "load GB/s", "of raw", "reads fixed/plain")

	staging := fileio.AlignedBuffer(batchBytes, fileio.Alignment)
	for _, backend := range []string{storage.DescriptorBucket, storage.DescriptorPerKey, storage.DescriptorOffset} {
		for _, uring := range []bool{true, false} {
			for _, size := range []int{64 << 10, 1 << 20, 16 << 20} {
				r, err := cell(root, backend, uring, size, *total, staging)
				if err != nil {
					fmt.Printf("%-34s %-8s %7s  error: %v\n", backend, engineName(uring), human(size), err)
					continue
				}
				r.WritePct = 100 * r.WriteGBps / rep.RawWriteGBps
				r.LoadPct = 100 * r.LoadGBps / rep.RawReadGBps
				rep.Results = append(rep.Results, r)
				fmt.Printf("%-34s %-8s %7s %7d  %10.2f %6.0f%%  %10.2f %6.0f%%  %d/%d%s\n", r.Backend, r.Engine, human(size), r.Objects,
					r.WriteGBps, r.WritePct, r.LoadGBps, r.LoadPct, r.FixedReads, r.PlainReads, verified(r.Verified))
			}
		}
	}
	fmt.Printf("\nend to end (bucket, io_uring): a client writes 8x a holder's segment, another reads it all back\n")
	fmt.Printf("%7s %5s %7s  %8s %12s  %8s %7s  %9s\n", "object", "path", "objects", "put GB/s", "offload GB/s", "get GB/s", "of raw", "from disk")
	for _, size := range []int{64 << 10, 1 << 20, 16 << 20} {
		for _, tcp := range []bool{false, true} {
			dir, err := os.MkdirTemp(root, "e2e-")
			if err != nil {
				fail(err)
			}
			r := e2e(dir, size, *total, tcp)
			os.RemoveAll(dir)
			if r.SetupFailure != "" {
				fmt.Printf("%7s %5s  error: %s\n", human(size), r.Transport, r.SetupFailure)
				continue
			}
			r.GetPctOfRaw = 100 * r.GetGBps / rep.RawReadGBps
			rep.EndToEnd = append(rep.EndToEnd, r)
			fmt.Printf("%7s %5s %7d  %8.2f %12.2f  %8.2f %6.0f%%  %9d%s\n", human(size), r.Transport, r.Objects,
				r.PutGBps, r.OffloadGBps, r.GetGBps, r.GetPctOfRaw, r.FromDisk, verified(r.Verified))
		}
	}
	if *jsonOut != "" {
		b, _ := json.MarshalIndent(rep, "", " ")
		if err := os.WriteFile(*jsonOut, b, 0o644); err != nil {
			fail(err)
		}
		fmt.Printf("\nwrote %s\n", *jsonOut)
	}
}

func verified(ok bool) string {
	if ok {
		return ""
	}
	return "  BYTES DIFFER"
}

func engineName(uring bool) string {
	if uring {
		return "io_uring"
	}
	return "pread"
}

// cell writes total bytes of size-byte objects through one backend and
// loads them back.
func cell(root, backend string, uring bool, size int, total int64, staging []byte) (result, error) {
	r := result{Backend: backend, ObjectSize: size, Verified: true}
	dir, err := os.MkdirTemp(root, "cell-")
	if err != nil {
		return r, err
	}
	defer os.RemoveAll(dir)
	cfg := storage.FileStorageConfig{
		Config: storage.Config{Path: dir, UseURing: uring, TotalSizeLimit: uint64(2*total) + 1<<30,
			BucketMaxTotalSize: uint64(2*total) + 1<<30, EvictionPolicy: "none"},
		Descriptor: backend, GCTTL: time.Minute, HeartbeatInterval: time.Hour,
	}
	fs, err := storage.OpenFileStorage(cfg, staging, nil)
	if err != nil {
		return r, err
	}
	defer fs.Close()
	r.Engine = fs.Engine().Name()
	n := int(total / int64(size))
	r.Objects = n
	perBatch := max(1, min(n, batchBytes/size))
	// Distinct values from one random source: object i starts at a
	// different offset of it.
	src := make([]byte, perBatch*size+4096)
	rng := rand.New(rand.NewPCG(1, uint64(size)))
	for i := range src {
		src[i] = byte(rng.Uint32())
	}
	valueOf := func(i int) []byte { o := (i % perBatch) * size; return src[o+i%4096 : o+i%4096+size] }
	keys := make([]string, n)
	for i := range keys {
		keys[i] = fmt.Sprintf("bench/%d/%d", size, i)
	}

	start := time.Now()
	for lo := 0; lo < n; lo += perBatch {
		hi := min(n, lo+perBatch)
		vals := make([][]byte, 0, hi-lo)
		for i := lo; i < hi; i++ {
			vals = append(vals, valueOf(i))
		}
		for _, err := range fs.Backend().BatchOffload(keys[lo:hi], vals) {
			if err != nil {
				return r, fmt.Errorf("offload: %w", err)
			}
		}
	}
	r.WriteGBps = float64(n*size) / time.Since(start).Seconds() / 1e9

	dropCache(dir)
	f0, p0 := fs.Engine().Counters()
	sizes := make([]uint64, perBatch)
	for i := range sizes {
		sizes[i] = uint64(size)
	}
	var loadTime time.Duration
	for lo := 0; lo < n; lo += perBatch {
		hi := min(n, lo+perBatch)
		t0 := time.Now()
		id, offs, errs := fs.Stage(keys[lo:hi], sizes[:hi-lo])
		loadTime += time.Since(t0)
		for j, err := range errs {
			if err != nil {
				return r, fmt.Errorf("load: %w", err)
			}
			if !bytes.Equal(fs.Buffer().Slice(offs[j], uint64(size)), valueOf(lo+j)) {
				r.Verified = false
			}
		}
		fs.Buffer().Release(id)
	}
	r.LoadGBps = float64(n*size) / loadTime.Seconds() / 1e9
	f1, p1 := fs.Engine().Counters()
	r.FixedReads, r.PlainReads = f1-f0, p1-p0
	return r, nil
}

// dropCache evicts the directory's files from the page cache, so loads
// read the disk.
func dropCache(dir string) {
	filepath.Walk(dir, func(path string, info os.FileInfo, err error) error {
		if err == nil && info.Mode().IsRegular() {
			if f, err := os.Open(path); err == nil {
				unix.Fadvise(int(f.Fd()), 0, 0, unix.FADV_DONTNEED)
				f.Close()
			}
		}
		return nil
	})
}

// rawDDParallel measures sequential O_DIRECT write and read bandwidth with
// streams dd processes at once, each on its own file. One stream is the
// "of raw" reference; several show what the device gives to parallel I/O
// (the backends keep several requests in flight; a single dd keeps one).
func rawDDParallel(dir string, total int64, streams int) (write, read float64) {
	per := max(1, total/(16<<20)/int64(streams))
	run := func(args func(i int) []string) float64 {
		cmds := make([]*exec.Cmd, streams)
		start := time.Now()
		for i := range cmds {
			cmds[i] = exec.Command("dd", args(i)...)
			if err := cmds[i].Start(); err != nil {
				return 0
			}
		}
		for _, c := range cmds {
			if err := c.Wait(); err != nil {
				return 0
			}
		}
		return float64(per*int64(streams)*(16<<20)) / time.Since(start).Seconds() / 1e9
	}
	path := func(i int) string { return filepath.Join(dir, fmt.Sprintf("dd.%d", i)) }
	defer func() {
		for i := range streams {
			os.Remove(path(i))
		}
	}()
	write = run(func(i int) []string {
		return []string{"if=/dev/zero", "of=" + path(i), "bs=16M", "count=" + strconv.FormatInt(per, 10), "oflag=direct", "conv=fdatasync", "status=none"}
	})
	dropCache(dir)
	read = run(func(i int) []string {
		return []string{"if=" + path(i), "of=/dev/null", "bs=16M", "iflag=direct", "status=none"}
	})
	return write, read
}

func fsName(dir string) string {
	out, err := exec.Command("df", "-T", dir).Output()
	if err != nil {
		return "?"
	}
	lines := strings.Split(strings.TrimSpace(string(out)), "\n")
	if f := strings.Fields(lines[len(lines)-1]); len(f) > 1 {
		return f[0] + " " + f[1]
	}
	return "?"
}

func human(n int) string {
	if n >= 1<<20 {
		return fmt.Sprintf("%dMiB", n>>20)
	}
	return fmt.Sprintf("%dKiB", n>>10)
}

func fail(err error) {
	fmt.Fprintln(os.Stderr, "ssd bench:", err)
	os.Exit(1)
}
