/*
 * tests/proto/test_agentctl.c - the stdin control lines of envelope-native
 * agents: reply lines written and read back, cancel, and what readers
 * ignore (not JSON, other types, replies without a usable id).
 */
#include "proto/agentctl.h"
#include "tests/support/check.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Writes the reply line and compares it with want. */
static void check_line(const char *name, const char *option, const char *text, int expired, const char *want)
{
	size_t len = 0;
	char *line = proto_agentctl_reply_line("ask_1", option, text, expired, &len);
	TH_REQUIRE(line, "%s: written", name);
	TH_CHECK_STR(name, line, want);
	TH_CHECK(len == strlen(want), "%s: length", name);
	free(line);
}

static void test_write(void)
{
	check_line("option", "allow_once", NULL, 0, "{\"type\":\"reply\",\"id\":\"ask_1\",\"option\":\"allow_once\"}\n");
	check_line("text", NULL, "use \"b\"", 0, "{\"type\":\"reply\",\"id\":\"ask_1\",\"text\":\"use \\\"b\\\"\"}\n");
	check_line("reject", NULL, NULL, 0, "{\"type\":\"reply\",\"id\":\"ask_1\",\"reject\":true}\n");
	check_line("expired", NULL, NULL, 1, "{\"type\":\"reply\",\"id\":\"ask_1\",\"reject\":true,\"expired\":true}\n");
}

static void test_read(void)
{
	proto_agentctl_t c;
	size_t len = 0;
	char *line = proto_agentctl_reply_line("ask_9", NULL, "free text", 0, &len);
	TH_REQUIRE(line, "written");
	proto_agentctl_parse(line, len - 1, &c);
	TH_CHECK(c.type == PROTO_AGENTCTL_REPLY && c.has_text && !c.has_option && !c.reject, "reply read");
	TH_CHECK_STR("id", c.id, "ask_9");
	TH_CHECK_STR("text", c.text, "free text");
	free(line);

	line = proto_agentctl_reply_line("ask_9", NULL, NULL, 1, &len);
	proto_agentctl_parse(line, len - 1, &c);
	TH_CHECK(c.type == PROTO_AGENTCTL_REPLY && c.reject && c.expired && !c.has_option, "expiry read");
	free(line);

	const char *cancel = PROTO_AGENTCTL_CANCEL_LINE;
	proto_agentctl_parse(cancel, strlen(cancel) - 1, &c);
	TH_CHECK(c.type == PROTO_AGENTCTL_CANCEL, "cancel read");

	static const char *const ignored[] = {
		"",
		"not json",
		"[\"reply\"]",
		"{\"type\":\"other\"}",
		"{\"type\":7}",
		"{\"type\":\"reply\"}",
		"{\"type\":\"reply\",\"id\":5}",
	};
	for (size_t i = 0; i < sizeof(ignored) / sizeof(ignored[0]); i++) {
		proto_agentctl_parse(ignored[i], strlen(ignored[i]), &c);
		TH_CHECK(c.type == PROTO_AGENTCTL_OTHER, "ignored: %s", ignored[i]);
	}

	/* An id over the cap is not a reply; long option and text are cut at
	 * a character boundary. */
	char big[PROTO_AGENTCTL_TEXT_MAX * 2 + 200], id[PROTO_AGENTCTL_ID_MAX + 2];
	memset(id, 'i', sizeof(id) - 1);
	id[sizeof(id) - 1] = '\0';
	snprintf(big, sizeof(big), "{\"type\":\"reply\",\"id\":\"%s\",\"reject\":true}", id);
	proto_agentctl_parse(big, strlen(big), &c);
	TH_CHECK(c.type == PROTO_AGENTCTL_OTHER, "an id of %zu bytes is ignored", strlen(id));

	size_t off = (size_t)snprintf(big, sizeof(big), "{\"type\":\"reply\",\"id\":\"a\",\"text\":\"");
	for (size_t i = 0; i < PROTO_AGENTCTL_TEXT_MAX / 2 + 10; i++) {
		memcpy(big + off, "\xc3\xa9", 2); /* é: two bytes */
		off += 2;
	}
	snprintf(big + off, sizeof(big) - off, "\"}");
	proto_agentctl_parse(big, strlen(big), &c);
	TH_CHECK(c.type == PROTO_AGENTCTL_REPLY && strlen(c.text) == PROTO_AGENTCTL_TEXT_MAX - 1,
	         "text cut at a character boundary (%zu bytes)", strlen(c.text));
}

int main(void)
{
	test_write();
	test_read();
	return th_done();
}
