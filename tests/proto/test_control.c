/*
 * tests/proto/test_control.c - control messages on <prefix>:{RUN}:ctl
 * (SPEC §3): parse, serialize, round trip, unknown types, caps.
 */
#include "proto/control.h"
#include "tests/support/check.h"

#include <stdio.h>
#include <string.h>

#include <stdlib.h>

static void parse_ok(const char *s, proto_ctl_type_t type, const char *reason)
{
	proto_ctl_t ctl;
	char err[128] = "";

	TH_CHECK(proto_ctl_parse(s, strlen(s), &ctl, err, sizeof(err)) == 0, "%s: %s", s, err);
	TH_CHECK(ctl.type == type, "%s: type %d", s, (int)ctl.type);
	TH_CHECK_STR(s, ctl.reason, reason);
}

static void parse_bad(const char *s, size_t len, const char *want)
{
	proto_ctl_t ctl;
	char err[128] = "";

	TH_CHECK(proto_ctl_parse(s, len, &ctl, err, sizeof(err)) == -1, "%s accepted", s);
	TH_CHECK_STR(s, err, want);
}

/* parse_bad on a whole C string. */
static void reply_bad(const char *s, const char *want)
{
	parse_bad(s, strlen(s), want);
}

static void parse_reply_ok(const char *s, proto_reply_kind_t kind)
{
	proto_ctl_t ctl;
	char err[128] = "";

	TH_CHECK(proto_ctl_parse(s, strlen(s), &ctl, err, sizeof(err)) == 0, "%s: %s", s, err);
	TH_CHECK(ctl.type == PROTO_CTL_REPLY && ctl.reply == kind, "%s: kind %d", s, (int)ctl.reply);
}

