/*
 * cli/http.c - the dispatcher client used by `submit` and `cancel`.
 */
#include "http.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <curl/curl.h>
#include <jansson.h>

#include "common/dynbuf.h"
#include "common/util.h"


int cli_http_request(const char *method, const char *url, const char *token,
                     const char *json_body, cli_http_resp_t *resp,
                     char *errstr, size_t errstr_size)
{
	char cerr[CURL_ERROR_SIZE] = "";
	rn_body_t b;
	rn_body_init(&b, CLI_HTTP_BODY_MAX, 1); /* the answer's head is enough to report */
	struct curl_slist *hdrs = NULL;
	char *auth = NULL;
	int rc = -1;

	memset(resp, 0, sizeof(*resp));
	curl_global_init(CURL_GLOBAL_DEFAULT);
	CURL *h = curl_easy_init();
	if (!h) {
		snprintf(errstr, errstr_size, "cannot reach the dispatcher at %s: curl init failed", url);
		return -1;
	}
	curl_easy_setopt(h, CURLOPT_URL, url);
	curl_easy_setopt(h, CURLOPT_CUSTOMREQUEST, method);
	curl_easy_setopt(h, CURLOPT_ERRORBUFFER, cerr);
	curl_easy_setopt(h, CURLOPT_CONNECTTIMEOUT_MS, 5000L);
	curl_easy_setopt(h, CURLOPT_TIMEOUT_MS, 30000L);
	curl_easy_setopt(h, CURLOPT_NOSIGNAL, 1L);
	curl_easy_setopt(h, CURLOPT_WRITEFUNCTION, rn_body_write);
	curl_easy_setopt(h, CURLOPT_WRITEDATA, &b);
	curl_easy_setopt(h, CURLOPT_PROTOCOLS_STR, "http,https");
	hdrs = curl_slist_append(hdrs, "Accept: application/json");
	if (json_body) {
		hdrs = curl_slist_append(hdrs, "Content-Type: application/json");
		curl_easy_setopt(h, CURLOPT_POSTFIELDS, json_body);
		curl_easy_setopt(h, CURLOPT_POSTFIELDSIZE, (long)strlen(json_body));
	}
	if (token && *token) {
		size_t n = strlen(token) + sizeof("Authorization: Bearer ");
		auth = malloc(n);
		if (auth) {
			snprintf(auth, n, "Authorization: Bearer %s", token);
			hdrs = curl_slist_append(hdrs, auth);
		}
	}
	curl_easy_setopt(h, CURLOPT_HTTPHEADER, hdrs);

	CURLcode cc = curl_easy_perform(h);
	if (cc != CURLE_OK) {
		snprintf(errstr, errstr_size, "cannot reach the dispatcher at %s: %s", url,
		         cerr[0] ? cerr : curl_easy_strerror(cc));
		rn_body_free(&b);
		goto out;
	}
	curl_easy_getinfo(h, CURLINFO_RESPONSE_CODE, &resp->status);
	resp->body = rn_dynbuf_take(&b.buf, &resp->len);
	rc = 0;
out:
	if (auth) {
		memset(auth, 0, strlen(auth));
		free(auth);
	}
	curl_slist_free_all(hdrs);
	curl_easy_cleanup(h);
	return rc;
}

char *cli_http_error_message(const cli_http_resp_t *resp, char *buf, size_t size)
{
	json_error_t jerr;
	json_t *o = resp->body ? json_loadb(resp->body, resp->len, 0, &jerr) : NULL;
	json_t *e = json_object_get(o, "error");
	const char *msg = json_string_value(json_object_get(e, "message"));
	const char *code = json_string_value(json_object_get(e, "code"));
	if (!msg && json_is_string(e))
		msg = json_string_value(e);
	if (msg)
		snprintf(buf, size, "%s%s%s", code ? code : "", code ? ": " : "", msg);
	else
		snprintf(buf, size, "%.200s", resp->body && resp->len ? resp->body : "(empty answer)");
	json_decref(o);
	/* One line: the answer may hold newlines. */
	for (char *p = buf; *p; p++)
		if (*p == '\n' || *p == '\r')
			*p = ' ';
	return buf;
}

void cli_http_resp_free(cli_http_resp_t *resp)
{
	free(resp->body);
	memset(resp, 0, sizeof(*resp));
}

char *cli_http_url(char *buf, size_t size, const char *base, const char *fmt, ...)
{
	char path[512];
	va_list ap;

	size_t bl = strlen(base);
	while (bl && base[bl - 1] == '/')
		bl--;
	va_start(ap, fmt);
	vsnprintf(path, sizeof(path), fmt, ap);
	va_end(ap);
	snprintf(buf, size, "%.*s%s", (int)bl, base, path);
	return buf;
}
