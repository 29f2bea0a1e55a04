/*
 * dev/stub_state.c - the stub's state and its API: runs with their OTPs,
 * faults, counters and stored files, and blobs; every public call takes
 * the stub's lock.
 */
#include "dev/stub_internal.h"

#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <sys/stat.h>
#include <unistd.h>

#include "common/io.h"

/* ------------------------------------------------------------------------
 * Small utilities
 * ------------------------------------------------------------------------ */

static int stub_random_hex(char *out, size_t nbytes)
{
	unsigned char buf[32];
	if (nbytes > sizeof(buf))
		return -1;
	size_t got = 0;
	while (got < nbytes) {
		ssize_t r = getrandom(buf + got, nbytes - got, 0);
		if (r < 0 && errno == EINTR)
			continue;
		if (r < 0)
			return -1;
		got += (size_t)r;
	}
	static const char hex[] = "0123456789abcdef";
	for (size_t i = 0; i < nbytes; i++) {
		out[2 * i] = hex[buf[i] >> 4];
		out[2 * i + 1] = hex[buf[i] & 15];
	}
	out[2 * nbytes] = 0;
	return 0;
}

int stub_name_ok(const char *s, int allow_dot)
{
	if (!s || !*s || strlen(s) >= STUB_NAME_MAX)
		return 0;
	for (const char *p = s; *p; p++) {
		char c = *p;
		int ok = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') ||
		        (c >= '0' && c <= '9') || c == '_' || c == '-' || (allow_dot && c == '.');
		if (!ok)
			return 0;
	}
	return !(allow_dot && (strcmp(s, ".") == 0 || strcmp(s, "..") == 0));
}

/* Constant-time comparison of a presented token with the expected OTP. */
int stub_token_eq(const char *given, size_t glen, const char *want)
{
	size_t wlen = strlen(want);
	unsigned char d = (unsigned char)(glen != wlen);
	for (size_t i = 0; i < wlen; i++)
		d |= (unsigned char)(want[i] ^ (i < glen ? given[i] : 0));
	return d == 0;
}

/* Replaces every ${RUNNEL_STUB_URL} in s by url; returns a malloc'd copy. */
static char *stub_subst(const char *s, const char *url)
{
	size_t plen = strlen(STUB_URL_PLACEHOLDER), ulen = strlen(url), n = 0;
	for (const char *p = s; (p = strstr(p, STUB_URL_PLACEHOLDER)); p += plen)
		n++;
	size_t len = strlen(s) + n * ulen + 1;
	char *out = malloc(len);
	if (!out)
		return NULL;
	char *o = out;
	const char *p = s, *q;
	while ((q = strstr(p, STUB_URL_PLACEHOLDER))) {
		memcpy(o, p, (size_t)(q - p));
		o += q - p;
		memcpy(o, url, ulen);
		o += ulen;
		p = q + plen;
	}
	memcpy(o, p, strlen(p) + 1);
	return out;
}

void stub_fault_clear(stub_fault_t *f)
{
	free(f->redirect);
	free(f->body);
	memset(f, 0, sizeof(*f));
}

static int stub_fault_set(stub_fault_t *f, const dev_stub_fault_t *src)
{
	stub_fault_clear(f);
	if (!src)
		return 0;
	f->delay_ms = src->delay_ms;
	f->close = src->close;
	f->status = src->status;
	if (src->redirect && !(f->redirect = strdup(src->redirect)))
		return -1;
	if (src->body && !(f->body = strdup(src->body)))
		return -1;
	return 0;
}

int stub_fault_active(const stub_fault_t *f)
{
	return f->delay_ms > 0 || f->close || f->redirect || f->status || f->body;
}

void stub_run_free(stub_run_t *r)
{
	if (!r)
		return;
	free(r->env_body);
	free(r->config_body);
	for (int i = 0; i < DEV_STUB_EP_COUNT; i++)
		stub_fault_clear(&r->faults[i]);
	for (size_t i = 0; i < r->nfiles; i++) {
		free(r->files[i].name);
		free(r->files[i].data);
	}
	free(r->files);
	free(r);
}

