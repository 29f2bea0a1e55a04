/*
 * tests/cluster/test_cluster_dev.c - `runnel dev --redis-cluster N`:
 *   1. every bad N (not a number, 0, negative, 1, 2, above 16, together
 *      with RUNNEL_REDIS_URL) is a usage error with its exact text, and
 *      nothing is started;
 *   2. `runnel dev --redis-cluster 3` brings up 3 primaries + 3 replicas,
 *      and runs submitted through the dispatcher with `runnel submit`
 *      (one run on each primary's slots) end with their result; their
 *      keys live on the primary serving their slot; `runnel tail` and
 *      `runnel status` read them back; Ctrl-C stops every node and
 *      removes the scratch directory;
 *   3. a node that dies (a replica shut down) stops the stack like any
 *      child: exit 1 with the node named, every other node stopped.
 * Part 2 goes through the dispatcher, so it needs a dispatcher that
 * accepts a cluster.
 */
#include <dirent.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <sys/wait.h>

#include "tests/cli/clirun.h"
#include "tests/support/harness.h"

#ifndef RUNNEL_BIN
#define RUNNEL_BIN "runnel"
#endif

static char *g_tmp;

/* Live (non-zombie) children of this process: with PR_SET_CHILD_SUBREAPER
 * whatever `runnel dev` left behind lands here. */
static int live_children(void)
{
	while (waitpid(-1, NULL, WNOHANG) > 0)
		;
	int n = 0;
	DIR *d = opendir("/proc");
	struct dirent *e;
	while (d && (e = readdir(d))) {
		char buf[512];
		char *text = th_file_read(th_strf("/proc/%s/stat", e->d_name), NULL);
		if (!text)
			continue;
		snprintf(buf, sizeof(buf), "%s", text);
		free(text);
		char *rp = strrchr(buf, ')');
		char state;
		int ppid;
		if (rp && sscanf(rp + 2, "%c %d", &state, &ppid) == 2 && ppid == getpid() && state != 'Z') {
			TH_NOTE("left running: %s", buf);
			n++;
		}
	}
	if (d)
		closedir(d);
	return n;
}

static int none_left(void *arg)
{
	(void)arg;
	return live_children() == 0;
}

static int dir_empty(const char *dir)
{
	DIR *d = opendir(dir);
	struct dirent *e;
	int n = 0;
	while (d && (e = readdir(d)))
		if (strcmp(e->d_name, ".") && strcmp(e->d_name, ".."))
			n++;
	if (d)
		closedir(d);
	return n == 0;
}

