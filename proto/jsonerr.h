/*
 * proto/jsonerr.h - the words runnel uses for a JSON parse failure.
 * jansson's own error text may quote the input (an OTP, a prompt), so
 * messages say only what kind of failure it was, and where.  Any thread.
 */
#ifndef RUNNEL_PROTO_JSONERR_H
#define RUNNEL_PROTO_JSONERR_H

#include <jansson.h>

/* A short, secret-free description of jerr ("invalid UTF-8", "duplicate
 * key", ...); other_words for a failure with no word of its own (syntax). */
const char *proto_json_error_words(const json_error_t *jerr, const char *other_words);

#endif