stub_run_t *stub_find_run(dev_stub_t *s, const char *session)
{
	for (stub_run_t *r = s->runs; r; r = r->next)
		if (strcmp(r->session, session) == 0)
			return r;
	return NULL;
}

stub_blob_t *stub_find_blob(dev_stub_t *s, const char *name)
{
	for (stub_blob_t *b = s->blobs; b; b = b->next)
		if (strcmp(b->name, name) == 0)
			return b;
	return NULL;
}

/* ------------------------------------------------------------------------
 * Runs
 * ------------------------------------------------------------------------ */

static char *stub_json_body(json_t *given, const char *const *keys, json_t *const *defs,
                            size_t ndefs, const char *url)
{
	json_t *o = given ? json_deep_copy(given) : json_object();
	if (!o)
		return NULL;
	for (size_t i = 0; i < ndefs; i++)
		if (!json_object_get(o, keys[i]))
			json_object_set(o, keys[i], defs[i]);
	char *text = json_dumps(o, JSON_COMPACT);
	json_decref(o);
	if (!text)
		return NULL;
	char *out = stub_subst(text, url);
	free(text);
	return out;
}

int dev_stub_add_run(dev_stub_t *s, const dev_stub_run_t *run, dev_stub_otps_t *out)
{
	dev_stub_run_t none;
	memset(&none, 0, sizeof(none));
	if (!run)
		run = &none;
	memset(out, 0, sizeof(*out));
	if ((run->env && !json_is_object(run->env)) || (run->config && !json_is_object(run->config)))
		return -1;
	if (run->session && (!stub_name_ok(run->session, 0) || strlen(run->session) >= sizeof(out->session)))
		return -1;
	stub_run_t *r = calloc(1, sizeof(*r));
	if (!r)
		return -1;
	if (run->session) {
		snprintf(r->session, sizeof(r->session), "%s", run->session);
	} else {
		char hex[17];
		if (stub_random_hex(hex, 8) < 0)
			goto fail;
		snprintf(r->session, sizeof(r->session), "sess_%s", hex);
	}
	for (int i = 0; i < DEV_STUB_EP_COUNT; i++) {
		char hex[33];
		if (stub_random_hex(hex, 16) < 0)
			goto fail;
		snprintf(r->otp[i], sizeof(r->otp[i]), "otp_%s", hex);
	}
	if (run->env_json) {
		r->env_body = stub_subst(run->env_json, s->url);
	} else {
		const char *keys[] = { "variables", "setup_script" };
		json_t *defs[] = { json_object(), json_null() };
		r->env_body = stub_json_body(run->env, keys, defs, 2, s->url);
		json_decref(defs[0]);
	}
	if (run->config_json) {
		r->config_body = stub_subst(run->config_json, s->url);
	} else {
		const char *keys[] = { "system_prompt", "model", "skills", "mcp_servers", "agent" };
		json_t *defs[] = { json_string("You are a helpful assistant working in a sandbox."),
			           json_string("mock"), json_array(), json_array(),
			           json_pack("{s:s,s:s}", "kind", "mock", "script", "demo") };
		r->config_body = stub_json_body(run->config, keys, defs, 5, s->url);
		for (int i = 0; i < 5; i++)
			json_decref(defs[i]);
	}
	if (!r->env_body || !r->config_body)
		goto fail;
	for (int i = 0; i < DEV_STUB_EP_COUNT; i++)
		if (stub_fault_set(&r->faults[i], &run->faults[i]) < 0)
			goto fail;
	r->results_status = run->results_status;

	pthread_mutex_lock(&s->mu);
	if (stub_find_run(s, r->session)) {
		pthread_mutex_unlock(&s->mu);
		goto fail;
	}
	r->next = s->runs;
	s->runs = r;
	pthread_mutex_unlock(&s->mu);

	snprintf(out->session, sizeof(out->session), "%s", r->session);
	snprintf(out->agent_url, sizeof(out->agent_url), "%s/ws/%s", s->url, r->session);
	snprintf(out->otp_setup, sizeof(out->otp_setup), "%s", r->otp[DEV_STUB_EP_ENV]);
	snprintf(out->otp_run, sizeof(out->otp_run), "%s", r->otp[DEV_STUB_EP_CONFIG]);
	snprintf(out->otp_upload, sizeof(out->otp_upload), "%s", r->otp[DEV_STUB_EP_RESULTS]);
	return 0;
fail:
	stub_run_free(r);
	return -1;
}

