/*
 * proto/control.c - parsing and serializing the control messages that travel
 * on <prefix>:{RUN}:ctl (SPEC §3).
 */
#include "proto/control.h"

#include <stdio.h>
#include <string.h>

#include <jansson.h>

/* Copies at most max bytes of s into dst, cutting at a UTF-8 character
 * boundary so the copy stays valid UTF-8 (jansson gave us valid input). */
static void copy_utf8_cut(char *dst, const char *s, size_t len, size_t max)
{
	if (len > max) {
		len = max;
		while (len > 0 && ((unsigned char)s[len] & 0xC0) == 0x80)
			len--;
	}
	memcpy(dst, s, len);
	dst[len] = '\0';
}

int proto_ctl_parse(const char *buf, size_t len, proto_ctl_t *ctl,
                    char *errstr, size_t errstr_size)
{
	json_error_t jerr;
	json_t *root, *type, *reason;
	const char *t;

	memset(ctl, 0, sizeof *ctl);
	if (len > PROTO_CTL_MAX_BYTES) {
		snprintf(errstr, errstr_size, "msg: too long (%zu bytes > %d)",
		         len, PROTO_CTL_MAX_BYTES);
		return -1;
	}
	root = json_loadb(buf, len, JSON_REJECT_DUPLICATES, &jerr);
	if (root == NULL) {
		snprintf(errstr, errstr_size, "msg: not JSON");
		return -1;
	}
	if (!json_is_object(root)) {
		json_decref(root);
		snprintf(errstr, errstr_size, "msg: not a JSON object");
		return -1;
	}
	type = json_object_get(root, "type");
	if (!json_is_string(type)) {
		json_decref(root);
		snprintf(errstr, errstr_size, "type: missing or not a string");
		return -1;
	}
	t = json_string_value(type);
	ctl->type = strcmp(t, "cancel") == 0 ? PROTO_CTL_CANCEL : PROTO_CTL_UNKNOWN;
	reason = json_object_get(root, "reason");
	if (json_is_string(reason))
		copy_utf8_cut(ctl->reason, json_string_value(reason),
		              json_string_length(reason), PROTO_CTL_REASON_MAX);
	json_decref(root);
	return 0;
}

int proto_ctl_serialize(const proto_ctl_t *ctl, char *buf, size_t size)
{
	json_t *root;
	size_t n;

	if (ctl->type != PROTO_CTL_CANCEL)
		return -1;
	root = json_object();
	if (root == NULL)
		return -1;
	if (json_object_set_new(root, "type", json_string("cancel")) != 0 ||
	    (ctl->reason[0] != '\0' &&
	     json_object_set_new(root, "reason", json_string(ctl->reason)) != 0)) {
		json_decref(root);
		return -1;
	}
	n = json_dumpb(root, buf, size, JSON_COMPACT | JSON_PRESERVE_ORDER);
	json_decref(root);
	/* json_dumpb returns the needed size even when it does not fit; keep room for the NUL. */
	if (n == 0 || n >= size)
		return -1;
	buf[n] = '\0';
	return (int)n;
}
