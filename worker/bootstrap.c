/*
 * worker/bootstrap.c - redeems the setup and run OTPs: GET {agent_url}/env
 * and GET {agent_url}/config at the same time on one curl multi handle,
 * then checks that each answer has the documented shape (SPEC §5).
 *
 * Each request is sent once: no retry, no redirect.  The OTPs only ever sit
 * in the Authorization header; messages name the route, never the URL (its
 * query string may carry credentials) and never quote the answer.
 */
#include "worker/bootstrap.h"

#include <ctype.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <curl/curl.h>

#include "proto/names.h"
#include "worker/httpc.h"

#define DEF_CONNECT_MS 5000L
#define DEF_TIMEOUT_MS 30000L
#define DEF_MAX_BODY   (4u << 20)
#define POLL_SLICE_MS  50 /* how quickly a stop is noticed */
#define NAME_QUOTE_MAX 64

typedef struct req {
	const char *route; /* "GET /env" */
	char *url;         /* malloc'd */
	CURL *h;
	struct curl_slist *headers;
	rn_body_t body;
	CURLcode rc;
	int done;
} req_t;

static void req_free(req_t *r)
{
	if (r->h)
		curl_easy_cleanup(r->h);
	curl_slist_free_all(r->headers);
	rn_body_free(&r->body);
	free(r->url);
	memset(r, 0, sizeof(*r));
}

static int req_init(req_t *r, const char *route, const char *agent_url, const char *leaf,
                    const char *otp, const worker_boot_opts_t *o, char *errstr, size_t errstr_size)
{
	memset(r, 0, sizeof(*r));
	r->route = route;
	r->url = worker_httpc_join(agent_url, leaf, errstr, errstr_size);
	if (!r->url)
		return -1;
	r->h = curl_easy_init();
	r->headers = worker_httpc_bearer(otp ? otp : "");
	if (r->headers)
		r->headers = curl_slist_append(r->headers, "Accept: application/json");
	if (!r->h || !r->headers) {
		snprintf(errstr, errstr_size, "bootstrap: out of memory");
		return -1;
	}
	rn_body_init(&r->body, o->max_body, 0);
	worker_httpc_setup(r->h, o->connect_timeout_ms, o->timeout_ms);
	worker_httpc_send_once(r->h);
	curl_easy_setopt(r->h, CURLOPT_URL, r->url);
	curl_easy_setopt(r->h, CURLOPT_HTTPGET, 1L);
	curl_easy_setopt(r->h, CURLOPT_HTTPHEADER, r->headers);
	curl_easy_setopt(r->h, CURLOPT_WRITEFUNCTION, rn_body_write);
	curl_easy_setopt(r->h, CURLOPT_WRITEDATA, &r->body);
	curl_easy_setopt(r->h, CURLOPT_PRIVATE, r);
	return 0;
}

/* Turns a finished request into its JSON object, or an error message. */
static json_t *req_answer(req_t *r, const worker_boot_opts_t *o, char *errstr, size_t errstr_size)
{
	if (r->body.too_big) {
		snprintf(errstr, errstr_size, "%s: answer is larger than %zu bytes", r->route, o->max_body);
		return NULL;
	}
	if (r->body.oom) {
		snprintf(errstr, errstr_size, "%s: out of memory", r->route);
		return NULL;
	}
	if (r->rc != CURLE_OK) {
		char why[256];
		worker_httpc_describe(r->h, r->rc, r->url, o->connect_timeout_ms, o->timeout_ms,
		                      why, sizeof(why));
		snprintf(errstr, errstr_size, "%s: %s", r->route, why);
		return NULL;
	}
	long status = 0;
	curl_easy_getinfo(r->h, CURLINFO_RESPONSE_CODE, &status);
	if (status >= 300 && status <= 399) {
		snprintf(errstr, errstr_size,
		         "%s answered a redirect (HTTP %ld); redirects are not followed", r->route, status);
		return NULL;
	}
	if (status != 200) {
		snprintf(errstr, errstr_size, "%s answered HTTP %ld", r->route, status);
		return NULL;
	}
	json_error_t jerr;
	json_t *j = r->body.buf.p ? json_loadb(r->body.buf.p, r->body.buf.len, JSON_REJECT_DUPLICATES, &jerr)
	                          : NULL;
	if (!j) {
		snprintf(errstr, errstr_size, "%s: answer is not JSON", r->route);
		return NULL;
	}
	if (!json_is_object(j)) {
		json_decref(j);
		snprintf(errstr, errstr_size, "%s: answer is not a JSON object", r->route);
		return NULL;
	}
	return j;
}