/* Fills "${NAME}" variables of a definition from dev_stub_opts_t.env_values. */
static void stub_env_values(dev_stub_t *s, json_t *env)
{
	json_t *vars = json_object_get(env, "variables");
	if (!s->env_values || !json_is_object(vars))
		return;
	for (size_t i = 0; s->env_values[i]; i++) {
		const char *e = s->env_values[i], *eq = strchr(e, '=');
		size_t nl = eq ? (size_t)(eq - e) : strlen(e);
		const char *k;
		json_t *v, *tmp;
		json_object_foreach_safe(vars, tmp, k, v)
		{
			const char *sv = json_string_value(v);
			if (!sv || strncmp(sv, "${", 2) != 0 || strlen(sv) != nl + 3 || strncmp(sv + 2, e, nl) != 0 ||
			    sv[nl + 2] != '}')
				continue;
			if (eq)
				json_object_set_new(vars, k, json_string(eq + 1));
			else
				json_object_del(vars, k);
		}
	}
}

int dev_stub_add_run_from_agent(dev_stub_t *s, const char *agent, dev_stub_otps_t *out)
{
	memset(out, 0, sizeof(*out));
	if (!s->agents_dir || !stub_name_ok(agent, 0))
		return -1;
	char *path = NULL;
	if (asprintf(&path, "%s/%s.json", s->agents_dir, agent) < 0)
		return -1;
	json_error_t err;
	json_t *def = json_load_file(path, 0, &err);
	free(path);
	if (!def || !json_is_object(def)) {
		json_decref(def);
		return -1;
	}
	json_t *env = json_object_get(def, "env"), *config = json_object_get(def, "config");
	int rc = -1;
	if ((!env || json_is_object(env)) && (!config || json_is_object(config))) {
		dev_stub_run_t run;
		memset(&run, 0, sizeof(run));
		run.env = env;
		run.config = config;
		stub_env_values(s, env);
		rc = dev_stub_add_run(s, &run, out);
	}
	json_decref(def);
	return rc;
}

int dev_stub_set_fault(dev_stub_t *s, const char *session, dev_stub_ep_t ep, const dev_stub_fault_t *f)
{
	if ((unsigned)ep >= DEV_STUB_EP_COUNT)
		return -1;
	pthread_mutex_lock(&s->mu);
	stub_run_t *r = stub_find_run(s, session);
	int rc = r ? stub_fault_set(&r->faults[ep], f) : -1;
	pthread_mutex_unlock(&s->mu);
	return rc;
}

int dev_stub_stats(dev_stub_t *s, const char *session, dev_stub_ep_t ep, dev_stub_ep_stats_t *out)
{
	memset(out, 0, sizeof(*out));
	if ((unsigned)ep >= DEV_STUB_EP_COUNT)
		return -1;
	pthread_mutex_lock(&s->mu);
	stub_run_t *r = stub_find_run(s, session);
	if (r)
		*out = r->stats[ep];
	pthread_mutex_unlock(&s->mu);
	return r ? 0 : -1;
}

int dev_stub_total_calls(dev_stub_t *s, const char *session)
{
	int n = 0;
	pthread_mutex_lock(&s->mu);
	stub_run_t *r = stub_find_run(s, session);
	for (int i = 0; r && i < DEV_STUB_EP_COUNT; i++)
		n += r->stats[i].calls;
	pthread_mutex_unlock(&s->mu);
	return n;
}

