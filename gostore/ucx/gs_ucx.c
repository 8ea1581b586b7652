/* gs_ucx.c: see gs_ucx.h. */
#define _GNU_SOURCE
#include "gs_ucx.h"

#include <dlfcn.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static void *gs_ucp;
static void (*p_get_version)(unsigned *, unsigned *, unsigned *);
static const char *(*p_status_string)(ucs_status_t);
static ucs_status_t (*p_config_read)(const char *, const char *, ucp_config_t **);
static ucs_status_t (*p_config_modify)(ucp_config_t *, const char *, const char *);
static void (*p_config_release)(ucp_config_t *);
static ucs_status_t (*p_init_version)(unsigned, unsigned, const ucp_params_t *,
                                      const ucp_config_t *, ucp_context_h *);
static void (*p_cleanup)(ucp_context_h);
static void (*p_context_print_info)(ucp_context_h, FILE *);
static void (*p_ep_print_info)(ucp_ep_h, FILE *);
static ucs_status_t (*p_worker_create)(ucp_context_h, const ucp_worker_params_t *, ucp_worker_h *);
static void (*p_worker_destroy)(ucp_worker_h);
static ucs_status_t (*p_worker_get_address)(ucp_worker_h, ucp_address_t **, size_t *);
static void (*p_worker_release_address)(ucp_worker_h, ucp_address_t *);
static unsigned (*p_worker_progress)(ucp_worker_h);
static ucs_status_t (*p_worker_get_efd)(ucp_worker_h, int *);
static ucs_status_t (*p_worker_arm)(ucp_worker_h);
static ucs_status_t (*p_mem_map)(ucp_context_h, const ucp_mem_map_params_t *, ucp_mem_h *);
static ucs_status_t (*p_mem_unmap)(ucp_context_h, ucp_mem_h);
static ucs_status_t (*p_rkey_pack)(ucp_context_h, ucp_mem_h, void **, size_t *);
static void (*p_rkey_buffer_release)(void *);
static ucs_status_t (*p_ep_create)(ucp_worker_h, const ucp_ep_params_t *, ucp_ep_h *);
static ucs_status_ptr_t (*p_ep_close_nbx)(ucp_ep_h, const ucp_request_param_t *);
static ucs_status_ptr_t (*p_ep_flush_nbx)(ucp_ep_h, const ucp_request_param_t *);
static ucs_status_t (*p_ep_rkey_unpack)(ucp_ep_h, const void *, ucp_rkey_h *);
static void (*p_rkey_destroy)(ucp_rkey_h);
static ucs_status_ptr_t (*p_put_nbx)(ucp_ep_h, const void *, size_t, uint64_t, ucp_rkey_h,
                                     const ucp_request_param_t *);
static ucs_status_ptr_t (*p_get_nbx)(ucp_ep_h, void *, size_t, uint64_t, ucp_rkey_h,
                                     const ucp_request_param_t *);
static ucs_status_t (*p_request_check_status)(void *);
static void (*p_request_free)(void *);

static void gs_copy_err(char *err, int cap, const char *msg) {
	strncpy(err, msg ? msg : "unknown error", cap - 1);
	err[cap - 1] = 0;
}

void gs_ucx_default_log_file(const char *file) {
	setenv("UCX_LOG_FILE", file, 0);
}

