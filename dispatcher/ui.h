/*
 * dispatcher/ui.h - the /ui/ run viewer: static HTML, CSS and JavaScript
 * compiled into the binary (the table is generated at build time from
 * dispatcher/ui/ by dispatcher/ui/embed.cmake) and served without a token,
 * with a strict Content-Security-Policy.  The page itself calls the API
 * routes, which keep their bearer token.
 *
 * @locality main (loop) thread.
 */
#ifndef RUNNEL_DISPATCHER_UI_H
#define RUNNEL_DISPATCHER_UI_H

#include <stddef.h>

/* One embedded file.  The table ends with an entry whose path is NULL. */
typedef struct dispatcher_ui_file {
	const char *path; /* "/ui/app.js" */
	const char *ctype;
	const unsigned char *data;
	size_t len;
} dispatcher_ui_file_t;

extern const dispatcher_ui_file_t dispatcher_ui_files[];

/* The file served for path ("/ui/" is index.html), or NULL. */
const dispatcher_ui_file_t *dispatcher_ui_find(const char *path);

/*
 * 1 when url may be the dev workspace stub the page mints runs from: only
 * "http://" + a loopback host (127.0.0.1, localhost, [::1]) + ":PORT", no
 * path, because it goes verbatim into the Content-Security-Policy.
 */
int dispatcher_ui_stub_url_ok(const char *url);

#endif