/* 1. The values --redis-cluster refuses, each with its message. */
static void test_bad_values(void)
{
	static const struct {
		const char *arg, *err;
	} cases[] = {
		{ "abc", "--redis-cluster: \"abc\" is not a number of primaries" },
		{ "3x", "--redis-cluster: \"3x\" is not a number of primaries" },
		{ "", "--redis-cluster: \"\" is not a number of primaries" },
		{ "0", "--redis-cluster: 0 primaries is not a cluster: Redis Cluster needs at least 3" },
		{ "-3", "--redis-cluster: -3 primaries is not a cluster: Redis Cluster needs at least 3" },
		{ "1", "--redis-cluster: 1 primaries is not a cluster: Redis Cluster needs at least 3" },
		{ "2", "--redis-cluster: 2 primaries is not a cluster: Redis Cluster needs at least 3" },
		{ "17", "--redis-cluster: 17 primaries is more than runnel dev starts (at most 16)" },
		{ "100000", "--redis-cluster: 100000 primaries is more than runnel dev starts (at most 16)" },
	};
	char *envtmp = th_strf("TMPDIR=%s", g_tmp);
	for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
		clirun_t p;
		int rc = clirun(ARGS(RUNNEL_BIN, "dev", "--redis-cluster", cases[i].arg, "--port", "0"), ARGS(envtmp),
		                20000, &p);
		char *want = th_strf("runnel dev: %s\nusage: runnel dev [options] (see runnel dev --help)\n", cases[i].err);
		TH_CHECK(rc == 2 && th_streq(p.err, want), "--redis-cluster '%s': exit %d\n%s", cases[i].arg, rc, p.err);
		TH_CHECK(p.out_len == 0, "%s", p.out);
		clirun_free(&p);
		/* The environment variable is the same option (an empty one is
		 * unset). */
		if (!cases[i].arg[0])
			continue;
		rc = clirun(ARGS(RUNNEL_BIN, "dev", "--port", "0"),
		            ARGS(envtmp, th_strf("RUNNEL_DEV_REDIS_CLUSTER=%s", cases[i].arg)), 20000, &p);
		TH_CHECK(rc == 2 && th_streq(p.err, want), "RUNNEL_DEV_REDIS_CLUSTER='%s': exit %d\n%s", cases[i].arg, rc,
		         p.err);
		clirun_free(&p);
	}
	clirun_t p;
	int rc = clirun(ARGS(RUNNEL_BIN, "dev", "--redis-cluster", "3", "--port", "0"),
	                ARGS(envtmp, "RUNNEL_REDIS_URL=redis://127.0.0.1:6379"), 20000, &p);
	TH_CHECK(rc == 2 && th_streq(p.err, "runnel dev: --redis-cluster starts its own Redis: it cannot be used with "
	                                    "--redis-url/RUNNEL_REDIS_URL\n"
	                                    "usage: runnel dev [options] (see runnel dev --help)\n"),
	         "with RUNNEL_REDIS_URL: exit %d\n%s", rc, p.err);
	clirun_free(&p);
	TH_CHECK(th_wait_until(none_left, NULL, 5000), "nothing started for a refused value");
	TH_CHECK(dir_empty(g_tmp), "no scratch for a refused value");
}

typedef struct stack {
	clirun_t proc;
	char *dispatcher, *redis, *workspace, *kafka;
	char *env_disp, *env_redis;
} stack_t_;

static int banner_done(void *arg)
{
	stack_t_ *s = arg;
	clirun_pump(&s->proc, 20);
	return strstr(s->proc.out, "runnel submit --otp-file -") || s->proc.pid <= 0 ||
	        waitpid(s->proc.pid, NULL, WNOHANG) != 0;
}

/* The value after "  <label>" on a banner line, up to the first space. */
static char *banner_field(const char *out, const char *label)
{
	const char *p = strstr(out, th_strf("\n  %s", label));
	if (!p)
		return NULL;
	p += 3 + strlen(label);
	while (*p == ' ')
		p++;
	return th_strf("%.*s", (int)strcspn(p, " \n"), p);
}

static char *mint(stack_t_ *s, const char *agent)
{
	clirun_t p;
	int rc = clirun(ARGS("/usr/bin/curl", "-sf", "-X", "POST", th_strf("%s/mint?agent=%s", s->workspace, agent)),
	                NULL, 20000, &p);
	TH_REQUIRE(rc == 0 && p.out_len > 0, "mint %s: %d %s", agent, rc, p.err);
	char *out = th_strf("%s", p.out);
	clirun_free(&p);
	return out;
}

static int run_cli(stack_t_ *s, const char *const *args, clirun_t *p)
{
	return clirun_argv(RUNNEL_BIN, NULL, args, ARGS(s->env_disp, s->env_redis), NULL, 60000, p);
}

/* A reply's text field "name:value" as a number; -1. */
static long info_num(const char *text, const char *field)
{
	const char *p = text ? strstr(text, th_strf("%s:", field)) : NULL;
	return p ? strtol(p + strlen(field) + 1, NULL, 10) : -1;
}

/* The ports of every node CLUSTER NODES lists (at most max), and in
 * *replica (when not NULL) one replica's. */
static int node_ports(rn_rcluster_t *rc, int *ports, int max, int *replica)
{
	redisReply *r = rn_rcluster_command(rc, 0, "CLUSTER NODES");
	int n = 0;
	for (const char *p = r && r->type == REDIS_REPLY_STRING ? r->str : NULL; p && *p && n < max;) {
		const char *colon = strchr(p, ':');
		const char *eol = strchr(p, '\n');
		if (colon && (!eol || colon < eol)) {
			ports[n] = (int)strtol(colon + 1, NULL, 10);
			const char *flags = strchr(colon, ' ');
			if (replica && flags && (!eol || flags < eol) && strncmp(flags + 1, "slave", 5) == 0)
				*replica = ports[n];
			n++;
		}
		p = eol ? eol + 1 : NULL;
	}
	if (r)
		freeReplyObject(r);
	return n;
}

