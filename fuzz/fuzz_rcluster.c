/*
 * fuzz/fuzz_rcluster.c - libFuzzer target for common/rcluster's parsers of
 * bytes that come from elsewhere: a server's MOVED/ASK error reply ('M'),
 * a command's arguments split at NUL bytes ('C'), a key's slot ('K'), a
 * CLUSTER SLOTS reply as RESP bytes ('S', parsed by hiredis's reader).
 * The redirect's outputs must be in range and the host must fit; every
 * slot of a parsed map names a node the callback gave or none.
 */
#include "common/rcluster.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

/* Node indexes by (host, port) as the routers keep them, at most 8. */
typedef struct {
	char host[8][64];
	int port[8];
	int n;
} nodes_t;

static int node_index(void *arg, const char *host, int port)
{
	nodes_t *ns = arg;

	if (port < 1 || port > 65535)
		abort();
	for (int i = 0; i < ns->n; i++)
		if (ns->port[i] == port && strcmp(ns->host[i], host) == 0)
			return i;
	if (ns->n == 8 || strlen(host) >= sizeof(ns->host[0]))
		return -1;
	memcpy(ns->host[ns->n], host, strlen(host) + 1);
	ns->port[ns->n] = port;
	return ns->n++;
}

/*
 * hiredis 0.14 sizes an array's element table from its header before any
 * element arrives (its maxelements limit came with 1.0), so "*3000000000"
 * alone asks for gigabytes.  The bytes come from the operator's own Redis,
 * and a CLUSTER SLOTS reply has at most 16384 ranges: larger headers are
 * hiredis's business, not the parser's, and are skipped here.
 */
static int huge_array(const char *p, size_t n)
{
	for (size_t i = 0; i < n; i++) {
		if (p[i] != '*' || (i > 0 && p[i - 1] != '\n'))
			continue;
		unsigned long long v = 0;
		for (size_t j = i + 1; j < n && p[j] >= '0' && p[j] <= '9' && v <= RN_RCLUSTER_SLOTS; j++)
			v = v * 10 + (unsigned long long)(p[j] - '0');
		if (v > RN_RCLUSTER_SLOTS)
			return 1;
	}
	return 0;
}

static void slots(const char *p, size_t n)
{
	static uint16_t map[RN_RCLUSTER_SLOTS];
	redisReader *rd = redisReaderCreate();
	void *r = NULL;
	nodes_t ns = { .n = 0 };

	if (!rd)
		return;
	if (huge_array(p, n)) {
		redisReaderFree(rd);
		return;
	}
	if (redisReaderFeed(rd, p, n) == REDIS_OK && redisReaderGetReply(rd, &r) == REDIS_OK && r) {
		if (rn_rcluster_parse_slots(r, "asked", node_index, &ns, map) == 0)
			for (int i = 0; i < RN_RCLUSTER_SLOTS; i++)
				if (map[i] != RN_RCLUSTER_UNSERVED && map[i] >= ns.n)
					abort();
		freeReplyObject(r);
	}
	redisReaderFree(rd);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	if (size < 1)
		return 0;
	const char *p = (const char *)data + 1;
	size_t n = size - 1;

	if (data[0] == 'M') {
		char host[64];
		int slot = -1, port = -1;
		int kind = rn_rcluster_parse_redirect(p, n, &slot, host, sizeof(host), &port);

		if (kind != 0 && (slot < 0 || slot >= RN_RCLUSTER_SLOTS || port < 1 || port > 65535 || strlen(host) == 0 || strlen(host) >= sizeof(host)))
			abort();
	} else if (data[0] == 'C') {
		const char *argv[64];
		size_t lens[64];
		int argc = 0;
		size_t start = 0;

		for (size_t i = 0; i <= n && argc < 64; i++) {
			if (i == n || p[i] == '\0') {
				argv[argc] = p + start;
				lens[argc++] = i - start;
				start = i + 1;
			}
		}
		int s = rn_rcluster_command_slot(argc, argv, lens);

		if (s < -2 || s >= RN_RCLUSTER_SLOTS)
			abort();
	} else if (data[0] == 'S') {
		slots(p, n);
	} else if (rn_rcluster_key_slot(p, n) >= RN_RCLUSTER_SLOTS) {
		abort();
	}
	return 0;
}
