/*
 * tests/support/harness_cluster.c - a real Redis Cluster for tests: nodes
 * started with th_redis_start (so they are registered children, die with
 * the test and keep their dirs until exit), joined by redis-cli --cluster
 * create, and readiness read from every node (see harness.h).
 */
#include "tests/support/harness.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

static void thc_sleep_ms(int ms)
{
	struct timespec ts = { ms / 1000, (long)(ms % 1000) * 1000000L };
	while (nanosleep(&ts, &ts) != 0)
		;
}

/* redis-cli next to the redis-server the harness runs, else on PATH. */
static const char *thc_cli_binary(void)
{
	if (access("/usr/bin/redis-cli", X_OK) == 0)
		return "/usr/bin/redis-cli";
	return "redis-cli";
}

static int thc_running(const th_cluster_t *cl, int i)
{
	return i >= 0 && i < cl->n && cl->node[i].pid > 0;
}

/* A "field:value" line of an INFO-like text as a number; -1 when absent. */
static long thc_info_num(const char *text, const char *field)
{
	size_t fl = strlen(field);
	for (const char *p = text; p && *p;) {
		if (strncmp(p, field, fl) == 0 && p[fl] == ':')
			return strtol(p + fl + 1, NULL, 10);
		p = strchr(p, '\n');
		if (p)
			p++;
	}
	return -1;
}

/* 1 when "field:value" is a line of text. */
static int thc_info_is(const char *text, const char *field, const char *value)
{
	char want[128];
	snprintf(want, sizeof(want), "%s:%s\r", field, value);
	return !!strstr(text, want);
}

static redisReply *thc_cmd(redisContext *c, const char *cmd)
{
	redisReply *r = redisCommand(c, cmd);
	if (r && r->type == REDIS_REPLY_ERROR) {
		freeReplyObject(r);
		return NULL;
	}
	return r;
}

/* The index of the node listening on port; -1. */
static int thc_index_of_port(const th_cluster_t *cl, long port)
{
	for (int i = 0; i < cl->n; i++)
		if (cl->node[i].port == port)
			return i;
	return -1;
}

/*
 * Node i's view: owner[slot] = index of the primary serving it, or -1.
 * 0, or -1 when the node cannot be asked.
 */
static int thc_slot_view(th_cluster_t *cl, int i, int owner[16384])
{
	for (int s = 0; s < 16384; s++)
		owner[s] = -1;
	redisContext *c = th_cluster_connect(cl, i);
	if (!c)
		return -1;
	redisReply *r = thc_cmd(c, "CLUSTER SLOTS");
	redisFree(c);
	if (!r || r->type != REDIS_REPLY_ARRAY) {
		if (r)
			freeReplyObject(r);
		return -1;
	}
	for (size_t k = 0; k < r->elements; k++) {
		const redisReply *e = r->element[k];
		if (e->type != REDIS_REPLY_ARRAY || e->elements < 3 || e->element[2]->type != REDIS_REPLY_ARRAY ||
		    e->element[2]->elements < 2)
			continue;
		int who = thc_index_of_port(cl, e->element[2]->element[1]->integer);
		for (long long s = e->element[0]->integer; s <= e->element[1]->integer && s < 16384; s++)
			if (s >= 0)
				owner[s] = who;
	}
	freeReplyObject(r);
	return 0;
}

/* One look at the whole cluster for th_cluster_wait_ok; prints why not
 * when loud. */
static int thc_ok_once(th_cluster_t *cl, int loud)
{
	static int first[16384], view[16384];
	int have_first = 0;
	for (int i = 0; i < cl->n; i++) {
		if (!thc_running(cl, i))
			continue;
		redisContext *c = th_cluster_connect(cl, i);
		if (!c)
			return 0;
		redisReply *info = thc_cmd(c, "CLUSTER INFO");
		redisReply *repl = thc_cmd(c, "INFO replication");
		redisFree(c);
		int ok = info && repl && info->type == REDIS_REPLY_STRING && repl->type == REDIS_REPLY_STRING;
		if (ok && !thc_info_is(info->str, "cluster_state", "ok")) {
			if (loud)
				fprintf(stderr, "# cluster: node %d (port %d) not ok\n", i, cl->node[i].port);
			ok = 0;
		}
		if (ok && thc_info_num(info->str, "cluster_known_nodes") != cl->n) {
			if (loud)
				fprintf(stderr, "# cluster: node %d knows %ld of %d nodes\n", i,
				        thc_info_num(info->str, "cluster_known_nodes"), cl->n);
			ok = 0;
		}
		if (ok && thc_info_is(repl->str, "role", "slave")) {
			long mport = thc_info_num(repl->str, "master_port");
			int m = thc_index_of_port(cl, mport);
			if (thc_running(cl, m) && !thc_info_is(repl->str, "master_link_status", "up")) {
				if (loud)
					fprintf(stderr, "# cluster: replica %d's link to %d is down\n", i, m);
				ok = 0;
			}
		}
		if (info)
			freeReplyObject(info);
		if (repl)
			freeReplyObject(repl);
		if (!ok)
			return 0;
		if (thc_slot_view(cl, i, have_first ? view : first) < 0)
			return 0;
		const int *v = have_first ? view : first;
		for (int s = 0; s < 16384; s++) {
			if (!thc_running(cl, v[s]) || (have_first && v[s] != first[s])) {
				if (loud)
					fprintf(stderr, "# cluster: node %d maps slot %d to %d%s\n", i, s, v[s],
					        thc_running(cl, v[s]) ? " (others disagree)" : " (not running)");
				return 0;
			}
		}
		have_first = 1;
	}
	return have_first;
}

