/*
 * cli/http.h - one blocking HTTP request to the dispatcher (libcurl easy
 * interface: the CLI does one thing at a time).
 */
#ifndef RUNNEL_CLI_HTTP_H
#define RUNNEL_CLI_HTTP_H

#include <stddef.h>

#define CLI_HTTP_BODY_MAX (1u << 20) /* answers longer than this are cut */

typedef struct cli_http_resp {
	long status; /* HTTP status, 0 when no answer */
	char *body;  /* malloc'd, NUL-terminated (may be ""); caller frees */
	size_t len;
} cli_http_resp_t;

/*
 * Sends method url with an optional JSON body and bearer token (NULL/"" =
 * none).  Returns 0 when an answer came back (any status), -1 when the
 * server could not be reached (errstr: "cannot reach the dispatcher at
 * URL: REASON").  The token never appears in errstr.
 */
int cli_http_request(const char *method, const char *url, const char *token,
                     const char *json_body, cli_http_resp_t *resp,
                     char *errstr, size_t errstr_size);

/* The message of a {"error":{"code","message"}} body, or a short excerpt
 * of the body, into buf.  Returns buf. */
char *cli_http_error_message(const cli_http_resp_t *resp, char *buf, size_t size);

void cli_http_resp_free(cli_http_resp_t *resp);

/* The dispatcher's base URL (its trailing slashes dropped) followed by the
 * path that fmt makes ("/v1/runs/%s/cancel"), into buf.  Returns buf. */
char *cli_http_url(char *buf, size_t size, const char *base, const char *fmt, ...)
        __attribute__((format(printf, 4, 5)));

#endif
