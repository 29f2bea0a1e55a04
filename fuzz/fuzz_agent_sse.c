/*
 * fuzz/fuzz_agent_sse.c - libFuzzer target for runnel-agent's SSE reader
 * (agent/sse.c).  The input is fed whole and again in pieces whose sizes
 * come from the input itself; both feeds must give the same events, every
 * event's data must be NUL-terminated at its length and within the cap.
 */
#include "agent/sse.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

#define CAP 4096

typedef struct rec {
	uint64_t hash;
	size_t events;
} rec_t;

static int on_event(void *arg, const char *event, const char *d, size_t len)
{
	rec_t *r = arg;
	if (len > CAP || d[len] != '\0' || strlen(event) >= 64)
		__builtin_trap();
	for (size_t i = 0; i < len; i++)
		r->hash = r->hash * 1099511628211ULL ^ (unsigned char)d[i];
	for (const char *p = event; *p; p++)
		r->hash = r->hash * 31 ^ (unsigned char)*p;
	r->hash ^= 0x9e3779b97f4a7c15ULL;
	r->events++;
	return 0;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	rec_t whole = { 0, 0 }, parts = { 0, 0 };
	agent_sse_t s;

	agent_sse_init(&s, CAP, on_event, &whole);
	int rc1 = agent_sse_feed(&s, (const char *)data, size);
	if (rc1 == 0)
		rc1 = agent_sse_finish(&s);
	agent_sse_free(&s);

	agent_sse_init(&s, CAP, on_event, &parts);
	int rc2 = 0;
	size_t off = 0, step = size ? (data[0] % 7) + 1 : 1;
	while (off < size && rc2 == 0) {
		size_t n = size - off < step ? size - off : step;
		rc2 = agent_sse_feed(&s, (const char *)data + off, n);
		off += n;
		step = (data[off % size] % 13) + 1;
	}
	if (rc2 == 0)
		rc2 = agent_sse_finish(&s);
	agent_sse_free(&s);

	if (rc1 != rc2 || whole.events != parts.events || whole.hash != parts.hash)
		__builtin_trap();
	return 0;
}
