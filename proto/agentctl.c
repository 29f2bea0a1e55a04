/*
 * proto/agentctl.c - the stdin control lines of envelope-native agents
 * (see agentctl.h).
 */
#include "proto/agentctl.h"
#include "proto/utf8.h"

#include <stdlib.h>
#include <string.h>

#include <jansson.h>
#include <sodium.h>

void proto_agentctl_parse(const char *line, size_t len, proto_agentctl_t *out)
{
	memset(out, 0, sizeof(*out));
	json_t *o = json_loadb(line, len, 0, NULL);
	const char *type = json_string_value(json_object_get(o, "type"));
	if (type && !strcmp(type, "cancel")) {
		out->type = PROTO_AGENTCTL_CANCEL;
	} else if (type && !strcmp(type, "reply")) {
		const char *id = json_string_value(json_object_get(o, "id"));
		if (id && strlen(id) <= PROTO_AGENTCTL_ID_MAX) {
			out->type = PROTO_AGENTCTL_REPLY;
			memcpy(out->id, id, strlen(id) + 1);
			const char *opt = json_string_value(json_object_get(o, "option"));
			const char *text = json_string_value(json_object_get(o, "text"));
			if (opt) {
				out->has_option = 1;
				proto_utf8_copy_cut(out->option, opt, strlen(opt), PROTO_AGENTCTL_OPTION_MAX);
			}
			if (text) {
				out->has_text = 1;
				proto_utf8_copy_cut(out->text, text, strlen(text), PROTO_AGENTCTL_TEXT_MAX);
			}
			out->reject = json_is_true(json_object_get(o, "reject"));
			out->expired = json_is_true(json_object_get(o, "expired"));
		}
	}
	json_decref(o);
}

char *proto_agentctl_line(json_t *t, size_t *lenp)
{
	char *s = t ? json_dumps(t, JSON_COMPACT | JSON_PRESERVE_ORDER) : NULL;
	json_decref(t);
	if (!s)
		return NULL;
	/* A fresh copy with the newline; the dump is wiped (it may hold the
	 * prompt, or anything a user typed). */
	size_t n = strlen(s);
	char *line = malloc(n + 2);
	if (line) {
		memcpy(line, s, n);
		line[n] = '\n';
		line[n + 1] = '\0';
		*lenp = n + 1;
	}
	sodium_memzero(s, n);
	free(s);
	return line;
}

char *proto_agentctl_reply_line(const char *id, const char *option, const char *text, int expired,
                                size_t *lenp)
{
	json_t *t = json_object();
	json_object_set_new(t, "type", json_string("reply"));
	json_object_set_new(t, "id", json_string(id));
	if (option)
		json_object_set_new(t, "option", json_string(option));
	else if (text)
		json_object_set_new(t, "text", json_string(text));
	else
		json_object_set_new(t, "reject", json_true());
	if (expired)
		json_object_set_new(t, "expired", json_true());
	return proto_agentctl_line(t, lenp);
}
