/*
 * fuzz/fuzz_control.c - libFuzzer target for proto_ctl_parse(): the control
 * messages anyone with write access to a run's ctl stream can send.
 * Whatever parses must serialize and parse back to the same message; a
 * reply must pass the reply rules; errors must never be empty.
 */
#include "proto/control.h"

#include <stdint.h>
#include <string.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static int same(const proto_ctl_t *a, const proto_ctl_t *b)
{
	return a->type == b->type && !strcmp(a->reason, b->reason) && !strcmp(a->id, b->id) &&
	        a->reply == b->reply && !strcmp(a->option, b->option) && !strcmp(a->text, b->text);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	proto_ctl_t ctl, back;
	char err[256], buf[2 * PROTO_CTL_MAX_BYTES];

	err[0] = '\0';
	if (proto_ctl_parse((const char *)data, size, &ctl, err, sizeof(err)) != 0) {
		if (!err[0])
			__builtin_trap();
		return 0;
	}
	if (ctl.type == PROTO_CTL_UNKNOWN)
		return 0;
	if (ctl.type == PROTO_CTL_REPLY && (!proto_ctl_id_ok(ctl.id) || ctl.reply == PROTO_REPLY_NONE))
		__builtin_trap();
	int n = proto_ctl_serialize(&ctl, buf, sizeof(buf));
	if (n < 0)
		__builtin_trap();
	if (proto_ctl_parse(buf, (size_t)n, &back, err, sizeof(err)) != 0 || !same(&ctl, &back))
		__builtin_trap();
	return 0;
}