char **dev_stub_file_names(dev_stub_t *s, const char *session, size_t *n)
{
	*n = 0;
	char **v = NULL;
	pthread_mutex_lock(&s->mu);
	stub_run_t *r = stub_find_run(s, session);
	if (r && r->nfiles > 0 && (v = calloc(r->nfiles, sizeof(*v)))) {
		for (size_t i = 0; i < r->nfiles; i++) {
			if (!(v[i] = strdup(r->files[i].name))) {
				for (size_t j = 0; j < i; j++)
					free(v[j]);
				free(v);
				v = NULL;
				break;
			}
		}
		if (v)
			*n = r->nfiles;
	}
	pthread_mutex_unlock(&s->mu);
	return v;
}

int dev_stub_file_get(dev_stub_t *s, const char *session, const char *name, char **data, size_t *len)
{
	*data = NULL;
	*len = 0;
	int found = 0;
	pthread_mutex_lock(&s->mu);
	stub_run_t *r = stub_find_run(s, session);
	/* The latest upload of that name wins. */
	for (size_t i = r ? r->nfiles : 0; i-- > 0;) {
		stub_file_t *f = &r->files[i];
		if (strcmp(f->name, name) != 0)
			continue;
		if (f->data && (*data = malloc(f->len + 1))) {
			memcpy(*data, f->data, f->len + 1);
			*len = f->len;
			found = 1;
		}
		break;
	}
	pthread_mutex_unlock(&s->mu);
	return found;
}

/* ------------------------------------------------------------------------
 * Blobs
 * ------------------------------------------------------------------------ */

int dev_stub_add_blob(dev_stub_t *s, const char *name, const void *bytes, size_t len)
{
	if (!stub_name_ok(name, 1))
		return -1;
	char *copy = malloc(len ? len : 1);
	if (!copy)
		return -1;
	if (len)
		memcpy(copy, bytes, len);
	pthread_mutex_lock(&s->mu);
	stub_blob_t *b = stub_find_blob(s, name);
	if (!b && (b = calloc(1, sizeof(*b)))) {
		snprintf(b->name, sizeof(b->name), "%s", name);
		b->next = s->blobs;
		s->blobs = b;
	}
	if (b) {
		free(b->data);
		b->data = copy;
		b->len = len;
	}
	pthread_mutex_unlock(&s->mu);
	if (!b) {
		free(copy);
		return -1;
	}
	return 0;
}

int dev_stub_add_blob_file(dev_stub_t *s, const char *name, const char *path)
{
	int fd = open(path, O_RDONLY | O_CLOEXEC);
	if (fd < 0)
		return -1;
	struct stat st;
	if (fstat(fd, &st) < 0 || !S_ISREG(st.st_mode) || (uint64_t)st.st_size > (1ULL << 32)) {
		close(fd);
		return -1;
	}
	size_t len = (size_t)st.st_size;
	char *buf = malloc(len ? len : 1);
	if (!buf) {
		close(fd);
		return -1;
	}
	size_t off = rn_read_full(fd, buf, len);
	close(fd);
	int rc = off == len ? dev_stub_add_blob(s, name, buf, len) : -1;
	free(buf);
	return rc;
}

int dev_stub_set_blob_fault(dev_stub_t *s, const char *name, const dev_stub_fault_t *f)
{
	pthread_mutex_lock(&s->mu);
	stub_blob_t *b = stub_find_blob(s, name);
	int rc = b ? stub_fault_set(&b->fault, f) : -1;
	pthread_mutex_unlock(&s->mu);
	return rc;
}

int dev_stub_blob_url(const dev_stub_t *s, const char *name, char *buf, size_t size)
{
	int n = snprintf(buf, size, "%s/blobs/%s", s->url, name);
	return (n < 0 || (size_t)n >= size) ? -1 : 0;
}

int dev_stub_blob_stats(dev_stub_t *s, const char *name, dev_stub_blob_stats_t *out)
{
	memset(out, 0, sizeof(*out));
	pthread_mutex_lock(&s->mu);
	stub_blob_t *b = stub_find_blob(s, name);
	if (b)
		*out = b->stats;
	pthread_mutex_unlock(&s->mu);
	return b ? 0 : -1;
}

int dev_stub_unknown_requests(dev_stub_t *s)
{
	pthread_mutex_lock(&s->mu);
	int n = s->unknown;
	pthread_mutex_unlock(&s->mu);
	return n;
}
