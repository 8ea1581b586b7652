// cuda.go opens the CUDA driver at run time and binds the entry points the
// store uses: device properties, memory, copies, pointer kinds, IPC handles.

package gpu

/*
#cgo LDFLAGS: -ldl
#include <dlfcn.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

typedef int CUresult;
typedef int CUdevice;
// An opaque handle to Go: an integer, so the Go side never holds a C
// pointer the garbage collector could inspect (a pointer-sized integer is
// passed the same way).
typedef uintptr_t CUcontext;
typedef unsigned long long CUdeviceptr;
typedef struct { char reserved[64]; } CUipcMemHandle;
typedef void *CUstream;
typedef void *CUevent;

static void *gs_lib;
static CUresult (*p_cuInit)(unsigned int);
static CUresult (*p_cuDriverGetVersion)(int *);
static CUresult (*p_cuDeviceGetCount)(int *);
static CUresult (*p_cuDeviceGet)(CUdevice *, int);
static CUresult (*p_cuDeviceGetName)(char *, int, CUdevice);
static CUresult (*p_cuDeviceTotalMem)(size_t *, CUdevice);
static CUresult (*p_cuDeviceGetAttribute)(int *, int, CUdevice);
static CUresult (*p_cuDevicePrimaryCtxRetain)(CUcontext *, CUdevice);
static CUresult (*p_cuCtxSetCurrent)(CUcontext);
static CUresult (*p_cuMemAlloc)(CUdeviceptr *, size_t);
static CUresult (*p_cuMemFree)(CUdeviceptr);
static CUresult (*p_cuMemHostRegister)(void *, size_t, unsigned int);
static CUresult (*p_cuMemHostUnregister)(void *);
static CUresult (*p_cuCtxGetCurrent)(CUcontext *);
static CUresult (*p_cuMemcpyHtoDAsync)(CUdeviceptr, const void *, size_t, CUstream);
static CUresult (*p_cuMemcpyDtoHAsync)(void *, CUdeviceptr, size_t, CUstream);
static CUresult (*p_cuMemcpyAsync)(CUdeviceptr, CUdeviceptr, size_t, CUstream);
static CUresult (*p_cuEventCreate)(CUevent *, unsigned int);
static CUresult (*p_cuEventRecord)(CUevent, CUstream);
static CUresult (*p_cuEventSynchronize)(CUevent);
static CUresult (*p_cuEventDestroy)(CUevent);
static CUresult (*p_cuPointerGetAttribute)(void *, int, CUdeviceptr);
static CUresult (*p_cuIpcGetMemHandle)(CUipcMemHandle *, CUdeviceptr);
static CUresult (*p_cuIpcOpenMemHandle)(CUdeviceptr *, CUipcMemHandle, unsigned int);
static CUresult (*p_cuIpcCloseMemHandle)(CUdeviceptr);
static CUresult (*p_cuGetErrorString)(CUresult, const char **);


// gs_cuda_load opens the driver and binds every entry point; 0, or -1 with
// a message in err.
static int gs_cuda_load(const char *path, char *err, int cap) {
	gs_lib = dlopen(path, RTLD_NOW | RTLD_LOCAL);
	if (!gs_lib) {
		const char *e = dlerror();
		strncpy(err, e ? e : "dlopen failed", cap - 1);
		err[cap - 1] = 0;
		return -1;
	}
#define BIND(var, name) \
	if (!(*(void **)(&var) = dlsym(gs_lib, name))) { \
		strncpy(err, "missing symbol " name, cap - 1); err[cap - 1] = 0; return -1; }
	BIND(p_cuInit, "cuInit");
	BIND(p_cuDriverGetVersion, "cuDriverGetVersion");
	BIND(p_cuDeviceGetCount, "cuDeviceGetCount");
	BIND(p_cuDeviceGet, "cuDeviceGet");
	BIND(p_cuDeviceGetName, "cuDeviceGetName");
	BIND(p_cuDeviceTotalMem, "cuDeviceTotalMem_v2");
	BIND(p_cuDeviceGetAttribute, "cuDeviceGetAttribute");
	BIND(p_cuDevicePrimaryCtxRetain, "cuDevicePrimaryCtxRetain");
	BIND(p_cuCtxSetCurrent, "cuCtxSetCurrent");
	BIND(p_cuMemAlloc, "cuMemAlloc_v2");
	BIND(p_cuMemFree, "cuMemFree_v2");
	BIND(p_cuMemHostRegister, "cuMemHostRegister_v2");
	BIND(p_cuMemHostUnregister, "cuMemHostUnregister");
	BIND(p_cuCtxGetCurrent, "cuCtxGetCurrent");
	BIND(p_cuMemcpyHtoDAsync, "cuMemcpyHtoDAsync_v2");
	BIND(p_cuMemcpyDtoHAsync, "cuMemcpyDtoHAsync_v2");
	BIND(p_cuMemcpyAsync, "cuMemcpyAsync");
	BIND(p_cuEventCreate, "cuEventCreate");
	BIND(p_cuEventRecord, "cuEventRecord");
	BIND(p_cuEventSynchronize, "cuEventSynchronize");
	BIND(p_cuEventDestroy, "cuEventDestroy_v2");
	BIND(p_cuPointerGetAttribute, "cuPointerGetAttribute");
	BIND(p_cuIpcGetMemHandle, "cuIpcGetMemHandle");
	BIND(p_cuIpcOpenMemHandle, "cuIpcOpenMemHandle_v2");
	BIND(p_cuIpcCloseMemHandle, "cuIpcCloseMemHandle");
	BIND(p_cuGetErrorString, "cuGetErrorString");

#undef BIND
	return 0;
}

static CUresult gs_cuInit(void) { return p_cuInit(0); }
static CUresult gs_cuDriverGetVersion(int *v) { return p_cuDriverGetVersion(v); }
static CUresult gs_cuDeviceGetCount(int *n) { return p_cuDeviceGetCount(n); }
static CUresult gs_cuDeviceGet(CUdevice *d, int i) { return p_cuDeviceGet(d, i); }
static CUresult gs_cuDeviceGetName(char *s, int n, CUdevice d) { return p_cuDeviceGetName(s, n, d); }
static CUresult gs_cuDeviceTotalMem(size_t *b, CUdevice d) { return p_cuDeviceTotalMem(b, d); }
static CUresult gs_cuDeviceGetAttribute(int *v, int a, CUdevice d) { return p_cuDeviceGetAttribute(v, a, d); }
static CUresult gs_cuDevicePrimaryCtxRetain(CUcontext *c, CUdevice d) { return p_cuDevicePrimaryCtxRetain(c, d); }
static CUresult gs_cuCtxSetCurrent(CUcontext c) { return p_cuCtxSetCurrent(c); }
static CUresult gs_cuMemAlloc(CUdeviceptr *p, size_t n) { return p_cuMemAlloc(p, n); }
static CUresult gs_cuMemFree(CUdeviceptr p) { return p_cuMemFree(p); }
static CUresult gs_cuMemHostRegister(uintptr_t p, size_t n, unsigned int f) { return p_cuMemHostRegister((void *)p, n, f); }
static CUresult gs_cuMemHostUnregister(uintptr_t p) { return p_cuMemHostUnregister((void *)p); }
// Copies run on the legacy default stream, so they follow the work the
// application queued there before (as torch's .cpu() does), and the caller
// waits for that copy alone with an event: never for the context's other
// streams (an NCCL kernel waiting on a peer must not wait on us), and never
// returning before the bytes landed (a pageable copy may otherwise, and an
// IPC peer would then read them late).
static CUresult gs_waitCopy(CUresult r) {
	CUevent e;
	if (r) return r;
	if ((r = p_cuEventCreate(&e, 2))) return r; // CU_EVENT_DISABLE_TIMING
	r = p_cuEventRecord(e, 0);
	if (!r) r = p_cuEventSynchronize(e);
	p_cuEventDestroy(e);
	return r;
}
static CUresult gs_copyHtoD(CUdeviceptr d, uintptr_t h, size_t n) {
	return gs_waitCopy(p_cuMemcpyHtoDAsync(d, (const void *)h, n, 0));
}
static CUresult gs_copyDtoH(uintptr_t h, CUdeviceptr d, size_t n) {
	return gs_waitCopy(p_cuMemcpyDtoHAsync((void *)h, d, n, 0));
}
static CUresult gs_copy(uintptr_t d, uintptr_t s, size_t n) {
	return gs_waitCopy(p_cuMemcpyAsync((CUdeviceptr)d, (CUdeviceptr)s, n, 0));
}
static CUresult gs_cuCtxGetCurrent(CUcontext *c) { return p_cuCtxGetCurrent(c); }
static CUresult gs_memoryType(unsigned int *t, CUdeviceptr p) { return p_cuPointerGetAttribute(t, 2, p); } // CU_POINTER_ATTRIBUTE_MEMORY_TYPE
static CUresult gs_deviceOrdinal(int *o, CUdeviceptr p) { return p_cuPointerGetAttribute(o, 9, p); } // CU_POINTER_ATTRIBUTE_DEVICE_ORDINAL
// CU_POINTER_ATTRIBUTE_RANGE_START_ADDR and _RANGE_SIZE: the allocation p lies in
static CUresult gs_allocationRange(CUdeviceptr *base, size_t *size, CUdeviceptr p) {
	CUresult r = p_cuPointerGetAttribute(base, 11, p);
	return r ? r : p_cuPointerGetAttribute(size, 12, p);
}
static CUresult gs_cuIpcGetMemHandle(CUipcMemHandle *h, CUdeviceptr p) { return p_cuIpcGetMemHandle(h, p); }
static CUresult gs_cuIpcOpenMemHandle(CUdeviceptr *p, CUipcMemHandle *h) { return p_cuIpcOpenMemHandle(p, *h, 1); } // LAZY_ENABLE_PEER_ACCESS
static CUresult gs_cuIpcCloseMemHandle(CUdeviceptr p) { return p_cuIpcCloseMemHandle(p); }
static const char *gs_cuError(CUresult r) {
	const char *s = 0;
	if (p_cuGetErrorString && p_cuGetErrorString(r, &s) == 0 && s) return s;
	return "unknown CUDA error";
}
*/
import "C"

