/*
 * fuzz/fuzz_agentctl.c - libFuzzer target for proto_agentctl_parse(): the
 * control lines an envelope-native agent reads on stdin.  Each input line
 * is parsed; a reply must have a bounded id and NUL-terminated, bounded
 * fields, and writing it again must read back the same settlement.
 */
#include "proto/agentctl.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static void one(const char *line, size_t len)
{
	proto_agentctl_t c, back;
	size_t n = 0;

	proto_agentctl_parse(line, len, &c);
	if (c.type != PROTO_AGENTCTL_REPLY)
		return;
	if (strlen(c.id) > PROTO_AGENTCTL_ID_MAX)
		__builtin_trap();
	if (strlen(c.option) > PROTO_AGENTCTL_OPTION_MAX || strlen(c.text) > PROTO_AGENTCTL_TEXT_MAX)
		__builtin_trap();
	/* Only strings without NUL survive a round trip byte for byte. */
	const char *opt = c.has_option ? c.option : NULL;
	const char *text = !opt && c.has_text ? c.text : NULL;
	char *w = proto_agentctl_reply_line(c.id, opt, text, c.expired, &n);
	if (!w)
		return;
	if (n == 0 || w[n - 1] != '\n' || memchr(w, '\n', n - 1))
		__builtin_trap();
	proto_agentctl_parse(w, n - 1, &back);
	if (back.type != PROTO_AGENTCTL_REPLY || strcmp(back.id, c.id) != 0 || back.expired != c.expired ||
	    (opt && strcmp(back.option, opt) != 0) || (text && strcmp(back.text, text) != 0) ||
	    (!opt && !text && !back.reject))
		__builtin_trap();
	free(w);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	const char *p = (const char *)data, *end = p + size;
	while (p < end) {
		const char *nl = memchr(p, '\n', (size_t)(end - p));
		size_t len = nl ? (size_t)(nl - p) : (size_t)(end - p);
		one(p, len);
		p += len + 1;
	}
	return 0;
}
