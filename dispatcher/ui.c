/*
 * dispatcher/ui.c - serves GET /ui/ (SPEC §7): the embedded viewer files and
 * /ui/config.json, which tells the page whether the API wants a token and
 * where the dev workspace stub is.  Everything else of the viewer talks to
 * the API routes like any other caller.
 */
#include "dispatcher/dispatcher.h"
#include "dispatcher/ui.h"

#include <stdio.h>
#include <string.h>

#include <sodium.h>

/*
 * No inline script or style, no eval, nothing from another origin but the
 * dev stub (connect only): agent output that slipped into the DOM as HTML
 * still could not run.  The page renders agent text as text nodes anyway.
 */
#define CSP_BASE "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self' data:; " \
	         "base-uri 'none'; form-action 'none'; frame-ancestors 'none'; connect-src 'self'"

const dispatcher_ui_file_t *dispatcher_ui_find(const char *path)
{
	if (strcmp(path, "/ui/") == 0)
		path = "/ui/index.html";
	for (const dispatcher_ui_file_t *f = dispatcher_ui_files; f->path; f++)
		if (strcmp(f->path, path) == 0)
			return f;
	return NULL;
}

int dispatcher_ui_stub_url_ok(const char *url)
{
	static const char *const hosts[] = { "127.0.0.1:", "localhost:", "[::1]:" };
	const char *p;
	size_t n = 0;

	if (!url || strncmp(url, "http://", 7) != 0)
		return 0;
	url += 7;
	for (size_t i = 0; i < sizeof(hosts) / sizeof(hosts[0]); i++) {
		if (strncmp(url, hosts[i], strlen(hosts[i])) != 0)
			continue;
		for (p = url + strlen(hosts[i]); *p >= '0' && *p <= '9'; p++)
			n++;
		return *p == '\0' && n >= 1 && n <= 5;
	}
	return 0;
}

static void security_headers(dispatcher_t *d, struct evkeyvalq *out)
{
	char csp[sizeof(CSP_BASE) + 80];

	snprintf(csp, sizeof(csp), "%s%s%s", CSP_BASE, d->cfg->ui_dev_stub ? " " : "",
	         d->cfg->ui_dev_stub ? d->cfg->ui_dev_stub : "");
	evhttp_add_header(out, "Content-Security-Policy", csp);
	evhttp_add_header(out, "X-Content-Type-Options", "nosniff");
	evhttp_add_header(out, "X-Frame-Options", "DENY");
	evhttp_add_header(out, "Referrer-Policy", "no-referrer");
	evhttp_add_header(out, "Cross-Origin-Opener-Policy", "same-origin");
	evhttp_add_header(out, "Cross-Origin-Resource-Policy", "same-origin");
}

static void serve_config(dispatcher_t *d, struct evhttp_request *req)
{
	struct evkeyvalq *out = evhttp_request_get_output_headers(req);
	json_t *o = json_pack("{s:b,s:s,s:s?}", "auth", !!d->cfg->api_token, "version", RUNNEL_VERSION,
	                      "dev_stub", d->cfg->ui_dev_stub);
	char *text = o ? json_dumps(o, JSON_COMPACT) : NULL;

	json_decref(o);
	security_headers(d, out);
	evhttp_add_header(out, "Content-Type", "application/json");
	evhttp_add_header(out, "Cache-Control", "no-store");
	if (!text) {
		dispatcher_send(d, req, DISPATCHER_ROUTE_UI, 500, "{}\n", 3);
		return;
	}
	dispatcher_send(d, req, DISPATCHER_ROUTE_UI, 200, text, strlen(text));
	free(text);
}

void dispatcher_ui_serve(dispatcher_t *d, struct evhttp_request *req, const char *path)
{
	struct evkeyvalq *out = evhttp_request_get_output_headers(req);
	const dispatcher_ui_file_t *f;
	unsigned char h[16];
	char etag[2 * sizeof(h) + 3];
	const char *inm;

	if (strcmp(path, "/ui") == 0) {
		evhttp_add_header(out, "Location", "/ui/");
		evhttp_add_header(out, "Cache-Control", "no-cache");
		dispatcher_send(d, req, DISPATCHER_ROUTE_UI, 301, NULL, 0);
		return;
	}
	if (strcmp(path, "/ui/config.json") == 0) {
		serve_config(d, req);
		return;
	}
	f = dispatcher_ui_find(path);
	if (!f) {
		dispatcher_reply_error(d, req, DISPATCHER_ROUTE_UI, 404, "not_found", "ui: no such file");
		return;
	}
	/* The names carry no hash, so browsers revalidate every time; an
	 * unchanged file costs a 304. */
	crypto_generichash(h, sizeof(h), f->data, f->len, NULL, 0);
	etag[0] = '"';
	sodium_bin2hex(etag + 1, sizeof(etag) - 1, h, sizeof(h));
	etag[sizeof(etag) - 2] = '"';
	etag[sizeof(etag) - 1] = '\0';
	security_headers(d, out);
	evhttp_add_header(out, "ETag", etag);
	evhttp_add_header(out, "Cache-Control", "no-cache");
	inm = evhttp_find_header(evhttp_request_get_input_headers(req), "If-None-Match");
	if (inm && strstr(inm, etag)) {
		dispatcher_send(d, req, DISPATCHER_ROUTE_UI, 304, NULL, 0);
		return;
	}
	evhttp_add_header(out, "Content-Type", f->ctype);
	dispatcher_send(d, req, DISPATCHER_ROUTE_UI, 200, f->data, f->len);
}