import (
	"errors"
	"fmt"
	"runtime"
	"sync"
	"unsafe"

	"github.com/gostore/gostore/gostore/internal/loadonce"
)

// DefaultLibrary is the driver opened when Options.Library is empty.
const DefaultLibrary = "libcuda.so.1"

// EnvLibrary names the environment variable the edge (the bindings) reads
// into Options.Library; this package reads no environment.
const EnvLibrary = "GOSTORE_LIBCUDA"

// Options say how the process reaches the driver.
type Options struct {
	// Library is the driver library to open ("": DefaultLibrary). Tests
	// point it at a fake; deployments rarely need it.
	Library string
}

// ErrNoGPU: no driver, or no device.
var ErrNoGPU = errors.New("gpu: no CUDA driver or device")

// Device describes one GPU.
type Device struct {
	Index   int    `json:"index"`
	Name    string `json:"name"`
	Memory  uint64 `json:"memory"`
	PCI     string `json:"pci_bus_id"`
	Compute string `json:"compute_capability"`
}

// Info is what Probe found.
type Info struct {
	Available bool     `json:"available"`
	Reason    string   `json:"reason"` // why not, when not
	Driver    int      `json:"driver_version"`
	Devices   []Device `json:"devices"`
}

// ErrOpened: Configure came after the driver was opened.
var ErrOpened = errors.New("gpu: the CUDA driver is already open")

