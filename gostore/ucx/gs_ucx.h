/* gs_ucx.h: the C side of package ucx. libucp is opened at run time
 * (dlopen) and every UCP entry point is called through a pointer bound from
 * its handle, so the build needs no libucx and the package runs (reporting
 * why not) where none exists. Compiled against the vendored 1.13 headers. */
#ifndef GS_UCX_H
#define GS_UCX_H

#include <stddef.h>
#include <stdint.h>
#include <ucp/api/ucp.h>

void gs_ucx_default_log_file(const char *file);
int gs_ucx_load(const char *path, char *err, int cap);
/* gs_ucx_library writes the file path libucp was loaded from. */
void gs_ucx_library(char *out, int cap);
void gs_ucx_version(unsigned *major, unsigned *minor, unsigned *release);
const char *gs_ucx_status_string(ucs_status_t st);

/* NULL/"" options leave UCX's value (read from the process's UCX_* env);
 * tcp_seg (TCP_TX_SEG_SIZE and TCP_RX_SEG_SIZE) is applied only where the
 * process's env does not set that variable. */
ucs_status_t gs_ucx_context_create(const char *net_devices, const char *tls,
                                   const char *rails, const char *tcp_seg, ucp_context_h *out,
                                   char *err, int cap);
void gs_ucx_context_destroy(ucp_context_h ctx);
/* gs_ucx_context_info returns ucp_context_print_info's text (malloc'd; the
 * caller frees it), NULL when it could not be captured. */
char *gs_ucx_context_info(ucp_context_h ctx, size_t *len);
/* gs_ucx_ep_info returns ucp_ep_print_info's text (its lanes), as
 * gs_ucx_context_info does. */
char *gs_ucx_ep_info(ucp_ep_h ep, size_t *len);

ucs_status_t gs_ucx_worker_create(ucp_context_h ctx, int thread_mode, ucp_worker_h *out);
void gs_ucx_worker_destroy(ucp_worker_h w);
/* gs_ucx_worker_address copies the worker's address into a malloc'd buffer. */
ucs_status_t gs_ucx_worker_address(ucp_worker_h w, void **addr, size_t *len);
unsigned gs_ucx_progress(ucp_worker_h w);
ucs_status_t gs_ucx_worker_efd(ucp_worker_h w, int *fd);
ucs_status_t gs_ucx_worker_arm(ucp_worker_h w);
/* gs_ucx_wait polls efd and stopfd (either ignored when < 0); 1 when stopfd
 * is readable, 0 otherwise. */
int gs_ucx_wait(int efd, int stopfd, int timeout_ms);
/* gs_ucx_serve runs an exposure's worker until stopfd is readable (then
 * 1): it progresses w until idle, arms it and sleeps in poll on efd and
 * stopfd, all in C, so a peer's op is served without the owner thread going
 * back through the Go scheduler at each wake. When arming fails it polls
 * every fallback_ms, or with fallback_ms < 0 returns 0 with *arm_st set. */
int gs_ucx_serve(ucp_worker_h w, int efd, int stopfd, int fallback_ms, ucs_status_t *arm_st);

ucs_status_t gs_ucx_mem_map(ucp_context_h ctx, uintptr_t base, size_t size, int memtype,
                            ucp_mem_h *out);
void gs_ucx_mem_unmap(ucp_context_h ctx, ucp_mem_h m);
/* gs_ucx_rkey_pack copies the packed rkey into a malloc'd buffer. */
ucs_status_t gs_ucx_rkey_pack(ucp_context_h ctx, ucp_mem_h m, void **buf, size_t *len);

/* gs_ep is an endpoint with the flag its error callback sets (C memory:
 * UCX keeps the pointer as the callback's argument). */
struct gs_ep {
	ucp_ep_h ep;
	volatile int failed;
	volatile ucs_status_t status;
};
/* peer_errors: UCP_ERR_HANDLING_MODE_PEER (else NONE: no transport of the
 * context can detect a dead peer, e.g. shared memory alone in UCX 1.13). */
ucs_status_t gs_ucx_ep_create(ucp_worker_h w, const void *addr, int peer_errors, struct gs_ep *e);
/* Posting calls return UCS_OK (done, *req NULL), UCS_INPROGRESS (*req set)
 * or an error. */
ucs_status_t gs_ucx_ep_close(struct gs_ep *e, int force, void **req);
ucs_status_t gs_ucx_rkey_unpack(ucp_ep_h ep, const void *buf, ucp_rkey_h *out);
void gs_ucx_rkey_destroy(ucp_rkey_h rkey);
ucs_status_t gs_ucx_rma(ucp_ep_h ep, int write, uintptr_t buf, size_t len, uint64_t raddr,
                        ucp_rkey_h rkey, int memtype, void **req);
ucs_status_t gs_ucx_flush(ucp_ep_h ep, void **req);
/* gs_ucx_request_test returns the request's status (UCS_INPROGRESS while
 * running) and frees it once it has ended. */
ucs_status_t gs_ucx_request_test(void *req);

#endif
