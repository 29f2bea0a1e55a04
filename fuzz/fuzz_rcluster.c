/*
 * fuzz/fuzz_rcluster.c - libFuzzer target for common/rcluster's parsers of
 * bytes that come from elsewhere: a server's MOVED/ASK error reply ('M'),
 * a command's arguments split at NUL bytes ('C'), a key's slot ('K').
 * The redirect's outputs must be in range and the host must fit.
 */
#include "common/rcluster.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

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
	} else if (rn_rcluster_key_slot(p, n) >= RN_RCLUSTER_SLOTS) {
		abort();
	}
	return 0;
}