int gs_ucx_load(const char *path, char *err, int cap) {
	/* LOCAL: every entry point is found through this handle (dlsym on a
	 * handle searches its dependencies too, which is where libucs's
	 * ucs_status_string lives); UCX opens its transport modules itself. */
	gs_ucp = dlopen(path, RTLD_NOW | RTLD_LOCAL);
	if (!gs_ucp) {
		gs_copy_err(err, cap, dlerror());
		return -1;
	}
#define BIND(var, name) \
	if (!(*(void **)(&var) = dlsym(gs_ucp, name))) { \
		gs_copy_err(err, cap, "missing symbol " name); return -1; }
	BIND(p_get_version, "ucp_get_version");
	BIND(p_status_string, "ucs_status_string");
	BIND(p_config_read, "ucp_config_read");
	BIND(p_config_modify, "ucp_config_modify");
	BIND(p_config_release, "ucp_config_release");
	BIND(p_init_version, "ucp_init_version");
	BIND(p_cleanup, "ucp_cleanup");
	BIND(p_context_print_info, "ucp_context_print_info");
	BIND(p_ep_print_info, "ucp_ep_print_info");
	BIND(p_worker_create, "ucp_worker_create");
	BIND(p_worker_destroy, "ucp_worker_destroy");
	BIND(p_worker_get_address, "ucp_worker_get_address");
	BIND(p_worker_release_address, "ucp_worker_release_address");
	BIND(p_worker_progress, "ucp_worker_progress");
	BIND(p_worker_get_efd, "ucp_worker_get_efd");
	BIND(p_worker_arm, "ucp_worker_arm");
	BIND(p_mem_map, "ucp_mem_map");
	BIND(p_mem_unmap, "ucp_mem_unmap");
	BIND(p_rkey_pack, "ucp_rkey_pack");
	BIND(p_rkey_buffer_release, "ucp_rkey_buffer_release");
	BIND(p_ep_create, "ucp_ep_create");
	BIND(p_ep_close_nbx, "ucp_ep_close_nbx");
	BIND(p_ep_flush_nbx, "ucp_ep_flush_nbx");
	BIND(p_ep_rkey_unpack, "ucp_ep_rkey_unpack");
	BIND(p_rkey_destroy, "ucp_rkey_destroy");
	BIND(p_put_nbx, "ucp_put_nbx");
	BIND(p_get_nbx, "ucp_get_nbx");
	BIND(p_request_check_status, "ucp_request_check_status");
	BIND(p_request_free, "ucp_request_free");
#undef BIND
	return 0;
}

void gs_ucx_library(char *out, int cap) {
	Dl_info info;
	out[0] = 0;
	if (dladdr(*(void **)&p_init_version, &info) && info.dli_fname)
		gs_copy_err(out, cap, info.dli_fname);
}

void gs_ucx_version(unsigned *major, unsigned *minor, unsigned *release) {
	p_get_version(major, minor, release);
}

const char *gs_ucx_status_string(ucs_status_t st) { return p_status_string(st); }

ucs_status_t gs_ucx_context_create(const char *net_devices, const char *tls,
                                   const char *rails, const char *tcp_seg, ucp_context_h *out,
                                   char *err, int cap) {
	ucp_config_t *config;
	ucs_status_t st = p_config_read(NULL, NULL, &config);
	if (st != UCS_OK) {
		gs_copy_err(err, cap, "ucp_config_read");
		return st;
	}
	/* UCX hands names it does not know itself to each transport's config
	 * without the transport's prefix: TX_SEG_SIZE reaches tcp's (the
	 * only transport here with fields of these names). */
	const char *names[5] = {"NET_DEVICES", "TLS", "MAX_RNDV_RAILS", "TX_SEG_SIZE",
	                        "RX_SEG_SIZE"};
	const char *vals[5] = {net_devices, tls, rails, tcp_seg, tcp_seg};
	for (int i = 0; i < 5; i++) {
		if (!vals[i] || !vals[i][0]) continue;
		/* The segment size is our default, not the caller's choice: the
		 * process's UCX_TCP_*_SEG_SIZE, when set, stays UCX's to apply. */
		if (i >= 3 && getenv(i == 3 ? "UCX_TCP_TX_SEG_SIZE" : "UCX_TCP_RX_SEG_SIZE")) continue;
		st = p_config_modify(config, names[i], vals[i]);
		if (st != UCS_OK && i >= 3) {
			/* Our segment size is a default, not the caller's choice:
			 * UCX 1.22 refuses the unprefixed name that 1.13 hands to
			 * tcp, so try tcp's own, then leave UCX's size. */
			char full[32];
			snprintf(full, sizeof(full), "TCP_%s", names[i]);
			(void)p_config_modify(config, full, vals[i]);
			continue;
		}
		if (st != UCS_OK) {
			snprintf(err, cap, "ucp_config_modify %s=%s", names[i], vals[i]);
			p_config_release(config);
			return st;
		}
	}
	ucp_params_t params;
	memset(&params, 0, sizeof(params));
	params.field_mask = UCP_PARAM_FIELD_FEATURES | UCP_PARAM_FIELD_MT_WORKERS_SHARED;
	params.features = UCP_FEATURE_RMA | UCP_FEATURE_WAKEUP;
	/* Workers of one context run on different threads (each exposure's
	 * own, the initiators'), and memory is mapped from any goroutine. */
	params.mt_workers_shared = 1;
	st = p_init_version(UCP_API_MAJOR, UCP_API_MINOR, &params, config, out);
	p_config_release(config);
	if (st != UCS_OK) gs_copy_err(err, cap, "ucp_init");
	return st;
}

