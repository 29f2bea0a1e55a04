/*
 * proto/agentctl.h - the control lines an envelope-native agent reads on its
 * stdin after the turn line (docs/protocol.md): {"type":"cancel"} and the
 * settlement of an ask it emitted,
 *   {"type":"reply","id":..,"option"|"text"|"reject":true[,"expired":true]}.
 * The worker writes them (worker/agent.c); runnel-agent (agent/ctl.c) and
 * runnel-mock-agent read them.  Pure functions; any thread.
 */
#ifndef RUNNEL_PROTO_AGENTCTL_H
#define RUNNEL_PROTO_AGENTCTL_H

#include <stddef.h>

#include <jansson.h>

#define PROTO_AGENTCTL_ID_MAX     128  /* bytes of an ask id */
#define PROTO_AGENTCTL_OPTION_MAX 128  /* bytes of an option id */
#define PROTO_AGENTCTL_TEXT_MAX   4095 /* bytes of free text kept */

/* The cancel line, newline included. */
#define PROTO_AGENTCTL_CANCEL_LINE "{\"type\":\"cancel\"}\n"

typedef enum {
	PROTO_AGENTCTL_OTHER = 0, /* not JSON, not an object, or another type: ignore */
	PROTO_AGENTCTL_CANCEL,
	PROTO_AGENTCTL_REPLY,
} proto_agentctl_type_t;

typedef struct proto_agentctl {
	proto_agentctl_type_t type;
	/* reply only; strings cut at the caps (at a UTF-8 boundary) */
	char id[PROTO_AGENTCTL_ID_MAX + 1];
	char option[PROTO_AGENTCTL_OPTION_MAX + 1]; /* "" when none */
	char text[PROTO_AGENTCTL_TEXT_MAX + 1];     /* "" when none */
	int has_option, has_text;
	int reject;  /* reject:true */
	int expired; /* expired:true (comes with reject) */
} proto_agentctl_t;

/*
 * Reads one control line (without its newline).  Never fails: anything
 * that is not a cancel or a reply with a string id no longer than
 * PROTO_AGENTCTL_ID_MAX comes back as PROTO_AGENTCTL_OTHER, which readers
 * ignore (a newer worker may send lines an older agent does not know).
 */
void proto_agentctl_parse(const char *line, size_t len, proto_agentctl_t *out);

/*
 * t (taken, may be NULL) as one stdin line: compact JSON and a newline,
 * malloc'd (the caller frees; it wipes a line holding the prompt).  NULL
 * out of memory.  The turn line and the reply line are written with it.
 */
char *proto_agentctl_line(json_t *t, size_t *lenp);

/*
 * The reply line for ask id: option when non-NULL, else text when
 * non-NULL, else reject:true; expired adds "expired":true.  Newline
 * included; malloc'd (the caller frees), NULL out of memory.
 */
char *proto_agentctl_reply_line(const char *id, const char *option, const char *text, int expired,
                                size_t *lenp);

#endif
