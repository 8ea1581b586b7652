// procmem.go moves the parts of an op that lie in another process's memory
// (DevicePart.Pid): cross memory attach, process_vm_readv/writev, one copy
// between that process's pages and memory this process reaches, no driver.
// gostore-client uses it to read into an application's own memory.

package transfer

import (
	"errors"
	"fmt"
	"unsafe"

	"github.com/gostore/gostore/gostore/internal/fanout"
	"golang.org/x/sys/unix"
)

// copyProcess copies between host (this process's memory) and len(host)
// bytes at addr in process pid: into pid's memory when toProcess, out of
// it otherwise. A part of a few MiB or more is split across goroutines, as
// shared-memory copies are (parallelCopyMin): the kernel copies on the
// calling thread.
func copyProcess(pid int, addr uint64, host []byte, toProcess bool) error {
	workers := copyShares(uint64(len(host)))
	if workers < 2 {
		return copyProcessRange(pid, addr, host, toProcess)
	}
	errs := make([]error, workers)
	fanout.Ranges(len(host), workers, func(w, lo, hi int) {
		errs[w] = copyProcessRange(pid, addr+uint64(lo), host[lo:hi], toProcess)
	})
	return errors.Join(errs...)
}

// copyProcessRange is copyProcess on one thread. The kernel may copy less
// than asked (a page of pid's range it could not fault in); the rest is
// asked again, and a call that moves nothing is the range's error.
func copyProcessRange(pid int, addr uint64, host []byte, toProcess bool) error {
	for len(host) > 0 {
		local := []unix.Iovec{{Base: unsafe.SliceData(host)}}
		local[0].SetLen(len(host))
		remote := []unix.RemoteIovec{{Base: uintptr(addr), Len: len(host)}}
		var n int
		var err error
		if toProcess {
			n, err = unix.ProcessVMWritev(pid, local, remote, 0)
		} else {
			n, err = unix.ProcessVMReadv(pid, local, remote, 0)
		}
		if err == nil && n <= 0 {
			err = unix.EFAULT
		}
		if err != nil {
			return fmt.Errorf("process %d at %#x (%d bytes): %w", pid, addr, len(host), err)
		}
		host, addr = host[n:], addr+uint64(n)
	}
	return nil
}