/* HGET on one node itself, no redirect followed: the value, or NULL. */
static char *hget_on_node(const char *node, const char *key, const char *field)
{
	const char *colon = strrchr(node, ':');
	redisContext *c = colon ? redisConnect("127.0.0.1", (int)strtol(colon + 1, NULL, 10)) : NULL;
	redisReply *r = c && !c->err ? redisCommand(c, "HGET %s %s", key, field) : NULL;
	char *v = r && r->type == REDIS_REPLY_STRING ? th_strf("%s", r->str) : NULL;
	if (r)
		freeReplyObject(r);
	if (c)
		redisFree(c);
	return v;
}

/* One run id per primary: "dev-K" whose slot that primary serves. */
static int pick_runs(rn_rcluster_t *rc, char **runs, char **nodes, int want)
{
	int n = 0;
	for (int k = 0; k < 10000 && n < want; k++) {
		char *run = th_strf("dev-%d", k);
		char *key = th_strf("runnel:{%s}:state", run);
		const char *node = rn_rcluster_node_of(rc, rn_rcluster_key_slot(key, strlen(key)));
		int seen = !node[0];
		for (int j = 0; j < n && !seen; j++)
			seen = th_streq(nodes[j], node);
		if (!seen) {
			runs[n] = run;
			nodes[n] = th_strf("%s", node);
			n++;
		}
	}
	return n;
}

static void start_stack(stack_t_ *s, const char *agents)
{
	memset(s, 0, sizeof(*s));
	char *envtmp = th_strf("TMPDIR=%s", g_tmp);
	TH_REQUIRE(clirun_start(&s->proc,
	                        ARGS(RUNNEL_BIN, "dev", "--redis-cluster", "3", "--port", "0", "--sandbox", "process",
	                             "--agents", agents),
	                        ARGS(envtmp), 0, 0) == 0);
	TH_REQUIRE(th_wait_until(banner_done, s, 120000), "no banner");
	TH_REQUIRE(strstr(s->proc.out, "runnel submit --otp-file -"), "stack did not start:\n%s\n%s", s->proc.out,
	           s->proc.err);
	TH_CHECK(strstr(s->proc.out, "(Redis Cluster: 3 primaries, 3 replicas; logs/redis-node-*.log)"), "%s",
	         s->proc.out);
	s->dispatcher = banner_field(s->proc.out, "dispatcher");
	s->redis = banner_field(s->proc.out, "redis");
	s->workspace = banner_field(s->proc.out, "workspace");
	s->kafka = banner_field(s->proc.out, "kafka");
	TH_REQUIRE(s->dispatcher && s->redis && s->workspace && s->kafka, "%s", s->proc.out);
	s->env_disp = th_strf("RUNNEL_DISPATCHER_URL=%s", s->dispatcher);
	s->env_redis = th_strf("RUNNEL_REDIS_URL=%s", s->redis);
}

static int state_on_cluster(void *arg)
{
	rn_rcluster_t *rc = arg;
	redisReply *r = rn_rcluster_command(rc, 0, "HGET runnel:{dev-kcat}:state status");
	int ok = r && r->type == REDIS_REPLY_STRING;
	if (r)
		freeReplyObject(r);
	return ok;
}

/* The worker and the CLI without the dispatcher: a job produced with plain
 * kcat is claimed from the cluster, and `runnel tail` follows it there. */
