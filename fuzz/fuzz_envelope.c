/*
 * fuzz/fuzz_envelope.c - libFuzzer target for the envelope: the input is
 * split into lines and fed to one proto_env_t, then the open asks are
 * settled and the open steps closed.  Every published line, including each
 * replacement for an invalid line and each close line, must itself be a
 * valid envelope line; an ask settlement (a runner-written second line,
 * which an agent may not print) must be one JSON object of type ask.
 */
#include "proto/envelope.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <jansson.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static proto_env_t *checker;

/* A fresh checker that takes asks: an input's asks are new to it, in the
 * order the fuzzed env saw them. */
static void checker_reset(void)
{
	proto_env_free(checker);
	checker = proto_env_new(0);
	proto_env_allow_asks(checker, 1);
}

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
	if (memchr(line, '\n', len))
		__builtin_trap();
	/* Keep the checker usable: terminal lines would make it drop. */
	if (proto_env_terminated(checker))
		checker_reset();
}

/* A settlement line: one JSON object, type ask, a status other than open. */
static void must_be_settlement(const char *line, size_t len)
{
	json_t *o = json_loadb(line, len, JSON_REJECT_DUPLICATES, NULL);
	const char *type = json_string_value(json_object_get(o, "type"));
	const char *status = json_string_value(json_object_get(o, "status"));

	if (!o || !type || strcmp(type, "ask") != 0 || !status ||
	    strcmp(status, "open") == 0 || memchr(line, '\n', len))
		__builtin_trap();
	json_decref(o);
}

static int emit_settlement(const char *line, size_t len, void *arg)
{
	size_t *n = arg;

	must_be_settlement(line, len);
	(*n)++;
	return 0;
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

	checker_reset();
	/* The first byte picks a small line cap now and then. */
	if (size > 0 && (data[0] & 0x80)) {
		line_max = 16 + (data[0] & 0x7f);
		p++;
	}
	env = proto_env_new(line_max);
	/* Another bit lets ask lines in (permission_mode ask). */
	if (size > 0 && (data[0] & 0x40))
		proto_env_allow_asks(env, 1);
	while (p < end) {
		nl = memchr(p, '\n', (size_t)(end - p));
		if (!nl)
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
	open = proto_env_open_asks(env);
	if (open > PROTO_ENV_ASKS_MAX)
		__builtin_trap();
	if (open > 0) {
		/* The oldest is answered (an option it may not have), then settled
		 * again (closed), then the rest are rejected. */
		const char *oldest = proto_env_oldest_ask(env, NULL);
		char id[256], *line = NULL;
		size_t len = 0;
		proto_ask_rc_t rc;

		if (!oldest || strlen(oldest) >= sizeof(id))
			__builtin_trap();
		memcpy(id, oldest, strlen(oldest) + 1);
		rc = proto_env_settle_ask(env, id, "answered", "allow_once", NULL, now, &line, &len);
		if (rc == PROTO_ASK_BAD_OPTION)
			rc = proto_env_settle_ask(env, id, "expired", NULL, NULL, now, &line, &len);
		if (rc != PROTO_ASK_SETTLED || !line)
			__builtin_trap();
		must_be_settlement(line, len);
		free(line);
		if (proto_env_settle_ask(env, id, "rejected", NULL, NULL, now, &line, &len) != PROTO_ASK_CLOSED)
			__builtin_trap();
		open--;
		if (proto_env_close_asks(env, now, "rejected", emit_settlement, NULL, &emitted) != open ||
		    emitted != open || proto_env_open_asks(env) != 0)
			__builtin_trap();
		emitted = 0;
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
		if (!built)
			__builtin_trap();
		must_be_valid(built, blen);
		free(built);
		built = proto_env_make_error("internal", msg, now, &blen);
		if (!built)
			__builtin_trap();
		must_be_valid(built, blen);
		free(built);
		free(msg);
	}
	return 0;
}
