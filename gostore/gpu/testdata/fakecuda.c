/* fakecuda.c: a FAKE libcuda for the gpu package's tests. No GPU exists on
 * the machines that run them, so this stands in for the driver: "device
 * memory" is host memory the fake tracks, two "devices" are reported, and
 * IPC handles only work inside one process. It exports the versioned
 * entry points a real driver exports (cuMemAlloc_v2, ...); built with
 * -DOLD_NAMES it exports only the unversioned ones, to show the loader
 * refuses a driver without the ABI it needs. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef int CUresult;
typedef int CUdevice;
typedef void *CUcontext;
typedef unsigned long long CUdeviceptr;
typedef struct { char reserved[64]; } CUipcMemHandle;

#define MAXR 256
static struct { uintptr_t p; size_t n; int dev; int host; } regions[MAXR];
static __thread int current = -1; /* per thread, as a real driver's current context */

static int find(uintptr_t p) {
	for (int i = 0; i < MAXR; i++)
		if (regions[i].p && p >= regions[i].p && p < regions[i].p + regions[i].n) return i;
	return -1;
}
/* Callers come from many threads: claiming a slot is atomic (a lookup may
 * race a removal, as with a real driver's use of freed memory). */
static int add(uintptr_t p, size_t n, int dev, int host) {
	for (int i = 0; i < MAXR; i++) {
		uintptr_t zero = 0;
		if (__atomic_compare_exchange_n(&regions[i].p, &zero, (uintptr_t)1, 0, __ATOMIC_SEQ_CST, __ATOMIC_SEQ_CST)) {
			regions[i].n = n; regions[i].dev = dev; regions[i].host = host;
			__atomic_store_n(&regions[i].p, p, __ATOMIC_SEQ_CST);
			return 0;
		}
	}
	return 2;
}

CUresult cuInit(unsigned int f) { return 0; }
CUresult cuDriverGetVersion(int *v) { *v = 12040; return 0; }
CUresult cuDeviceGetCount(int *n) { *n = 2; return 0; }
CUresult cuDeviceGet(CUdevice *d, int i) { if (i < 0 || i > 1) return 101; *d = i; return 0; }
CUresult cuDeviceGetName(char *s, int n, CUdevice d) { snprintf(s, n, "Fake GPU %d", d); return 0; }
CUresult cuDeviceGetAttribute(int *v, int a, CUdevice d) {
	switch (a) { case 33: *v = 0x3b + d; break; case 34: *v = 0; break; case 50: *v = 0; break;
	case 75: *v = 9; break; case 76: *v = 0; break; default: *v = 0; }
	return 0;
}
/* contexts look like what a driver returns: addresses, not small integers */
static char contexts[2];
CUresult cuDevicePrimaryCtxRetain(CUcontext *c, CUdevice d) { *c = (CUcontext)&contexts[d]; return 0; }
CUresult cuCtxSetCurrent(CUcontext c) { current = c ? (int)((char *)c - contexts) : -1; return 0; }
CUresult cuCtxGetCurrent(CUcontext *c) { *c = current < 0 ? 0 : (CUcontext)&contexts[current]; return 0; }
/* events: copies are synchronous here, so an event is always complete */
CUresult cuEventCreate(void **e, unsigned int f) { *e = (void *)1; return current < 0 ? 201 : 0; }
CUresult cuEventRecord(void *e, void *s) { return 0; }
CUresult cuEventSynchronize(void *e) { return 0; }
CUresult cuEventDestroy_v2(void *e) { return 0; }
CUresult cuGetErrorString(CUresult r, const char **s) { *s = r == 1 ? "CUDA_ERROR_INVALID_VALUE (fake)" : "fake error"; return 0; }
CUresult cuPointerGetAttribute(void *out, int attr, CUdeviceptr p) {
	int i = find((uintptr_t)p);
	if (i < 0) return 1;
	if (attr == 2) *(unsigned int *)out = regions[i].host ? 1 : 2;
	else if (attr == 9) *(int *)out = regions[i].dev;
	else if (attr == 11) *(CUdeviceptr *)out = regions[i].p;
	else if (attr == 12) *(size_t *)out = regions[i].n;
	else return 1;
	return 0;
}
CUresult cuIpcGetMemHandle(CUipcMemHandle *h, CUdeviceptr p) {
	if (find((uintptr_t)p) < 0) return 1;
	memset(h, 0, sizeof *h); memcpy(h->reserved, &p, sizeof p); return 0;
}
CUresult cuIpcCloseMemHandle(CUdeviceptr p) { return find((uintptr_t)p) < 0 ? 1 : 0; }
CUresult cuMemHostUnregister(void *p) {
	int i = find((uintptr_t)p);
	if (i < 0 || !regions[i].host) return 1;
	regions[i].p = 0; return 0;
}

#ifdef OLD_NAMES
#define V(name) name
#else
#define V(name) name##_v2
#endif

CUresult V(cuDeviceTotalMem)(size_t *b, CUdevice d) { *b = (size_t)16 << 30; return 0; }
CUresult V(cuMemAlloc)(CUdeviceptr *p, size_t n) {
	void *m = malloc(n);
	if (!m || current < 0) return 2;
	*p = (CUdeviceptr)(uintptr_t)m;
	return add((uintptr_t)m, n, current, 0);
}
CUresult V(cuMemFree)(CUdeviceptr p) {
	int i = find((uintptr_t)p);
	if (i < 0 || regions[i].host || regions[i].p != (uintptr_t)p) return 1;
	free((void *)regions[i].p); regions[i].p = 0; return 0;
}
CUresult V(cuMemHostRegister)(void *p, size_t n, unsigned int f) {
	if (find((uintptr_t)p) >= 0) return 1;
	return add((uintptr_t)p, n, -1, 1);
}
CUresult V(cuMemcpyHtoD)(CUdeviceptr d, const void *h, size_t n) {
	int i = find((uintptr_t)d);
	if (i < 0 || regions[i].host || (uintptr_t)d + n > regions[i].p + regions[i].n) return 1;
	memcpy((void *)(uintptr_t)d, h, n); return 0;
}
CUresult V(cuMemcpyDtoH)(void *h, CUdeviceptr d, size_t n) {
	int i = find((uintptr_t)d);
	if (i < 0 || regions[i].host || (uintptr_t)d + n > regions[i].p + regions[i].n) return 1;
	memcpy(h, (void *)(uintptr_t)d, n); return 0;
}
CUresult V(cuMemcpyHtoDAsync)(CUdeviceptr d, const void *h, size_t n, void *s) { return V(cuMemcpyHtoD)(d, h, n); }
CUresult V(cuMemcpyDtoHAsync)(void *h, CUdeviceptr d, size_t n, void *s) { return V(cuMemcpyDtoH)(h, d, n); }
CUresult V(cuIpcOpenMemHandle)(CUdeviceptr *p, CUipcMemHandle h, unsigned int f) {
	memcpy(p, h.reserved, sizeof *p); return find((uintptr_t)*p) < 0 ? 1 : 0;
}
CUresult cuMemcpyAsync(CUdeviceptr d, CUdeviceptr s, size_t n, void *stream) {
	/* unified addressing: either side may be host memory the fake does not track */
	int i = find((uintptr_t)d), j = find((uintptr_t)s);
	if (i >= 0 && (uintptr_t)d + n > regions[i].p + regions[i].n) return 1;
	if (j >= 0 && (uintptr_t)s + n > regions[j].p + regions[j].n) return 1;
	memmove((void *)(uintptr_t)d, (const void *)(uintptr_t)s, n); return 0;
}
