/*
 * proto/control.c - parsing and serializing the control messages that travel
 * on <prefix>:{RUN}:ctl (SPEC §3).
 */
#include "proto/control.h"
#include "proto/utf8.h"

#include <stdio.h>
#include <string.h>

#include <jansson.h>

int proto_ctl_id_ok(const char *s)
{
	size_t n = 0;

	if (!s)
		return 0;
	for (; s[n] != '\0'; n++) {
		char c = s[n];
		if (!((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
		      c == '_' || c == '.' || c == ':' || c == '-'))
			return 0;
		if (n >= PROTO_CTL_ID_MAX)
			return 0;
	}
	return n > 0;
}

int proto_ctl_reply_set(proto_ctl_t *ctl, const char *id, const char *option,
                        const char *text, int reject, char *errstr, size_t errstr_size)
{
	memset(ctl, 0, sizeof(*ctl));
	ctl->type = PROTO_CTL_REPLY;
	if (!proto_ctl_id_ok(id)) {
		snprintf(errstr, errstr_size, "id: must be 1-128 characters of A-Z a-z 0-9 _ . : -");
		return -1;
	}
	if (!!option + !!text + (reject != 0) != 1) {
		snprintf(errstr, errstr_size, "reply: give exactly one of option, text, reject");
		return -1;
	}
	snprintf(ctl->id, sizeof(ctl->id), "%s", id);
	if (option) {
		if (!proto_ctl_id_ok(option)) {
			snprintf(errstr, errstr_size, "option: must be 1-128 characters of A-Z a-z 0-9 _ . : -");
			return -1;
		}
		ctl->reply = PROTO_REPLY_OPTION;
		snprintf(ctl->option, sizeof(ctl->option), "%s", option);
	} else if (text) {
		if (strlen(text) > PROTO_CTL_TEXT_MAX) {
			snprintf(errstr, errstr_size, "text: longer than %d bytes", PROTO_CTL_TEXT_MAX);
			return -1;
		}
		if (!proto_utf8_valid(text, strlen(text))) {
			snprintf(errstr, errstr_size, "text: not valid UTF-8");
			return -1;
		}
		ctl->reply = PROTO_REPLY_TEXT;
		snprintf(ctl->text, sizeof(ctl->text), "%s", text);
	} else {
		ctl->reply = PROTO_REPLY_REJECT;
	}
	return 0;
}

/* The fields of a reply message: wrong types count as "given" so that
 * {"option":5} is refused instead of read as no option. */
static int parse_reply(json_t *root, proto_ctl_t *ctl, char *errstr, size_t errstr_size)
{
	json_t *id = json_object_get(root, "id");
	json_t *option = json_object_get(root, "option");
	json_t *text = json_object_get(root, "text");
	json_t *reject = json_object_get(root, "reject");

	if (!json_is_string(id)) {
		snprintf(errstr, errstr_size, "id: missing or not a string");
		return -1;
	}
	if (option && !json_is_string(option)) {
		snprintf(errstr, errstr_size, "option: not a string");
		return -1;
	}
	if (text && !json_is_string(text)) {
		snprintf(errstr, errstr_size, "text: not a string");
		return -1;
	}
	if (reject && !json_is_true(reject)) {
		snprintf(errstr, errstr_size, "reject: must be true");
		return -1;
	}
	if (text && memchr(json_string_value(text), '\0', json_string_length(text))) {
		snprintf(errstr, errstr_size, "text: contains a NUL character");
		return -1;
	}
	return proto_ctl_reply_set(ctl, json_string_value(id),
	                           option ? json_string_value(option) : NULL,
	                           text ? json_string_value(text) : NULL,
	                           !!reject, errstr, errstr_size);
}

int proto_ctl_parse(const char *buf, size_t len, proto_ctl_t *ctl,
                    char *errstr, size_t errstr_size)
{
	json_error_t jerr;
	json_t *root, *type, *reason;
	const char *t;

	memset(ctl, 0, sizeof(*ctl));
	if (len > PROTO_CTL_MAX_BYTES) {
		snprintf(errstr, errstr_size, "msg: too long (%zu bytes > %d)",
		         len, PROTO_CTL_MAX_BYTES);
		return -1;
	}
	root = json_loadb(buf, len, JSON_REJECT_DUPLICATES, &jerr);
	if (!root) {
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
	if (strcmp(t, "reply") == 0) {
		int rc = parse_reply(root, ctl, errstr, errstr_size);
		json_decref(root);
		return rc;
	}
	ctl->type = strcmp(t, "cancel") == 0 ? PROTO_CTL_CANCEL : PROTO_CTL_UNKNOWN;
	reason = json_object_get(root, "reason");
	if (json_is_string(reason))
		proto_utf8_copy_cut(ctl->reason, json_string_value(reason),
		                    json_string_length(reason), PROTO_CTL_REASON_MAX);
	json_decref(root);
	return 0;
}

int proto_ctl_serialize(const proto_ctl_t *ctl, char *buf, size_t size)
{
	json_t *root;
	size_t n;

	if (ctl->type != PROTO_CTL_CANCEL && ctl->type != PROTO_CTL_REPLY)
		return -1;
	root = json_object();
	if (!root)
		return -1;
	if (ctl->type == PROTO_CTL_CANCEL) {
		if (json_object_set_new(root, "type", json_string("cancel")) != 0 ||
		    (ctl->reason[0] != '\0' &&
		     json_object_set_new(root, "reason", json_string(ctl->reason)) != 0)) {
			json_decref(root);
			return -1;
		}
	} else {
		int bad = json_object_set_new(root, "type", json_string("reply")) != 0 ||
		        json_object_set_new(root, "id", json_string(ctl->id)) != 0;
		if (ctl->reply == PROTO_REPLY_OPTION)
			bad |= json_object_set_new(root, "option", json_string(ctl->option)) != 0;
		else if (ctl->reply == PROTO_REPLY_TEXT)
			bad |= json_object_set_new(root, "text", json_string(ctl->text)) != 0;
		else if (ctl->reply == PROTO_REPLY_REJECT)
			bad |= json_object_set_new(root, "reject", json_true()) != 0;
		else
			bad = 1;
		if (bad) {
			json_decref(root);
			return -1;
		}
	}
	n = json_dumpb(root, buf, size, JSON_COMPACT | JSON_PRESERVE_ORDER);
	json_decref(root);
	/* json_dumpb returns the needed size even when it does not fit; keep room for the NUL. */
	if (n == 0 || n >= size)
		return -1;
	buf[n] = '\0';
	return (int)n;
}

/*
 * KEYS: state out ctl.  ARGV: ask_id msg ttl_sec option ("" none).
 * {what, options}: absent, unknown, settled, bad_option, written.  The
 * out stream is read in pages; a line is decoded only when it mentions an
 * ask.  A run that ended (or was lost) with the ask still open counts as
 * settled: nobody would read the reply.
 */
const char proto_ctl_reply_lua[] =
        "if redis.call('EXISTS', KEYS[1]) == 0 and redis.call('EXISTS', KEYS[2]) == 0 then\n"
        "  return {'absent', ''}\n"
        "end\n"
        "local found, open, opts = false, false, {}\n"
        "local start = '-'\n"
        "while true do\n"
        "  local page = redis.call('XRANGE', KEYS[2], start, '+', 'COUNT', 512)\n"
        "  for _, e in ipairs(page) do\n"
        "    local f = e[2]\n"
        "    for i = 1, #f, 2 do\n"
        "      local l = f[i + 1]\n"
        "      if f[i] == 'line' and string.find(l, '\"ask\"', 1, true) then\n"
        "        local ok, j = pcall(cjson.decode, l)\n"
        "        if ok and type(j) == 'table' and j['type'] == 'ask' and j['id'] == ARGV[1] then\n"
        "          found = true\n"
        "          open = j['status'] == 'open'\n"
        "          if open and type(j['options']) == 'table' then\n"
        "            opts = {}\n"
        "            for _, o in ipairs(j['options']) do\n"
        "              if type(o) == 'table' and type(o['id']) == 'string' then opts[#opts + 1] = o['id'] end\n"
        "            end\n"
        "          end\n"
        "        end\n"
        "      end\n"
        "    end\n"
        "  end\n"
        "  if #page < 512 then break end\n"
        "  start = '(' .. page[#page][1]\n"
        "end\n"
        "if not found then return {'unknown', ''} end\n"
        "local st = redis.call('HGET', KEYS[1], 'status')\n"
        "if not open or st == 'succeeded' or st == 'failed' or st == 'cancelled' or st == 'lost' then\n"
        "  return {'settled', ''}\n"
        "end\n"
        "if ARGV[4] ~= '' then\n"
        "  local hit = false\n"
        "  for _, o in ipairs(opts) do if o == ARGV[4] then hit = true end end\n"
        "  if not hit then return {'bad_option', table.concat(opts, ', ')} end\n"
        "end\n"
        "redis.call('XADD', KEYS[3], '*', 'msg', ARGV[2])\n"
        "local ttl = redis.call('PTTL', KEYS[1])\n"
        "if ttl < 0 then ttl = redis.call('PTTL', KEYS[2]) end\n"
        "if ttl > 0 then redis.call('PEXPIRE', KEYS[3], ttl) else redis.call('EXPIRE', KEYS[3], ARGV[3]) end\n"
        "return {'written', ''}\n";