void gs_ucx_context_destroy(ucp_context_h ctx) { p_cleanup(ctx); }

/* gs_print returns what print wrote about obj, malloc'd (len bytes), or
 * NULL: UCX's *_print_info calls write to a FILE only. */
static char *gs_print(void (*print)(void *obj, FILE *f), void *obj, size_t *len) {
	char *buf = NULL;
	*len = 0;
	FILE *f = open_memstream(&buf, len);
	if (!f) return NULL;
	print(obj, f);
	fclose(f);
	return buf;
}

static void print_context(void *ctx, FILE *f) { p_context_print_info((ucp_context_h)ctx, f); }
static void print_ep(void *ep, FILE *f) { p_ep_print_info((ucp_ep_h)ep, f); }

char *gs_ucx_context_info(ucp_context_h ctx, size_t *len) { return gs_print(print_context, ctx, len); }

char *gs_ucx_ep_info(ucp_ep_h ep, size_t *len) { return gs_print(print_ep, ep, len); }

ucs_status_t gs_ucx_worker_create(ucp_context_h ctx, int thread_mode, ucp_worker_h *out) {
	ucp_worker_params_t params;
	memset(&params, 0, sizeof(params));
	params.field_mask = UCP_WORKER_PARAM_FIELD_THREAD_MODE;
	params.thread_mode = (ucs_thread_mode_t)thread_mode;
	return p_worker_create(ctx, &params, out);
}

void gs_ucx_worker_destroy(ucp_worker_h w) { p_worker_destroy(w); }

ucs_status_t gs_ucx_worker_address(ucp_worker_h w, void **addr, size_t *len) {
	ucp_address_t *a;
	ucs_status_t st = p_worker_get_address(w, &a, len);
	if (st != UCS_OK) return st;
	*addr = malloc(*len);
	if (*addr) memcpy(*addr, a, *len);
	p_worker_release_address(w, a);
	return *addr ? UCS_OK : UCS_ERR_NO_MEMORY;
}

unsigned gs_ucx_progress(ucp_worker_h w) { return p_worker_progress(w); }
ucs_status_t gs_ucx_worker_efd(ucp_worker_h w, int *fd) { return p_worker_get_efd(w, fd); }
ucs_status_t gs_ucx_worker_arm(ucp_worker_h w) { return p_worker_arm(w); }

int gs_ucx_wait(int efd, int stopfd, int timeout_ms) {
	struct pollfd fds[2] = {{.fd = efd, .events = POLLIN}, {.fd = stopfd, .events = POLLIN}};
	int n = poll(fds, stopfd >= 0 ? 2 : 1, timeout_ms);
	return n > 0 && stopfd >= 0 && (fds[1].revents & (POLLIN | POLLHUP)) ? 1 : 0;
}

ucs_status_t gs_ucx_mem_map(ucp_context_h ctx, uintptr_t base, size_t size, int memtype,
                            ucp_mem_h *out) {
	ucp_mem_map_params_t params;
	memset(&params, 0, sizeof(params));
	params.field_mask = UCP_MEM_MAP_PARAM_FIELD_ADDRESS | UCP_MEM_MAP_PARAM_FIELD_LENGTH |
	                    UCP_MEM_MAP_PARAM_FIELD_MEMORY_TYPE;
	params.address = (void *)base;
	params.length = size;
	params.memory_type = (ucs_memory_type_t)memtype;
	return p_mem_map(ctx, &params, out);
}

void gs_ucx_mem_unmap(ucp_context_h ctx, ucp_mem_h m) { p_mem_unmap(ctx, m); }

ucs_status_t gs_ucx_rkey_pack(ucp_context_h ctx, ucp_mem_h m, void **buf, size_t *len) {
	void *packed;
	ucs_status_t st = p_rkey_pack(ctx, m, &packed, len);
	if (st != UCS_OK) return st;
	*buf = malloc(*len);
	if (*buf) memcpy(*buf, packed, *len);
	p_rkey_buffer_release(packed);
	return *buf ? UCS_OK : UCS_ERR_NO_MEMORY;
}

