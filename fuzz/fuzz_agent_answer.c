/*
 * fuzz/fuzz_agent_answer.c - libFuzzer target for runnel-agent's tool-call
 * assembly (agent/answer.c).  The input is split at newlines into stream
 * chunks fed to one answer, then the answer is finished; every assembled
 * string must be NUL-terminated at its length and within its cap, and the
 * call count within its bound.
 */
#include "agent/answer.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static void check_str(const agent_str_t *s, size_t max)
{
	if (!s->p) {
		if (s->len)
			__builtin_trap();
		return;
	}
	if (s->len > max || s->p[s->len] != '\0')
		__builtin_trap();
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	agent_answer_t a;
	char err[512];
	agent_answer_init(&a);
	const char *p = (const char *)data, *end = p + size;
	while (p < end) {
		const char *nl = memchr(p, '\n', (size_t)(end - p));
		size_t n = nl ? (size_t)(nl - p) : (size_t)(end - p);
		err[0] = '\0';
		int rc = agent_answer_chunk(&a, p, n, err, sizeof(err));
		if (rc < 0 && !err[0])
			__builtin_trap();
		if (rc != 0)
			break;
		p += n + 1;
	}
	if (agent_answer_finish(&a, err, sizeof(err)) == 0)
		for (int i = 0; i < a.ncalls; i++)
			if (!a.calls[i].id.p || !a.calls[i].name.p || !a.calls[i].args.p)
				__builtin_trap();
	if (a.ncalls < 0 || a.ncalls > AGENT_ANSWER_CALLS_MAX)
		__builtin_trap();
	check_str(&a.text, AGENT_ANSWER_TEXT_MAX);
	for (int i = 0; i < a.ncalls; i++) {
		check_str(&a.calls[i].id, 256);
		check_str(&a.calls[i].name, 256);
		check_str(&a.calls[i].args, AGENT_ANSWER_ARGS_MAX);
	}
	agent_answer_free(&a);
	return 0;
}