int th_cluster_wait_ok(th_cluster_t *cl, int timeout_ms)
{
	int64_t deadline = th_now_ms() + timeout_ms;
	int step = 10;
	for (;;) {
		if (thc_ok_once(cl, 0))
			return 1;
		if (th_now_ms() > deadline) {
			thc_ok_once(cl, 1);
			fprintf(stderr, "# cluster: not ok after %d ms\n", timeout_ms);
			return 0;
		}
		thc_sleep_ms(step);
		step = step * 2 > 100 ? 100 : step * 2;
	}
}

int th_cluster_cli(th_cluster_t *cl, const char *log_path, int timeout_ms, ...)
{
	char *argv[64];
	int n = 0;
	argv[n++] = (char *)thc_cli_binary();
	va_list ap;
	va_start(ap, timeout_ms);
	for (const char *a; (a = va_arg(ap, const char *)) && n < 63;)
		argv[n++] = (char *)a;
	va_end(ap);
	argv[n] = NULL;
	/* REDISCLI_AUTH keeps the password off the command line. */
	const char *env[] = { cl->password[0] ? th_strf("REDISCLI_AUTH=%s", cl->password) : NULL, NULL };
	return th_run(argv, env, log_path, timeout_ms);
}

/* The password of the last cluster started, for th_rc_for's handles. */
static char thc_password[128];

int th_cluster_start(th_cluster_t *cl, int primaries, int replicas, const char *extra_config_lines)
{
	memset(cl, 0, sizeof(*cl));
	int n = primaries * (1 + replicas);
	if (primaries < 1 || replicas < 0 || n > TH_CLUSTER_MAX_NODES || (primaries < 3)) {
		fprintf(stderr, "# cluster: %d primaries with %d replicas each is not a cluster we start\n",
		        primaries, replicas);
		return -1;
	}
	const char *extra = extra_config_lines ? extra_config_lines : "";
	for (const char *l = extra; *l;) {
		const char *nl = strchr(l, '\n');
		size_t len = nl ? (size_t)(nl - l) : strlen(l);
		if (len > 12 && strncmp(l, "requirepass ", 12) == 0 && len - 12 < sizeof(cl->password)) {
			memcpy(cl->password, l + 12, len - 12);
			cl->password[len - 12] = 0;
			snprintf(thc_password, sizeof(thc_password), "%s", cl->password);
		}
		l = nl ? nl + 1 : l + len;
	}
	for (int i = 0; i < n; i++) {
		/* A bus port taken meanwhile makes the node exit; try others. */
		int started = 0;
		for (int attempt = 0; attempt < 3 && !started; attempt++) {
			cl->bus_port[i] = th_free_port();
			if (cl->bus_port[i] < 0)
				return -1;
			const char *conf = th_strf("cluster-enabled yes\n"
			                           "cluster-port %d\n"
			                           "cluster-node-timeout 2000\n"
			                           "cluster-config-file nodes.conf\n"
			                           "appendonly yes\n"
			                           "%s"
			                           "%s",
			                           cl->bus_port[i],
			                           cl->password[0] ? th_strf("masterauth %s\n", cl->password) : "",
			                           extra);
			started = th_redis_start(&cl->node[i], conf) == 0;
		}
		if (!started) {
			fprintf(stderr, "# cluster: node %d did not start\n", i);
			return -1;
		}
		cl->n = i + 1;
	}
	snprintf(cl->url, sizeof(cl->url), "%s", cl->node[0].url);

	char *args[TH_CLUSTER_MAX_NODES + 8];
	int a = 0;
	args[a++] = (char *)thc_cli_binary();
	args[a++] = "--cluster";
	args[a++] = "create";
	for (int i = 0; i < n; i++)
		args[a++] = th_strf("127.0.0.1:%d", cl->node[i].port);
	args[a++] = "--cluster-replicas";
	args[a++] = th_strf("%d", replicas);
	args[a++] = "--cluster-yes";
	args[a] = NULL;
	const char *log = th_strf("%s/cluster-create.log", cl->node[0].dir);
	const char *env[] = { cl->password[0] ? th_strf("REDISCLI_AUTH=%s", cl->password) : NULL, NULL };
	int st = th_run(args, env, log, 60000);
	if (st != 0) {
		char *out = th_file_read(log, NULL);
		fprintf(stderr, "# cluster: redis-cli --cluster create exited %d:\n%s\n", st, out ? out : "");
		free(out);
		return -1;
	}
	if (!th_cluster_wait_ok(cl, 30000))
		return -1;
	return 0;
}

