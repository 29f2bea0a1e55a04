/*
 * proto/control.h - control messages on <prefix>:{RUN}:ctl, field "msg"
 * (SPEC §3).  Only "cancel" exists today; unknown types parse as
 * PROTO_CTL_UNKNOWN so that an older worker ignores a newer message instead
 * of failing the run.
 */
#ifndef RUNNEL_PROTO_CONTROL_H
#define RUNNEL_PROTO_CONTROL_H

#include <stddef.h>

#define PROTO_CTL_MAX_BYTES   4096
#define PROTO_CTL_REASON_MAX  128

typedef enum {
	PROTO_CTL_UNKNOWN = 0,
	PROTO_CTL_CANCEL,
} proto_ctl_type_t;

typedef struct proto_ctl {
	proto_ctl_type_t type;
	char reason[PROTO_CTL_REASON_MAX + 1]; /* "" when absent */
} proto_ctl_t;

/* Parses one message.  0 (type may be UNKNOWN) or -1 with errstr for bytes
 * that are not a JSON object with a string "type". */
int proto_ctl_parse(const char *buf, size_t len, proto_ctl_t *ctl,
                    char *errstr, size_t errstr_size);

/* Serializes into buf: {"type":"cancel","reason":"..."}.  Returns the length
 * or -1 when buf is too small or the type is UNKNOWN. */
int proto_ctl_serialize(const proto_ctl_t *ctl, char *buf, size_t size);

#endif
