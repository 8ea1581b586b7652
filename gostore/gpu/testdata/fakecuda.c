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
static int current = -1;

static int find(uintptr_t p) {
	for (int i = 0; i < MAXR; i++)
		if (regions[i].p && p >= regions[i].p && p < regions[i].p + regions[i].n) return i;
	return -1;
}
static int add(uintptr_t p, size_t n, int dev, int host) {
	for (int i = 0; i < MAXR; i++)
		if (!regions[i].p) { regions[i].p = p; regions[i].n = n; regions[i].dev = dev; regions[i].host = host; return 0; }
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
CUresult cuDevicePrimaryCtxRetain(CUcontext *c, CUdevice d) { *c = (CUcontext)(uintptr_t)(d + 1); return 0; }
CUresult cuCtxSetCurrent(CUcontext c) { current = (int)(uintptr_t)c - 1; return 0; }
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
CUresult V(cuIpcOpenMemHandle)(CUdeviceptr *p, CUipcMemHandle h, unsigned int f) {
	memcpy(p, h.reserved, sizeof *p); return find((uintptr_t)*p) < 0 ? 1 : 0;
}
CUresult cuCtxSynchronize(void) { return current < 0 ? 201 : 0; }
CUresult cuMemcpy(CUdeviceptr d, CUdeviceptr s, size_t n) {
	/* unified addressing: either side may be host memory the fake does not track */
	int i = find((uintptr_t)d), j = find((uintptr_t)s);
	if (i >= 0 && (uintptr_t)d + n > regions[i].p + regions[i].n) return 1;
	if (j >= 0 && (uintptr_t)s + n > regions[j].p + regions[j].n) return 1;
	memmove((void *)(uintptr_t)d, (const void *)(uintptr_t)s, n); return 0;
}