int th_cluster_primary_of(th_cluster_t *cl, int slot)
{
	static int owner[16384];
	for (int i = 0; i < cl->n; i++) {
		if (!thc_running(cl, i))
			continue;
		if (thc_slot_view(cl, i, owner) == 0)
			return slot >= 0 && slot < 16384 ? owner[slot] : -1;
	}
	return -1;
}

int th_cluster_replica_of(th_cluster_t *cl, int primary)
{
	for (int i = 0; i < cl->n; i++) {
		if (i == primary || !thc_running(cl, i))
			continue;
		redisContext *c = th_cluster_connect(cl, i);
		if (!c)
			continue;
		redisReply *r = thc_cmd(c, "INFO replication");
		redisFree(c);
		int hit = r && r->type == REDIS_REPLY_STRING && thc_info_is(r->str, "role", "slave") &&
		        thc_info_num(r->str, "master_port") == cl->node[primary].port;
		if (r)
			freeReplyObject(r);
		if (hit)
			return i;
	}
	return -1;
}

redisContext *th_cluster_connect(th_cluster_t *cl, int i)
{
	if (!thc_running(cl, i))
		return NULL;
	return th_redis_connect(&cl->node[i]);
}

int th_cluster_kill(th_cluster_t *cl, int i)
{
	if (i < 0 || i >= cl->n)
		return -1;
	return th_redis_kill(&cl->node[i]);
}

rn_rcluster_t *th_rcluster_open(const char *url)
{
	rn_redis_url_t u;
	char err[256];
	if (rn_redis_url_parse(url, &u, err, sizeof(err)) < 0) {
		fprintf(stderr, "# rcluster: %s\n", err);
		return NULL;
	}
	rn_rcluster_t *rc = rn_rcluster_open(&u, NULL, err, sizeof(err));
	if (!rc)
		fprintf(stderr, "# rcluster: open 127.0.0.1:%d: %s\n", u.port, err);
	return rc;
}

/* th_rc_for's cache; NULL (not cached) when the node does not answer. */
static rn_rcluster_t *thc_rc_try(const redisContext *c)
{
	static struct {
		int port;
		rn_rcluster_t *rc;
	} cache[64];
	int port = c->tcp.port;
	for (size_t i = 0; i < sizeof(cache) / sizeof(cache[0]); i++) {
		if (cache[i].rc && cache[i].port == port)
			return cache[i].rc;
		if (!cache[i].rc) {
			cache[i].rc = th_rcluster_open(thc_password[0] ? th_strf("redis://:%s@127.0.0.1:%d", thc_password, port)
			                                               : th_strf("redis://127.0.0.1:%d", port));
			cache[i].port = port;
			return cache[i].rc;
		}
	}
	TH_REQUIRE(0, "too many rcluster handles");
	return NULL;
}

rn_rcluster_t *th_rc_for(const redisContext *c)
{
	rn_rcluster_t *rc = thc_rc_try(c);
	TH_REQUIRE(rc, "an rcluster handle for port %d", c->tcp.port);
	return rc;
}

int th_cluster_mode(void)
{
	const char *mode = getenv("RUNNEL_TEST_REDIS");
	return mode && strcmp(mode, "cluster") == 0;
}

redisReply *th_vcmd(redisContext *c, const char *fmt, va_list ap)
{
	/* A context whose node is down (killed by the test): it fails as it
	 * did, and the caller retries its own way. */
	rn_rcluster_t *rc = th_cluster_mode() ? thc_rc_try(c) : NULL;
	if (!rc)
		return redisvCommand(c, fmt, ap);
	char *cmd = NULL;
	int len = redisvFormatCommand(&cmd, fmt, ap);
	if (len < 0)
		return NULL;
	/* Split the RESP array back into arguments for the router. */
	int argc = 0;
	const char *p = cmd;
	TH_REQUIRE(*p == '*', "formatted command");
	argc = (int)strtol(p + 1, (char **)&p, 10);
	const char **argv = calloc((size_t)argc, sizeof(*argv));
	size_t *lens = calloc((size_t)argc, sizeof(*lens));
	TH_REQUIRE(argv && lens, "out of memory");
	p += 2;
	for (int i = 0; i < argc; i++) {
		lens[i] = (size_t)strtol(p + 1, (char **)&p, 10);
		p += 2;
		argv[i] = p;
		p += lens[i] + 2;
	}
	redisReply *r = rn_rcluster_argv(rc, 0, argc, argv, lens);
	free(argv);
	free(lens);
	free(cmd);
	return r;
}

redisReply *th_cmd(redisContext *c, const char *fmt, ...)
{
	va_list ap;
	va_start(ap, fmt);
	redisReply *r = th_vcmd(c, fmt, ap);
	va_end(ap);
	return r;
}