// probe is the process's one driver: its options until it is opened,
// and what the opening found.
var probe loadonce.Once[Options, Info]

// Configure sets how the driver is opened; it must come before its first
// use (Probe, or any call that needs the driver). The driver is
// process-wide: dlopen maps one library into the process, the entry points
// bound from it are C globals, and the primary contexts retained through it
// live until exit, so there is one driver to configure, once. A later
// Configure changes nothing and returns ErrOpened.
func Configure(opt Options) error {
	if !probe.Configure(opt) {
		return ErrOpened
	}
	return nil
}

// Probe opens the driver once, as Configure said, and lists the devices.
// It never fails: no driver is Info{Available: false, Reason: ...}.
func Probe() Info {
	return probe.Get(func(opt Options) Info {
		info := load(opt)
		if info.Devices == nil {
			info.Devices = []Device{}
		}
		return info
	})
}

func load(opt Options) Info {
	path := opt.Library
	if path == "" {
		path = DefaultLibrary
	}
	cpath := C.CString(path)
	defer C.free(unsafe.Pointer(cpath))
	var msg [256]C.char
	if C.gs_cuda_load(cpath, &msg[0], C.int(len(msg))) != 0 {
		return Info{Reason: "no CUDA driver: " + C.GoString(&msg[0])}
	}
	if r := C.gs_cuInit(); r != 0 {
		return Info{Reason: "cuInit: " + cuErr(r).Error()}
	}
	info := Info{}
	var v, n C.int
	C.gs_cuDriverGetVersion(&v)
	info.Driver = int(v)
	if r := C.gs_cuDeviceGetCount(&n); r != 0 || n == 0 {
		info.Reason = "the CUDA driver sees no device"
		return info
	}
	for i := 0; i < int(n); i++ {
		var d C.CUdevice
		if C.gs_cuDeviceGet(&d, C.int(i)) != 0 {
			continue
		}
		var name [256]C.char
		C.gs_cuDeviceGetName(&name[0], C.int(len(name)), d)
		var mem C.size_t
		C.gs_cuDeviceTotalMem(&mem, d)
		attr := func(a int) int {
			var x C.int
			C.gs_cuDeviceGetAttribute(&x, C.int(a), d)
			return int(x)
		}
		// CU_DEVICE_ATTRIBUTE_PCI_DOMAIN_ID 50, _BUS_ID 33, _DEVICE_ID 34,
		// COMPUTE_CAPABILITY_MAJOR 75, _MINOR 76
		info.Devices = append(info.Devices, Device{Index: i, Name: C.GoString(&name[0]), Memory: uint64(mem),
			PCI:     fmt.Sprintf("%04x:%02x:%02x.0", attr(50), attr(33), attr(34)),
			Compute: fmt.Sprintf("%d.%d", attr(75), attr(76))})
	}
	info.Available = len(info.Devices) > 0
	return info
}

