// verbs.go opens libibverbs at run time and lists the RDMA devices it can
// open.

package rdma

/*
#cgo LDFLAGS: -ldl
#include <dlfcn.h>
#include <stdlib.h>
#include <string.h>

struct ibv_device;
static void *gs_verbs;
static struct ibv_device **(*p_get_device_list)(int *);
static void (*p_free_device_list)(struct ibv_device **);
static const char *(*p_get_device_name)(struct ibv_device *);

static int gs_verbs_load(const char *path, char *err, int cap) {
	gs_verbs = dlopen(path, RTLD_NOW | RTLD_LOCAL);
	if (!gs_verbs) {
		const char *e = dlerror();
		strncpy(err, e ? e : "dlopen failed", cap - 1);
		err[cap - 1] = 0;
		return -1;
	}
#define BIND(var, name) \
	if (!(*(void **)(&var) = dlsym(gs_verbs, name))) { \
		strncpy(err, "missing symbol " name, cap - 1); err[cap - 1] = 0; return -1; }
	BIND(p_get_device_list, "ibv_get_device_list");
	BIND(p_free_device_list, "ibv_free_device_list");
	BIND(p_get_device_name, "ibv_get_device_name");
#undef BIND
	return 0;
}

// gs_verbs_devices writes up to cap NUL-separated device names into out
// and returns how many devices there are (-1 when the list fails).
static int gs_verbs_devices(char *out, int outcap) {
	int n = 0, used = 0;
	struct ibv_device **list = p_get_device_list(&n);
	if (!list) return -1;
	for (int i = 0; i < n; i++) {
		const char *name = p_get_device_name(list[i]);
		int len = name ? (int)strlen(name) : 0;
		if (used + len + 1 > outcap) break;
		memcpy(out + used, name, len);
		out[used + len] = 0;
		used += len + 1;
	}
	p_free_device_list(list);
	return n;
}
*/
import "C"

import (
	"errors"
	"strings"
	"unsafe"

	"github.com/gostore/gostore/gostore/internal/loadonce"
)

// DefaultLibrary is the verbs library opened when Options.Library is empty.
const DefaultLibrary = "libibverbs.so.1"

// EnvLibrary names the environment variable the edge (the bindings) reads
// into Options.Library; this package reads no environment.
const EnvLibrary = "GOSTORE_LIBIBVERBS"

// Options say how the process reaches libibverbs.
type Options struct {
	// Library is the verbs library to open ("": DefaultLibrary); tests
	// point it at a fake.
	Library string
}

// ErrOpened: Configure came after the library was opened.
var ErrOpened = errors.New("rdma: the verbs library is already open")

// Info is what Probe found.
type Info struct {
	Available bool     `json:"available"`
	Reason    string   `json:"reason"` // why not, when not
	Devices   []string `json:"devices"`
}

// probe is the process's one verbs library: its options until it is opened,
// and what the opening found.
var probe loadonce.Once[Options, Info]

// Configure sets how libibverbs is opened; it must come before the first
// Probe. The library is process-wide (dlopen maps it into the process and
// its entry points are C globals), so there is one to configure, once. A
// later Configure changes nothing and returns ErrOpened.
func Configure(opt Options) error {
	if !probe.Configure(opt) {
		return ErrOpened
	}
	return nil
}

// Probe opens libibverbs once, as Configure said, and lists its devices.
// It never fails: no library or no device is Info{Available: false,
// Reason: ...}.
func Probe() Info {
	return probe.Get(func(opt Options) Info {
		info := load(opt)
		if info.Devices == nil {
			info.Devices = []string{}
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
	if C.gs_verbs_load(cpath, &msg[0], C.int(len(msg))) != 0 {
		return Info{Reason: "no RDMA verbs library: " + C.GoString(&msg[0])}
	}
	var names [4096]C.char
	n := int(C.gs_verbs_devices(&names[0], C.int(len(names))))
	if n < 0 {
		return Info{Reason: "ibv_get_device_list failed (is the RDMA kernel module loaded?)"}
	}
	if n == 0 {
		return Info{Reason: "libibverbs sees no RDMA device"}
	}
	raw := C.GoBytes(unsafe.Pointer(&names[0]), C.int(len(names)))
	var devs []string
	for _, name := range strings.Split(string(raw), "\x00") {
		if name != "" && len(devs) < n {
			devs = append(devs, name)
		}
	}
	return Info{Available: len(devs) > 0, Devices: devs}
}
