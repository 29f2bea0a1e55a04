/*
 * proto/queueentry.c - the run-time queue's entry by reference (see
 * queueentry.h).
 */
#include "proto/queueentry.h"

#include <stdio.h>
#include <string.h>

#include <jansson.h>

char *proto_queue_ref_write(const proto_queue_ref_t *ref, size_t *lenp)
{
	json_t *r = json_object();
	if (ref->topic[0])
		json_object_set_new(r, "t", json_string(ref->topic));
	json_object_set_new(r, "p", json_integer(ref->partition));
	json_object_set_new(r, "o", json_integer(ref->offset));
	json_t *j = r ? json_pack("{s:o}", "ref", r) : NULL;
	char *s = j ? json_dumps(j, JSON_COMPACT | JSON_PRESERVE_ORDER) : NULL;
	json_decref(j);
	if (s)
		*lenp = strlen(s);
	return s;
}

static int fail(char *errstr, size_t errstr_size, const char *msg)
{
	snprintf(errstr, errstr_size, "%s", msg);
	return -1;
}

int proto_queue_ref_parse(const char *entry, size_t len, proto_queue_ref_t *ref, char *errstr,
                          size_t errstr_size)
{
	memset(ref, 0, sizeof(*ref));
	json_t *root = json_loadb(entry, len, 0, NULL);
	json_t *r = json_object_get(root, "ref");
	int rc = 1;
	if (!r) {
		rc = 0;
		goto out;
	}
	if (!json_is_object(r)) {
		rc = fail(errstr, errstr_size, "ref: not an object");
		goto out;
	}
	json_t *t = json_object_get(r, "t");
	json_t *p = json_object_get(r, "p");
	json_t *o = json_object_get(r, "o");
	if (t && (!json_is_string(t) || json_string_length(t) == 0 || json_string_length(t) > PROTO_TOPIC_MAX || strlen(json_string_value(t)) != json_string_length(t))) {
		rc = fail(errstr, errstr_size, "ref: t must be a topic name of 1-249 characters");
		goto out;
	}
	if (!json_is_integer(p) || json_integer_value(p) < 0 || json_integer_value(p) > INT32_MAX) {
		rc = fail(errstr, errstr_size, "ref: p must be a partition number (0-2147483647)");
		goto out;
	}
	if (!json_is_integer(o) || json_integer_value(o) < 0) {
		rc = fail(errstr, errstr_size, "ref: o must be an offset (a non-negative integer)");
		goto out;
	}
	if (t)
		memcpy(ref->topic, json_string_value(t), json_string_length(t) + 1);
	ref->partition = (int32_t)json_integer_value(p);
	ref->offset = (int64_t)json_integer_value(o);
out:
	json_decref(root);
	return rc;
}
