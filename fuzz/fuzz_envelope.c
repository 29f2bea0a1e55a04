/*
 * fuzz/fuzz_envelope.c - libFuzzer target for the envelope: the input is
 * split into lines and fed to one proto_env_t, then the open steps are
 * closed.  Every published line, including each replacement for an invalid
 * line and each close line, must itself be a valid envelope line.
 */
#include "proto/envelope.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static proto_env_t *checker;

/* A line the runner publishes must pass validation unchanged. */
static void must_be_valid(const char *line, size_t len)
{
	proto_env_line_t out;

	proto_env_process(checker, line, len, 1, &out);
	/* A second trailing CR survives the first strip and is cut here. */
	if (len > 0 && line[len - 1] == '\r')
		len--;
	if (!out.valid || out.len != len || memcmp(out.text, line, len) != 0)
		__builtin_trap();
	if (memchr(line, '\n', len) != NULL)
		__builtin_trap();
	/* Keep the checker usable: terminal lines would make it drop. */
	if (proto_env_terminated(checker)) {
		proto_env_free(checker);
		checker = proto_env_new(0);
	}
}

static int emit(const char *line, size_t len, void *arg)
{
	size_t *n = arg;

	must_be_valid(line, len);
	(*n)++;
	return 0;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	const char *p = (const char *)data, *end = p + size, *nl;
	proto_env_line_t out;
	proto_env_t *env;
	size_t line_max = 0, emitted = 0, open;
	uint64_t dropped = 0;
	int64_t now = 1700000000000LL;
	char *built;
	size_t blen;

	if (checker == NULL)
		checker = proto_env_new(0);
	/* The first byte picks a small line cap now and then. */
	if (size > 0 && (data[0] & 0x80)) {
		line_max = 16 + (data[0] & 0x7f);
		p++;
	}
	env = proto_env_new(line_max);
	while (p < end) {
		nl = memchr(p, '\n', (size_t)(end - p));
		if (nl == NULL)
			nl = end;
		proto_env_process(env, p, (size_t)(nl - p), now++, &out);
		if (out.action == PROTO_ENV_DROP) {
			dropped++;
			if (proto_env_dropped(env) != dropped)
				__builtin_trap();
		} else {
			must_be_valid(out.text, out.len);
			if (out.valid == (out.reason[0] != '\0'))
				__builtin_trap();
		}
		p = nl + 1;
	}
	open = proto_env_open_steps(env);
	if (open > PROTO_ENV_STEPS_MAX)
		__builtin_trap();
	if (proto_env_close_steps(env, now, "fuzz", emit, &emitted) != open || emitted != open ||
	    proto_env_open_steps(env) != 0)
		__builtin_trap();
	proto_env_free(env);

	/* The builders take any bytes as a message. */
	{
		char *msg = malloc(size + 1);

		memcpy(msg, data, size);
		msg[size] = '\0';
		built = proto_env_make_log("warn", msg, now, &blen);
		if (built == NULL)
			__builtin_trap();
		must_be_valid(built, blen);
		free(built);
		built = proto_env_make_error("internal", msg, now, &blen);
		if (built == NULL)
			__builtin_trap();
		must_be_valid(built, blen);
		free(built);
		free(msg);
	}
	return 0;
}