static void gs_ep_error(void *arg, ucp_ep_h ep, ucs_status_t status) {
	struct gs_ep *e = arg;
	(void)ep;
	e->status = status;
	e->failed = 1;
}

ucs_status_t gs_ucx_ep_create(ucp_worker_h w, const void *addr, int peer_errors, struct gs_ep *e) {
	ucp_ep_params_t params;
	memset(&params, 0, sizeof(params));
	params.field_mask = UCP_EP_PARAM_FIELD_REMOTE_ADDRESS | UCP_EP_PARAM_FIELD_ERR_HANDLING_MODE |
	                    UCP_EP_PARAM_FIELD_ERR_HANDLER;
	params.address = (const ucp_address_t *)addr;
	params.err_mode = peer_errors ? UCP_ERR_HANDLING_MODE_PEER : UCP_ERR_HANDLING_MODE_NONE;
	params.err_handler.cb = gs_ep_error;
	params.err_handler.arg = e;
	e->failed = 0;
	e->status = UCS_OK;
	return p_ep_create(w, &params, &e->ep);
}

static ucs_status_t gs_posted(ucs_status_ptr_t p, void **req) {
	*req = NULL;
	if (p == NULL) return UCS_OK;
	if (UCS_PTR_IS_ERR(p)) return UCS_PTR_STATUS(p);
	*req = p;
	return UCS_INPROGRESS;
}

ucs_status_t gs_ucx_ep_close(struct gs_ep *e, int force, void **req) {
	ucp_request_param_t param;
	memset(&param, 0, sizeof(param));
	param.op_attr_mask = UCP_OP_ATTR_FIELD_FLAGS;
	param.flags = force ? UCP_EP_CLOSE_FLAG_FORCE : 0;
	return gs_posted(p_ep_close_nbx(e->ep, &param), req);
}

ucs_status_t gs_ucx_rkey_unpack(ucp_ep_h ep, const void *buf, ucp_rkey_h *out) {
	return p_ep_rkey_unpack(ep, buf, out);
}

void gs_ucx_rkey_destroy(ucp_rkey_h rkey) { p_rkey_destroy(rkey); }

ucs_status_t gs_ucx_rma(ucp_ep_h ep, int write, uintptr_t buf, size_t len, uint64_t raddr,
                        ucp_rkey_h rkey, int memtype, void **req) {
	ucp_request_param_t param;
	memset(&param, 0, sizeof(param));
	if (memtype != UCS_MEMORY_TYPE_HOST) {
		param.op_attr_mask = UCP_OP_ATTR_FIELD_MEMORY_TYPE;
		param.memory_type = (ucs_memory_type_t)memtype;
	}
	if (write) return gs_posted(p_put_nbx(ep, (const void *)buf, len, raddr, rkey, &param), req);
	return gs_posted(p_get_nbx(ep, (void *)buf, len, raddr, rkey, &param), req);
}

ucs_status_t gs_ucx_flush(ucp_ep_h ep, void **req) {
	ucp_request_param_t param;
	memset(&param, 0, sizeof(param));
	return gs_posted(p_ep_flush_nbx(ep, &param), req);
}

ucs_status_t gs_ucx_request_test(void *req) {
	ucs_status_t st = p_request_check_status(req);
	if (st != UCS_INPROGRESS) p_request_free(req);
	return st;
}

int gs_ucx_serve(ucp_worker_h w, int efd, int stopfd, int fallback_ms, ucs_status_t *arm_st) {
	for (;;) {
		for (unsigned i = 1; p_worker_progress(w) != 0; i++) {
			/* A peer that keeps the worker busy does not delay the stop. */
			if (i % 1024 == 0 && gs_ucx_wait(-1, stopfd, 0) == 1) return 1;
		}
		ucs_status_t st = p_worker_arm(w);
		if (st == UCS_OK) {
			if (gs_ucx_wait(efd, stopfd, -1) == 1) return 1;
		} else if (st != UCS_ERR_BUSY) { /* BUSY: events arrived meanwhile */
			if (fallback_ms < 0) {
				*arm_st = st;
				return 0;
			}
			if (gs_ucx_wait(efd, stopfd, fallback_ms) == 1) return 1;
		}
	}
}