// Error is a CUDA driver error.
type Error struct {
	Code int
	Msg  string
}

func (e *Error) Error() string { return fmt.Sprintf("CUDA error %d: %s", e.Code, e.Msg) }

func cuErr(r C.CUresult) error {
	if r == 0 {
		return nil
	}
	return &Error{Code: int(r), Msg: C.GoString(C.gs_cuError(r))}
}

// contexts holds each device's primary context, retained once for the
// life of the process (a retain per call would only raise its count).
var contexts struct {
	sync.Mutex
	byDevice map[int]C.CUcontext
}

func primaryContext(dev int) (C.CUcontext, error) {
	info := Probe()
	if !info.Available {
		return 0, ErrNoGPU
	}
	if dev < 0 || dev >= len(info.Devices) {
		return 0, fmt.Errorf("gpu: no device %d (%d present)", dev, len(info.Devices))
	}
	contexts.Lock()
	defer contexts.Unlock()
	if ctx, ok := contexts.byDevice[dev]; ok {
		return ctx, nil
	}
	var ctx C.CUcontext
	if err := cuErr(C.gs_cuDevicePrimaryCtxRetain(&ctx, C.CUdevice(dev))); err != nil {
		return 0, err
	}
	if contexts.byDevice == nil {
		contexts.byDevice = map[int]C.CUcontext{}
	}
	contexts.byDevice[dev] = ctx
	return ctx, nil
}

// onDevice runs op with dev's primary context current. The current
// context belongs to an OS thread and a goroutine may change threads
// between two cgo calls, so the thread is locked across them. The thread
// may be the application's own (a Python thread calling in), so the
// context it had is put back: torch's device choice survives our calls.
func onDevice(dev int, op func() C.CUresult) error {
	ctx, err := primaryContext(dev)
	if err != nil {
		return err
	}
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	var prev C.CUcontext
	if err := cuErr(C.gs_cuCtxGetCurrent(&prev)); err != nil {
		return err
	}
	if prev != ctx {
		if err := cuErr(C.gs_cuCtxSetCurrent(ctx)); err != nil {
			return err
		}
		defer C.gs_cuCtxSetCurrent(prev)
	}
	return cuErr(op())
}

// currentContext reports the calling thread's current context (tests
// check onDevice puts it back).
func currentContext() uintptr {
	if !Probe().Available {
		return 0
	}
	var c C.CUcontext
	C.gs_cuCtxGetCurrent(&c)
	return uintptr(c)
}

// Alloc allocates size bytes of device memory on dev (a GPU segment).
func Alloc(dev int, size uint64) (uint64, error) {
	var p C.CUdeviceptr
	err := onDevice(dev, func() C.CUresult { return C.gs_cuMemAlloc(&p, C.size_t(size)) })
	return uint64(p), err
}

// Free releases device memory from Alloc.
func Free(dev int, ptr uint64) error {
	return onDevice(dev, func() C.CUresult { return C.gs_cuMemFree(C.CUdeviceptr(ptr)) })
}