int main(void)
{
	proto_ctl_t ctl;
	char buf[PROTO_CTL_MAX_BYTES], err[128];
	char *big;
	int n;

	parse_ok("{\"type\":\"cancel\",\"reason\":\"client_closed\"}", PROTO_CTL_CANCEL, "client_closed");
	parse_ok("{\"type\":\"cancel\"}", PROTO_CTL_CANCEL, "");
	parse_ok("{\"type\":\"cancel\",\"reason\":5}", PROTO_CTL_CANCEL, "");
	parse_ok("{\"type\":\"cancel\",\"reason\":\"r\",\"extra\":[1]}", PROTO_CTL_CANCEL, "r");
	parse_ok("{\"type\":\"pause\",\"reason\":\"later\"}", PROTO_CTL_UNKNOWN, "later");
	parse_ok(" {\"type\":\"CANCEL\"} ", PROTO_CTL_UNKNOWN, "");

	parse_bad("", 0, "msg: not JSON");
	parse_bad("cancel", 6, "msg: not JSON");
	parse_bad("[\"cancel\"]", 10, "msg: not a JSON object");
	parse_bad("{}", 2, "type: missing or not a string");
	parse_bad("{\"type\":1}", 10, "type: missing or not a string");
	parse_bad("{\"type\":\"cancel\",\"type\":\"x\"}", 28, "msg: not JSON");
	parse_bad("{\"type\":\"cancel\"}\0", 18, "msg: not JSON");

	big = malloc(PROTO_CTL_MAX_BYTES + 1);
	memset(big, ' ', PROTO_CTL_MAX_BYTES + 1);
	memcpy(big, "{\"type\":\"cancel\"}", 17);
	parse_bad(big, PROTO_CTL_MAX_BYTES + 1, "msg: too long (4097 bytes > 4096)");
	TH_CHECK(proto_ctl_parse(big, PROTO_CTL_MAX_BYTES, &ctl, err, sizeof(err)) == 0, "at cap");
	free(big);

	/* A long reason is cut at a character boundary. */
	{
		char msg[400];
		size_t i, len;

		len = (size_t)snprintf(msg, sizeof(msg), "{\"type\":\"cancel\",\"reason\":\"");
		for (i = 0; i < 127; i++)
			msg[len++] = 'r';
		memcpy(msg + len, "\xc3\xa9xyz\"}", 8);
		len += 7;
		TH_CHECK(proto_ctl_parse(msg, len, &ctl, err, sizeof(err)) == 0, "long reason");
		TH_CHECK(strlen(ctl.reason) == 127 && ctl.reason[126] == 'r', "cut at boundary: %zu",
		         strlen(ctl.reason));
	}

	/* Serialize and round trip. */
	memset(&ctl, 0, sizeof(ctl));
	ctl.type = PROTO_CTL_CANCEL;
	snprintf(ctl.reason, sizeof(ctl.reason), "%s", "client_closed");
	n = proto_ctl_serialize(&ctl, buf, sizeof(buf));
	TH_CHECK(n == (int)strlen("{\"type\":\"cancel\",\"reason\":\"client_closed\"}"), "len %d", n);
	TH_CHECK_STR("serialize", buf, "{\"type\":\"cancel\",\"reason\":\"client_closed\"}");
	{
		proto_ctl_t back;

		TH_CHECK(proto_ctl_parse(buf, (size_t)n, &back, err, sizeof(err)) == 0 &&
		                 back.type == PROTO_CTL_CANCEL && strcmp(back.reason, "client_closed") == 0,
		         "round trip");
	}
	ctl.reason[0] = '\0';
	n = proto_ctl_serialize(&ctl, buf, sizeof(buf));
	TH_CHECK_STR("no reason", buf, "{\"type\":\"cancel\"}");
	snprintf(ctl.reason, sizeof(ctl.reason), "%s", "say \"bye\"");
	n = proto_ctl_serialize(&ctl, buf, sizeof(buf));
	TH_CHECK_STR("escaped", buf, "{\"type\":\"cancel\",\"reason\":\"say \\\"bye\\\"\"}");
	TH_CHECK(proto_ctl_serialize(&ctl, buf, 10) == -1, "too small");
	TH_CHECK(proto_ctl_serialize(&ctl, buf, (size_t)n) == -1, "no room for NUL");
	TH_CHECK(proto_ctl_serialize(&ctl, buf, (size_t)n + 1) == n, "exact fit");
	snprintf(ctl.reason, sizeof(ctl.reason), "%s", "bad \xff");
	TH_CHECK(proto_ctl_serialize(&ctl, buf, sizeof(buf)) == -1, "invalid UTF-8 reason");
	ctl.type = PROTO_CTL_UNKNOWN;
	TH_CHECK(proto_ctl_serialize(&ctl, buf, sizeof(buf)) == -1, "unknown type");

	/* Replies. */
	TH_CHECK(proto_ctl_parse("{\"type\":\"reply\",\"id\":\"ask_1\",\"option\":\"allow_once\"}", 51, &ctl,
	                         err, sizeof(err)) == 0,
	         "reply option: %s", err);
	TH_CHECK(ctl.type == PROTO_CTL_REPLY && ctl.reply == PROTO_REPLY_OPTION &&
	                 strcmp(ctl.id, "ask_1") == 0 && strcmp(ctl.option, "allow_once") == 0,
	         "reply option fields");
	parse_reply_ok("{\"type\":\"reply\",\"id\":\"a\",\"text\":\"use rm\"}", PROTO_REPLY_TEXT);
	parse_reply_ok("{\"type\":\"reply\",\"id\":\"a\",\"reject\":true}", PROTO_REPLY_REJECT);
	parse_reply_ok("{\"type\":\"reply\",\"id\":\"a\",\"reject\":true,\"expired\":true}", PROTO_REPLY_REJECT);
	reply_bad("{\"type\":\"reply\",\"option\":\"x\"}", "id: missing or not a string");
	reply_bad("{\"type\":\"reply\",\"id\":\"\",\"option\":\"x\"}",
	          "id: must be 1-128 characters of A-Z a-z 0-9 _ . : -");
	reply_bad("{\"type\":\"reply\",\"id\":\"a b\",\"reject\":true}",
	          "id: must be 1-128 characters of A-Z a-z 0-9 _ . : -");
	reply_bad("{\"type\":\"reply\",\"id\":\"a\"}", "reply: give exactly one of option, text, reject");
	reply_bad("{\"type\":\"reply\",\"id\":\"a\",\"option\":\"x\",\"text\":\"t\"}",
	          "reply: give exactly one of option, text, reject");
	reply_bad("{\"type\":\"reply\",\"id\":\"a\",\"option\":5}", "option: not a string");
	reply_bad("{\"type\":\"reply\",\"id\":\"a\",\"option\":\"no way\"}",
	          "option: must be 1-128 characters of A-Z a-z 0-9 _ . : -");
	reply_bad("{\"type\":\"reply\",\"id\":\"a\",\"text\":[]}", "text: not a string");
	reply_bad("{\"type\":\"reply\",\"id\":\"a\",\"reject\":false}", "reject: must be true");
	{
		char *t = malloc(PROTO_CTL_TEXT_MAX + 2);

		memset(t, 'x', PROTO_CTL_TEXT_MAX + 1);
		t[PROTO_CTL_TEXT_MAX + 1] = '\0';
		TH_CHECK(proto_ctl_reply_set(&ctl, "a", NULL, t, 0, err, sizeof(err)) == -1 &&
		                 strcmp(err, "text: longer than 3072 bytes") == 0,
		         "long text: %s", err);
		t[PROTO_CTL_TEXT_MAX] = '\0';
		TH_CHECK(proto_ctl_reply_set(&ctl, "a", NULL, t, 0, err, sizeof(err)) == 0, "text at cap");
		free(t);
	}
	TH_CHECK(proto_ctl_reply_set(&ctl, "a", NULL, "bad \xff", 0, err, sizeof(err)) == -1 &&
	                 strcmp(err, "text: not valid UTF-8") == 0,
	         "bad UTF-8 text: %s", err);
	TH_CHECK(proto_ctl_reply_set(&ctl, "ask_1", "allow_once", NULL, 0, err, sizeof(err)) == 0, "set option");
	n = proto_ctl_serialize(&ctl, buf, sizeof(buf));
	TH_CHECK_STR("reply option", buf, "{\"type\":\"reply\",\"id\":\"ask_1\",\"option\":\"allow_once\"}");
	TH_CHECK(proto_ctl_reply_set(&ctl, "ask_1", NULL, "say \"hi\"", 0, err, sizeof(err)) == 0, "set text");
	n = proto_ctl_serialize(&ctl, buf, sizeof(buf));
	TH_CHECK_STR("reply text", buf, "{\"type\":\"reply\",\"id\":\"ask_1\",\"text\":\"say \\\"hi\\\"\"}");
	TH_CHECK(proto_ctl_reply_set(&ctl, "ask_1", NULL, NULL, 1, err, sizeof(err)) == 0, "set reject");
	n = proto_ctl_serialize(&ctl, buf, sizeof(buf));
	TH_CHECK_STR("reply reject", buf, "{\"type\":\"reply\",\"id\":\"ask_1\",\"reject\":true}");
	{
		proto_ctl_t back;

		TH_CHECK(proto_ctl_parse(buf, (size_t)n, &back, err, sizeof(err)) == 0 &&
		                 back.type == PROTO_CTL_REPLY && back.reply == PROTO_REPLY_REJECT,
		         "reply round trip");
	}
	return th_done();
}