/* Quotes a name from the answer for a message (printable, truncated). */
static void quote(const char *s, char *out, size_t out_size)
{
	size_t o = 0;
	for (size_t i = 0; s[i] && i < NAME_QUOTE_MAX && o + 2 < out_size; i++)
		out[o++] = isprint((unsigned char)s[i]) && s[i] != '"' ? s[i] : '?';
	out[o] = '\0';
}

static int check_env(json_t *env, worker_boot_t *boot, char *errstr, size_t errstr_size)
{
	json_t *vars = json_object_get(env, "variables");
	if (!vars || json_is_null(vars)) {
		boot->variables = json_object();
	} else if (!json_is_object(vars)) {
		snprintf(errstr, errstr_size, "GET /env: \"variables\" is not an object");
		return -1;
	} else {
		const char *k;
		json_t *v;
		json_object_foreach(vars, k, v)
		{
			char q[NAME_QUOTE_MAX + 1];
			quote(k, q, sizeof(q));
			if (!proto_env_name_valid(k)) {
				snprintf(errstr, errstr_size, "GET /env: variable name \"%s\" is not valid", q);
				return -1;
			}
			if (!json_is_string(v)) {
				snprintf(errstr, errstr_size, "GET /env: variable \"%s\" is not a string", q);
				return -1;
			}
			/* A NUL would cut the value short in the environment. */
			if (strlen(json_string_value(v)) != json_string_length(v)) {
				snprintf(errstr, errstr_size, "GET /env: variable \"%s\" contains a NUL byte", q);
				return -1;
			}
		}
		boot->variables = json_incref(vars);
	}
	json_t *ss = json_object_get(env, "setup_script");
	if (ss && !json_is_null(ss)) {
		if (!json_is_string(ss)) {
			snprintf(errstr, errstr_size, "GET /env: \"setup_script\" is not a string or null");
			return -1;
		}
		if (json_string_length(ss) > 0) {
			boot->setup_script = strdup(json_string_value(ss));
			if (!boot->setup_script) {
				snprintf(errstr, errstr_size, "bootstrap: out of memory");
				return -1;
			}
		}
	}
	return 0;
}

/* Optional member of a given JSON type; 0 when absent, null or right. */
static int opt_type(json_t *obj, const char *key, json_type type, const char *what,
                    json_t **out, char *errstr, size_t errstr_size)
{
	json_t *v = json_object_get(obj, key);
	*out = NULL;
	if (!v || json_is_null(v))
		return 0;
	if (json_typeof(v) != type) {
		snprintf(errstr, errstr_size, "GET /config: \"%s\" is not %s", key, what);
		return -1;
	}
	*out = v;
	return 0;
}

static int check_config(json_t *cfg, worker_boot_t *boot, char *errstr, size_t errstr_size)
{
	json_t *v;
	if (opt_type(cfg, "system_prompt", JSON_STRING, "a string", &v, errstr, errstr_size))
		return -1;
	boot->system_prompt = json_string_value(v);
	if (opt_type(cfg, "model", JSON_STRING, "a string", &v, errstr, errstr_size))
		return -1;
	boot->model = json_string_value(v);
	if (opt_type(cfg, "skills", JSON_ARRAY, "an array", &boot->skills, errstr, errstr_size) ||
	    opt_type(cfg, "mcp_servers", JSON_ARRAY, "an array", &boot->mcp_servers, errstr, errstr_size) ||
	    opt_type(cfg, "history", JSON_ARRAY, "an array", &boot->history, errstr, errstr_size) ||
	    opt_type(cfg, "agent", JSON_OBJECT, "an object", &boot->agent, errstr, errstr_size))
		return -1;

	size_t i;
	json_t *sk;
	json_array_foreach(boot->skills, i, sk)
	{
		const char *name = json_string_value(json_object_get(sk, "name"));
		const char *zip = json_string_value(json_object_get(sk, "zip_url"));
		if (!json_is_object(sk) || !name || !zip) {
			snprintf(errstr, errstr_size,
			         "GET /config: skills[%zu] is not {\"name\":\"...\",\"zip_url\":\"...\"}", i);
			return -1;
		}
		if (!proto_skill_name_valid(name)) {
			char q[NAME_QUOTE_MAX + 1];
			quote(name, q, sizeof(q));
			snprintf(errstr, errstr_size, "GET /config: skill name \"%s\" is not valid", q);
			return -1;
		}
	}

	json_t *assets;
	if (opt_type(cfg, "assets", JSON_OBJECT, "an object", &assets, errstr, errstr_size))
		return -1;
	if (assets) {
		json_t *zip = json_object_get(assets, "zip_url");
		if (zip && !json_is_null(zip) && !json_is_string(zip)) {
			snprintf(errstr, errstr_size, "GET /config: \"assets.zip_url\" is not a string");
			return -1;
		}
		boot->zip_url = json_string_value(zip);
		if (boot->zip_url && !*boot->zip_url)
			boot->zip_url = NULL;
	}

	json_t *api;
	if (opt_type(cfg, "workspace_api", JSON_OBJECT, "an object", &api, errstr, errstr_size))
		return -1;
	if (api) {
		json_t *url = json_object_get(api, "url"), *tok = json_object_get(api, "token");
		if ((url && !json_is_null(url) && !json_is_string(url)) ||
		    (tok && !json_is_null(tok) && !json_is_string(tok))) {
			snprintf(errstr, errstr_size,
			         "GET /config: \"workspace_api\" is not {\"url\":\"...\",\"token\":\"...\"}");
			return -1;
		}
		boot->ws_api_url = json_string_value(url);
		boot->ws_api_token = json_string_value(tok);
	}

	json_t *mrs = json_object_get(cfg, "max_runtime_sec");
	if (mrs && !json_is_null(mrs)) {
		if (!json_is_integer(mrs) || json_integer_value(mrs) < 0) {
			snprintf(errstr, errstr_size,
			         "GET /config: \"max_runtime_sec\" is not a non-negative integer");
			return -1;
		}
		boot->max_runtime_sec = json_integer_value(mrs);
	}
	return 0;
}