static void kcat_run(stack_t_ *s, rn_rcluster_t *rc)
{
	clirun_t p;
	char type[32], code[64];
	const char *m = mint(s, "demo");
	TH_REQUIRE(m[0] == '{', "%s", m);
	char *job = th_strf("{\"v\":1,\"run_id\":\"dev-kcat\",\"prompt\":\"hello from kcat\",%s", m + 1);
	char *jf = th_strf("%s/job.json", th_tmpdir());
	TH_REQUIRE(th_file_write(jf, job, strlen(job)) == 0);
	int st = clirun(ARGS("/usr/bin/kcat", "-P", "-b", s->kafka, "-t", "runnel.jobs", "-k", "dev-kcat", jf), NULL,
	                30000, &p);
	TH_CHECK(st == 0, "kcat: %d %s", st, p.err);
	clirun_free(&p);
	TH_CHECK(th_wait_until(state_on_cluster, rc, 60000), "the kcat job was claimed");
	st = run_cli(s, ARGS("tail", "dev-kcat", "--json"), &p);
	const char *last = p.out_len > 1 ? p.out + p.out_len - 1 : p.out;
	while (last > p.out && last[-1] != '\n')
		last--;
	th_line_type(last, type, sizeof(type), code, sizeof(code));
	TH_CHECK(st == 0 && th_streq(type, "result"), "tail dev-kcat: %d %s\n%s", st, p.err, p.out);
	clirun_free(&p);
}

/* 2. The stack on a cluster, end to end.  Returns the agents folder. */
static char *test_stack(void)
{
	char *agents = th_strf("%s/agents", th_tmpdir());
	TH_REQUIRE(mkdir(agents, 0700) == 0);
	const char *demo = "{\"config\":{\"agent\":{\"kind\":\"mock\",\"script\":\"demo\"}}}";
	TH_REQUIRE(th_file_write(th_strf("%s/demo.json", agents), demo, strlen(demo)) == 0);
	stack_t_ s;
	start_stack(&s, agents);

	/* What runnel dev started: a cluster of 3 primaries, 6 nodes, every
	 * slot served. */
	rn_rcluster_t *rc = th_rcluster_open(s.redis);
	TH_REQUIRE(rc && rn_rcluster_is_cluster(rc), "%s is a cluster node", s.redis);
	redisReply *r = rn_rcluster_command(rc, 0, "CLUSTER INFO");
	TH_REQUIRE(r && r->type == REDIS_REPLY_STRING);
	TH_CHECK(strstr(r->str, "cluster_state:ok\r"), "%s", r->str);
	TH_CHECK(info_num(r->str, "cluster_size") == 3 && info_num(r->str, "cluster_known_nodes") == 6 &&
	                 info_num(r->str, "cluster_slots_ok") == 16384,
	         "%s", r->str);
	freeReplyObject(r);
	int ports[16];
	int nports = node_ports(rc, ports, 16, NULL);
	TH_CHECK(nports == 6, "CLUSTER NODES lists %d nodes", nports);

	kcat_run(&s, rc);

	/* One run per primary, through the dispatcher; each ends with its
	 * result, and its keys are on the primary serving its slot. */
	char *runs[3], *nodes[3];
	TH_REQUIRE(pick_runs(rc, runs, nodes, 3) == 3, "a run id for each primary");
	for (int i = 0; i < 3; i++) {
		clirun_t p;
		char type[32], code[64];
		char *f = th_strf("%s/m%d.json", th_tmpdir(), i);
		char *m = mint(&s, "demo");
		TH_REQUIRE(th_file_write(f, m, strlen(m)) == 0);
		int rc2 = run_cli(&s, ARGS("submit", "--otp-file", f, "--prompt", "x", "--run-id", runs[i], "--json"), &p);
		TH_CHECK(rc2 == 0, "submit %s: %d %s\n%s", runs[i], rc2, p.err, p.out);
		const char *last = p.out_len > 1 ? p.out + p.out_len - 1 : p.out;
		while (last > p.out && last[-1] != '\n')
			last--;
		th_line_type(last, type, sizeof(type), code, sizeof(code));
		TH_CHECK(th_streq(type, "result"), "%s's last line: %s", runs[i], last);
		clirun_free(&p);
		char *key = th_strf("runnel:{%s}:state", runs[i]);
		char *st = hget_on_node(nodes[i], key, "status");
		TH_CHECK(st && th_streq(st, "succeeded"), "%s on %s itself: %s", key, nodes[i], st ? st : "(none)");
		rc2 = run_cli(&s, ARGS("status", runs[i], "--json"), &p);
		TH_CHECK(rc2 == 0 && strstr(p.out, "\"status\":\"succeeded\""), "status %s: %d %s", runs[i], rc2, p.out);
		clirun_free(&p);
		rc2 = run_cli(&s, ARGS("tail", runs[i], "--json"), &p);
		TH_CHECK(rc2 == 0 && strstr(p.out, "\"type\":\"result\""), "tail %s: %d %s", runs[i], rc2, p.out);
		clirun_free(&p);
	}
	TH_NOTE("runs %s, %s, %s on %s, %s, %s", runs[0], runs[1], runs[2], nodes[0], nodes[1], nodes[2]);
	rn_rcluster_free(rc);

	/* Ctrl-C: exit 0, every node stopped, nothing left, scratch removed. */
	clirun_signal(&s.proc, SIGINT);
	int rc3 = clirun_wait(&s.proc, 60000);
	TH_CHECK(rc3 == 0, "runnel dev after SIGINT: %d\n%s", rc3, s.proc.err);
	TH_CHECK(th_wait_until(none_left, NULL, 5000), "processes left after Ctrl-C");
	TH_CHECK(dir_empty(g_tmp), "scratch left in %s", g_tmp);
	for (int i = 0; i < nports; i++)
		TH_CHECK(!th_port_open(ports[i]), "node on port %d still answers", ports[i]);
	clirun_free(&s.proc);
	return agents;
}