// Pin page-locks host memory for fast copies (cuMemHostRegister, portable).
func Pin(ptr, size uint64) error {
	return onDevice(0, func() C.CUresult {
		return C.gs_cuMemHostRegister(C.uintptr_t(ptr), C.size_t(size), 1) // CU_MEMHOSTREGISTER_PORTABLE
	})
}

// Unpin undoes Pin.
func Unpin(ptr uint64) error {
	return onDevice(0, func() C.CUresult { return C.gs_cuMemHostUnregister(C.uintptr_t(ptr)) })
}

// CopyToDevice copies size bytes of host memory at host to device memory.
func CopyToDevice(dev int, dst, host, size uint64) error {
	return onDevice(dev, func() C.CUresult {
		return C.gs_copyHtoD(C.CUdeviceptr(dst), C.uintptr_t(host), C.size_t(size))
	})
}

// CopyToHost copies size bytes of device memory to host memory at host.
func CopyToHost(dev int, host, src, size uint64) error {
	return onDevice(dev, func() C.CUresult {
		return C.gs_copyDtoH(C.uintptr_t(host), C.CUdeviceptr(src), C.size_t(size))
	})
}

// Kind is where a pointer points.
type Kind int

const (
	Unknown   Kind = iota // not memory CUDA knows (plain host memory, or no driver)
	Host                  // CUDA-registered or CUDA-allocated host memory
	DeviceMem             // device memory
)

// PointerKind asks the driver what ptr is and, for device memory, on which
// device. Without a driver every pointer is Unknown.
func PointerKind(ptr uint64) (Kind, int) {
	if !Probe().Available || ptr == 0 {
		return Unknown, -1
	}
	var t C.uint
	if C.gs_memoryType(&t, C.CUdeviceptr(ptr)) != 0 {
		return Unknown, -1
	}
	switch t {
	case 1: // CU_MEMORYTYPE_HOST
		return Host, -1
	case 2: // CU_MEMORYTYPE_DEVICE
		var o C.int
		if C.gs_deviceOrdinal(&o, C.CUdeviceptr(ptr)) != 0 {
			return DeviceMem, 0
		}
		return DeviceMem, int(o)
	}
	return Unknown, -1
}

// AllocationRange returns the device allocation ptr lies in; ok false for
// memory that is not device memory (or without a driver).
func AllocationRange(ptr uint64) (base, size uint64, ok bool) {
	if k, _ := PointerKind(ptr); k != DeviceMem {
		return 0, 0, false
	}
	var b C.CUdeviceptr
	var n C.size_t
	if C.gs_allocationRange(&b, &n, C.CUdeviceptr(ptr)) != 0 {
		return 0, 0, false
	}
	return uint64(b), uint64(n), true
}

// IPCHandle is a CUDA IPC memory handle: another process on the host opens
// it to map the same device memory.
type IPCHandle [64]byte

// ExportIPC returns the IPC handle of device memory from Alloc.
func ExportIPC(dev int, ptr uint64) (IPCHandle, error) {
	var h IPCHandle
	var ch C.CUipcMemHandle
	if err := onDevice(dev, func() C.CUresult { return C.gs_cuIpcGetMemHandle(&ch, C.CUdeviceptr(ptr)) }); err != nil {
		return h, err
	}
	copy(h[:], C.GoBytes(unsafe.Pointer(&ch), C.int(len(h))))
	return h, nil
}

// OpenIPC maps another process's device memory into this one.
func OpenIPC(dev int, h IPCHandle) (uint64, error) {
	var ch C.CUipcMemHandle
	C.memcpy(unsafe.Pointer(&ch), unsafe.Pointer(&h[0]), C.size_t(len(h)))
	var p C.CUdeviceptr
	err := onDevice(dev, func() C.CUresult { return C.gs_cuIpcOpenMemHandle(&p, &ch) })
	return uint64(p), err
}

// CloseIPC unmaps memory from OpenIPC.
func CloseIPC(dev int, ptr uint64) error {
	return onDevice(dev, func() C.CUresult { return C.gs_cuIpcCloseMemHandle(C.CUdeviceptr(ptr)) })
}

// Copy copies size bytes between any two addresses the driver can reach
// (host or device, this process's or an IPC mapping), inferring the
// direction from unified addressing; dev names the context to use.
func Copy(dev int, dst, src, size uint64) error {
	return onDevice(dev, func() C.CUresult {
		return C.gs_copy(C.uintptr_t(dst), C.uintptr_t(src), C.size_t(size))
	})
}