int worker_bootstrap_fetch(const char *agent_url, const char *otp_setup,
                           const char *otp_run, const worker_boot_opts_t *opts,
                           worker_boot_t *boot, char *errstr, size_t errstr_size)
{
	memset(boot, 0, sizeof(*boot));
	worker_boot_opts_t o = { 0 };
	if (opts)
		o = *opts;
	if (o.connect_timeout_ms <= 0)
		o.connect_timeout_ms = DEF_CONNECT_MS;
	if (o.timeout_ms <= 0)
		o.timeout_ms = DEF_TIMEOUT_MS;
	if (o.max_body == 0)
		o.max_body = DEF_MAX_BODY;

	req_t env, cfg;
	memset(&env, 0, sizeof(env));
	memset(&cfg, 0, sizeof(cfg));
	CURLM *m = NULL;
	json_t *env_j = NULL, *cfg_j = NULL;
	int rc = -1;

	if (req_init(&env, "GET /env", agent_url, "env", otp_setup, &o, errstr, errstr_size) != 0 ||
	    req_init(&cfg, "GET /config", agent_url, "config", otp_run, &o, errstr, errstr_size) != 0)
		goto out;
	m = curl_multi_init();
	if (!m || curl_multi_add_handle(m, env.h) != CURLM_OK ||
	    curl_multi_add_handle(m, cfg.h) != CURLM_OK) {
		snprintf(errstr, errstr_size, "bootstrap: out of memory");
		goto out;
	}

	int running = 1;
	while (running) {
		if (o.stop && worker_stopword_any(o.stop)) {
			snprintf(errstr, errstr_size, "cancelled");
			goto out;
		}
		if (curl_multi_perform(m, &running) != CURLM_OK) {
			snprintf(errstr, errstr_size, "bootstrap: transfer engine failed");
			goto out;
		}
		CURLMsg *msg;
		int left;
		while ((msg = curl_multi_info_read(m, &left))) {
			if (msg->msg != CURLMSG_DONE)
				continue;
			req_t *r = NULL;
			curl_easy_getinfo(msg->easy_handle, CURLINFO_PRIVATE, (char **)&r);
			if (r) {
				r->rc = msg->data.result;
				r->done = 1;
			}
		}
		if (running)
			curl_multi_poll(m, NULL, 0, POLL_SLICE_MS, NULL);
	}

	/* /env's failure is reported first: it is the first step of a run. */
	env_j = req_answer(&env, &o, errstr, errstr_size);
	if (!env_j)
		goto out;
	cfg_j = req_answer(&cfg, &o, errstr, errstr_size);
	if (!cfg_j)
		goto out;
	if (check_env(env_j, boot, errstr, errstr_size) != 0)
		goto out;
	boot->config = cfg_j;
	cfg_j = NULL;
	if (check_config(boot->config, boot, errstr, errstr_size) != 0)
		goto out;
	rc = 0;
out:
	if (m) {
		if (env.h)
			curl_multi_remove_handle(m, env.h);
		if (cfg.h)
			curl_multi_remove_handle(m, cfg.h);
		curl_multi_cleanup(m);
	}
	req_free(&env);
	req_free(&cfg);
	json_decref(env_j);
	json_decref(cfg_j);
	if (rc != 0)
		worker_boot_clear(boot);
	return rc;
}

void worker_boot_clear(worker_boot_t *boot)
{
	json_decref(boot->variables);
	json_decref(boot->config);
	free(boot->setup_script);
	memset(boot, 0, sizeof(*boot));
}