typedef struct {
	rn_rcluster_t *rc;
	int ports[16], n, replica;
} nodes_view_t;

static int six_with_replica(void *arg)
{
	nodes_view_t *v = arg;
	v->replica = 0;
	v->n = node_ports(v->rc, v->ports, 16, &v->replica);
	return v->n == 6 && v->replica > 0;
}

/* 3. A node that goes away stops the stack, and the others with it. */
static void test_node_dies(const char *agents)
{
	stack_t_ s;
	start_stack(&s, agents);
	rn_rcluster_t *rc = th_rcluster_open(s.redis);
	TH_REQUIRE(rc, "%s", s.redis);
	/* The replicas' roles reach the node asked by gossip. */
	nodes_view_t v = { .rc = rc };
	th_wait_until(six_with_replica, &v, 10000);
	rn_rcluster_free(rc);
	int nports = v.n, replica = v.replica, *ports = v.ports;
	TH_REQUIRE(nports == 6 && replica > 0, "6 nodes, one of them a replica (%d)", nports);
	redisContext *c = redisConnect("127.0.0.1", replica);
	TH_REQUIRE(c && !c->err, "replica on %d", replica);
	redisReply *r = redisCommand(c, "SHUTDOWN NOSAVE");
	if (r)
		freeReplyObject(r);
	redisFree(c);
	int rc3 = clirun_wait(&s.proc, 60000);
	TH_CHECK(rc3 == 1, "runnel dev after a node died: %d\n%s", rc3, s.proc.err);
	TH_CHECK(strstr(s.proc.err, "runnel dev: Redis Cluster node redis-node-") && strstr(s.proc.err, " exited (exit 0)"),
	         "%s", s.proc.err);
	TH_CHECK(th_wait_until(none_left, NULL, 5000), "processes left after a node died");
	TH_CHECK(dir_empty(g_tmp), "scratch left in %s", g_tmp);
	for (int i = 0; i < nports; i++)
		TH_CHECK(!th_port_open(ports[i]), "node on port %d still answers", ports[i]);
	clirun_free(&s.proc);
}

int main(void)
{
	th_init("cluster_dev");
	TH_REQUIRE(prctl(PR_SET_CHILD_SUBREAPER, 1) == 0);
	g_tmp = th_strf("%s/devtmp", th_tmpdir());
	/* Searchable: a root worker's sandboxes run as another uid. */
	TH_REQUIRE(mkdir(g_tmp, 0711) == 0 && chmod(g_tmp, 0711) == 0);
	test_bad_values();
	char *agents = test_stack();
	test_node_dies(agents);
	return th_done();
}
