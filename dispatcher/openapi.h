/*
 * dispatcher/openapi.h - the OpenAPI 3.1 description of every route
 * (dispatcher/openapi.json), compiled in at build time by
 * dispatcher/openapi.cmake and served as it is at GET /openapi.json.  The
 * document is the API's reference; docs/dispatcher.md points to it.
 */
#ifndef RUNNEL_DISPATCHER_OPENAPI_H
#define RUNNEL_DISPATCHER_OPENAPI_H

#include <stddef.h>

/* The document's bytes (NUL-terminated; the NUL is not counted). */
extern const unsigned char dispatcher_openapi_json[];
extern const size_t dispatcher_openapi_json_len;

#endif
