/*
 * proto/control.h - control messages on <prefix>:{RUN}:ctl, field "msg"
 * (SPEC §3): "cancel" and "reply" (the answer to an open `ask` line).
 * Unknown types parse as PROTO_CTL_UNKNOWN so that an older worker ignores a
 * newer message instead of failing the run.
 */
#ifndef RUNNEL_PROTO_CONTROL_H
#define RUNNEL_PROTO_CONTROL_H

#include <stddef.h>

#define PROTO_CTL_MAX_BYTES  4096
#define PROTO_CTL_REASON_MAX 128
#define PROTO_CTL_ID_MAX     128  /* ask ids: [A-Za-z0-9_.:-] */
#define PROTO_CTL_OPTION_MAX 128  /* option ids, same characters */
#define PROTO_CTL_TEXT_MAX   3072 /* bytes of free text */

typedef enum {
	PROTO_CTL_UNKNOWN = 0,
	PROTO_CTL_CANCEL,
	PROTO_CTL_REPLY,
} proto_ctl_type_t;

/* What a reply carries: exactly one of an option, free text, or reject. */
typedef enum {
	PROTO_REPLY_NONE = 0,
	PROTO_REPLY_OPTION,
	PROTO_REPLY_TEXT,
	PROTO_REPLY_REJECT,
} proto_reply_kind_t;

typedef struct proto_ctl {
	proto_ctl_type_t type;
	char reason[PROTO_CTL_REASON_MAX + 1]; /* cancel; "" when absent */
	/* reply: {"type":"reply","id":..,"option":..|"text":..|"reject":true} */
	char id[PROTO_CTL_ID_MAX + 1];
	proto_reply_kind_t reply;
	char option[PROTO_CTL_OPTION_MAX + 1];
	char text[PROTO_CTL_TEXT_MAX + 1];
} proto_ctl_t;

/* Parses one message.  0 (type may be UNKNOWN) or -1 with errstr for bytes
 * that are not a JSON object with a string "type", and for a reply that
 * breaks the rules of proto_ctl_reply_check(). */
int proto_ctl_parse(const char *buf, size_t len, proto_ctl_t *ctl,
                    char *errstr, size_t errstr_size);

/*
 * Fills ctl as a reply from its parts (the dispatcher's body, the CLI's
 * arguments): id, then exactly one of option (non-NULL), text (non-NULL),
 * reject.  0, or -1 with errstr naming the field:
 *   "id: must be 1-128 characters of A-Z a-z 0-9 _ . : -"
 *   "option: must be 1-128 characters of A-Z a-z 0-9 _ . : -"
 *   "text: longer than 3072 bytes"
 *   "reply: give exactly one of option, text, reject"
 */
int proto_ctl_reply_set(proto_ctl_t *ctl, const char *id, const char *option,
                        const char *text, int reject, char *errstr, size_t errstr_size);

/* 1 when s is a usable ask or option id (1-128 of [A-Za-z0-9_.:-]). */
int proto_ctl_id_ok(const char *s);

/*
 * The Redis script that writes a reply only for an open ask (the dispatcher
 * and `runnel reply` run it).  KEYS: state out ctl; ARGV: ask_id, the
 * serialized reply, a ttl in seconds for the control stream when the run's
 * keys have none, the option ("" when none).  Returns {what, options}:
 * "absent" (no such run), "unknown" (no such ask), "settled" (already
 * settled, or the run ended), "bad_option" (options: the ask's option ids,
 * comma-separated) or "written".
 */
extern const char proto_ctl_reply_lua[];

/* Serializes into buf: {"type":"cancel","reason":"..."} or
 * {"type":"reply","id":"..","option":".."} (or "text", or "reject":true).
 * Returns the length or -1 when buf is too small or the type is UNKNOWN. */
int proto_ctl_serialize(const proto_ctl_t *ctl, char *buf, size_t size);

#endif
