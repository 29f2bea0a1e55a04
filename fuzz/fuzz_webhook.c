/*
 * fuzz/fuzz_webhook.c - libFuzzer target for the two parsers of a job's
 * backend fields that take free text: proto_webhook_url_check() (under
 * every policy) and proto_traceparent_parse().  A URL allowed under the
 * strict policy must be allowed under every looser one and errors must be
 * "webhook: <reason>"; a parsed traceparent must
 * parse again to itself and yield a valid child.
 */
#include "proto/job.h"
#include "proto/webhook.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	char *s = malloc(size + 1);
	char err[256], tp[PROTO_TRACEPARENT_LEN + 1], again[PROTO_TRACEPARENT_LEN + 1];
	int ok[4];

	if (!s)
		return 0;
	memcpy(s, data, size);
	s[size] = '\0';
	for (unsigned f = 0; f < 4; f++) {
		err[0] = '\0';
		ok[f] = proto_webhook_url_check(s, f, err, sizeof(err)) == 0;
		if (!ok[f] && strncmp(err, "webhook: ", 9) != 0)
			__builtin_trap();
	}
	/* Looser policies never refuse what a stricter one allowed. */
	if ((ok[0] && !(ok[1] && ok[2] && ok[3])) || (ok[1] && !ok[3]) || (ok[2] && !ok[3]))
		__builtin_trap();
	if (proto_traceparent_parse(s, tp) == 0) {
		char child[PROTO_TRACEPARENT_LEN + 1];

		if (strlen(tp) != PROTO_TRACEPARENT_LEN || proto_traceparent_parse(tp, again) != 0 || strcmp(tp, again) != 0)
			__builtin_trap();
		proto_traceparent_child(tp, child);
		if (proto_traceparent_parse(child, again) != 0 || memcmp(child, tp, 36) != 0)
			__builtin_trap();
	}
	free(s);
	return 0;
}
