/* fakeverbs.c: a FAKE libibverbs for the rdma package's tests (no RDMA NIC
 * exists where they run). It lists FAKE_VERBS_DEVICES (comma-separated;
 * default "mlx5_0,mlx5_1") and nothing else. */
#include <stdlib.h>
#include <string.h>

struct ibv_device { char name[64]; };

struct ibv_device **ibv_get_device_list(int *num) {
	const char *env = getenv("FAKE_VERBS_DEVICES");
	char buf[1024];
	strncpy(buf, env ? env : "mlx5_0,mlx5_1", sizeof buf - 1);
	buf[sizeof buf - 1] = 0;
	struct ibv_device **list = calloc(65, sizeof *list);
	int n = 0;
	for (char *tok = strtok(buf, ","); tok && n < 64; tok = strtok(NULL, ",")) {
		list[n] = calloc(1, sizeof **list);
		strncpy(list[n]->name, tok, sizeof list[n]->name - 1);
		n++;
	}
	*num = n;
	return list;
}

void ibv_free_device_list(struct ibv_device **list) {
	for (int i = 0; list[i]; i++) free(list[i]);
	free(list);
}

const char *ibv_get_device_name(struct ibv_device *d) { return d->name; }
