/*
 * fuzz/fuzz_usage.c - libFuzzer target for the model-answer usage parser
 * (proto/usage.c).  The first byte picks the API and SSE or JSON; the rest
 * is fed whole and again in pieces whose sizes come from the input.  Both
 * feeds must give the same usage, and the caps must hold.
 */
#include "proto/usage.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

#define CAP 2048

static int run(proto_usage_api_t api, int sse, const uint8_t *d, size_t n, int pieces, proto_usage_t *u,
               char *model)
{
	proto_usage_call_t *c = proto_usage_call_new(api, sse, CAP);
	if (!c)
		return -2;
	size_t off = 0, i = 0;
	while (off < n) {
		size_t step = pieces ? 1 + d[i++ % n] % 17 : n;
		if (step > n - off)
			step = n - off;
		proto_usage_call_feed(c, (const char *)d + off, step);
		off += step;
	}
	int rc = proto_usage_call_finish(c, u, model, PROTO_USAGE_MODEL_MAX);
	proto_usage_call_free(c);
	return rc;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	if (size < 1)
		return 0;
	proto_usage_api_t api = (data[0] & 1) ? PROTO_USAGE_OPENAI : PROTO_USAGE_ANTHROPIC;
	int sse = (data[0] & 2) != 0;
	proto_usage_t a, b;
	char ma[PROTO_USAGE_MODEL_MAX], mb[PROTO_USAGE_MODEL_MAX];
	int ra = run(api, sse, data + 1, size - 1, 0, &a, ma);
	int rb = run(api, sse, data + 1, size - 1, 1, &b, mb);
	if (ra == -2 || rb == -2)
		return 0;
	if (ra != rb || memcmp(&a, &b, sizeof(a)) || strcmp(ma, mb) || a.requests != 1)
		__builtin_trap();
	if (strlen(ma) >= PROTO_USAGE_MODEL_MAX)
		__builtin_trap();
	return 0;
}
