/*
 * cli/dev.c - `runnel dev`: the whole stack on one machine with nothing to
 * configure.  In this process: librdkafka's mock cluster (the jobs topic and
 * its DLQ; --kafka uses an external broker instead and creates the topics
 * there when missing) and the workspace stub serving examples/agents.  As children:
 * a private redis-server (unless RUNNEL_REDIS_URL is set; --redis-cluster
 * N: a Redis Cluster of N primaries and N replicas, cli/devcluster.c), the real
 * runnel-dispatcher and runnel-worker.  --demo submits the mock demo agent
 * and shows it live; Ctrl-C stops everything that was started and removes
 * the scratch directory.
 */
#include <errno.h>
#include <signal.h>
#include <stdarg.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>
#include <sys/stat.h>
#include <sys/wait.h>

#include <hiredis/hiredis.h>
#include <jansson.h>
#include <librdkafka/rdkafka.h>
#include <librdkafka/rdkafka_mock.h>
#include <sodium.h>

#include "args.h"
#include "cli.h"
#include "common/util.h"
#include "devcluster.h"
#include "devproc.h"
#include "http.h"
#include "interrupt.h"
#include "proto/job.h"
#include "proto/keys.h"
#include "rconn.h"
#include "tail.h"

#ifdef CLI_HAVE_DEVSTUB
#include "dev/stub.h"
#endif

#ifndef RUNNEL_SOURCE_DIR
#define RUNNEL_SOURCE_DIR ""
#endif

#define DEV_READY_MS         60000 /* dispatcher /readyz deadline */
#define DEV_REDIS_READY_MS   10000
#define DEV_CLUSTER_READY_MS 60000 /* 2N nodes up, created, ok everywhere */
#define DEV_STOP_GRACE_MS    8000  /* worker drain (RUNNEL_DRAIN_SEC=3) + margin */
#define DEV_PARTITIONS       4

static struct {
	int demo;
	int once;
	long port;
	long stub_port;
	char *agents;
	char *agent;
	char *prompt;
	char *redis_url;
	char *redis_server;
	char *worker_bin;
	char *dispatcher_bin;
	char *sandbox;
	char *prefix;
	char *jobs_topic;
	int keep;
	int with_agents;
	char *kafka;         /* external bootstrap servers, NULL = the mock cluster */
	char *redis_cluster; /* N primaries as given, NULL = one redis-server */
} g_opt;

static const rn_opt_t dev_opts[] = {
	{ "demo", 0, "RUNNEL_DEV_DEMO", RN_OPT_BOOL, &g_opt.demo, "false", NULL,
	  "once up, submit the demo agent and show the run live", 0, 0 },
	{ "once", 0, "RUNNEL_DEV_ONCE", RN_OPT_BOOL, &g_opt.once, "false", NULL,
	  "with --demo: stop everything after the demo and exit with its status", 0, 0 },
	{ "port", 0, "RUNNEL_DEV_PORT", RN_OPT_INT, &g_opt.port, "8080", "PORT",
	  "dispatcher port on 127.0.0.1 (0: any free port)", 0, 65535 },
	{ "stub-port", 0, "RUNNEL_DEV_STUB_PORT", RN_OPT_INT, &g_opt.stub_port, "0", "PORT",
	  "workspace stub port on 127.0.0.1 (0: any free port)", 0, 65535 },
	{ "agents", 0, "RUNNEL_DEV_AGENTS", RN_OPT_STR, &g_opt.agents, NULL, "DIR",
	  "folder of agent definitions NAME.json (default: examples/agents of the source tree)", 0, 0 },
	{ "agent", 0, "RUNNEL_DEV_AGENT", RN_OPT_STR, &g_opt.agent, "demo", "NAME",
	  "agent definition the demo and the printed curl line use", 0, 0 },
	{ "prompt", 0, "RUNNEL_DEV_PROMPT", RN_OPT_STR, &g_opt.prompt, "Add an inference node", "TEXT",
	  "prompt of the demo run", 0, 0 },
	CLI_OPT_REDIS_URL(&g_opt.redis_url, NULL, "use this Redis instead of starting one"),
	{ "redis-cluster", 0, "RUNNEL_DEV_REDIS_CLUSTER", RN_OPT_STR, &g_opt.redis_cluster, NULL, "N",
	  "start a local Redis Cluster of N primaries (N >= 3, at most 16), one replica each, instead of one "
	  "redis-server",
	  0, 0 },
	{ "redis-server", 0, "RUNNEL_REDIS_SERVER", RN_OPT_STR, &g_opt.redis_server, "redis-server", "PATH",
	  "redis-server binary to start", 0, 0 },
	{ "worker-bin", 0, "RUNNEL_WORKER_BIN", RN_OPT_STR, &g_opt.worker_bin, NULL, "PATH",
	  "runnel-worker binary (default: next to runnel, or the build tree's worker/)", 0, 0 },
	{ "dispatcher-bin", 0, "RUNNEL_DISPATCHER_BIN", RN_OPT_STR, &g_opt.dispatcher_bin, NULL, "PATH",
	  "runnel-dispatcher binary (default: next to runnel, or the build tree's dispatcher/)", 0, 0 },
	{ "sandbox", 0, "RUNNEL_SANDBOX", RN_OPT_STR, &g_opt.sandbox, NULL, "bwrap|process",
	  "worker sandbox (default: bwrap when it works here, else process with a warning)", 0, 0 },
	CLI_OPT_KEY_PREFIX(&g_opt.prefix),
	{ "jobs-topic", 0, "RUNNEL_JOBS_TOPIC", RN_OPT_STR, &g_opt.jobs_topic, "runnel.jobs", "TOPIC",
	  "job topic (the DLQ is <topic>.dlq)", 0, 0 },
	{ "keep", 0, "RUNNEL_DEV_KEEP", RN_OPT_BOOL, &g_opt.keep, "false", NULL,
	  "keep the scratch directory (logs, redis, run dirs) on exit", 0, 0 },
	{ "with-agents", 0, "RUNNEL_DEV_WITH_AGENTS", RN_OPT_BOOL, &g_opt.with_agents, "false", NULL,
	  "install the pinned ACP agents (Claude Code, Codex) into the build tree (agents/install.sh) "
	  "and give them to the worker (RUNNEL_ACP_PREFIX), with one warm claude and one warm codex agent "
	  "(RUNNEL_WARM_AGENTS) when it can keep them",
	  0, 0 },
	{ "kafka", 0, "RUNNEL_DEV_KAFKA", RN_OPT_STR, &g_opt.kafka, NULL, "HOST:PORT",
	  "use this Kafka broker (bootstrap list) instead of the in-process mock cluster", 0, 0 },
	RN_OPT_END,
};

static const cli_verb_t dev_verb = {
	.name = "dev",
	.synopsis = "[options]",
	.summary = "Run the whole stack locally: in-process Kafka (librdkafka mock cluster, or an\n"
	           "external broker with --kafka), a private redis-server (or a Redis Cluster with\n"
	           "--redis-cluster N), runnel-dispatcher, runnel-worker and the workspace stub.",
	.epilog = "Ctrl-C (or SIGTERM) stops everything it started and removes its scratch directory.\n"
	          "exit status: 0 stopped by Ctrl-C; with --demo --once the demo's status (0 result,\n"
	          "1 error); 1 a component failed to start or died; 2 usage\n",
	.pos_name = NULL,
	.opts = dev_opts,
	.pos_min = 0,
	.pos_max = 0,
};

#ifndef CLI_HAVE_DEVSTUB

int cli_dev_main(int argc, char **argv)
{
	cli_args_t a;
	int rc = cli_args_parse(&dev_verb, argc, argv, &a);
	rn_conf_free(dev_opts);
	if (rc != 0)
		return rc > 0 ? CLI_EXIT_OK : CLI_EXIT_USAGE;
	fprintf(stderr, "runnel dev: this runnel was built without the workspace stub (dev/)\n");
	return CLI_EXIT_RUN_ERROR;
}

#else

typedef struct dev_stack {
	char dir[PATH_MAX]; /* scratch: logs/, redis/, work/, results/ */
	rd_kafka_t *mock_rk;
	rd_kafka_mock_cluster_t *mock;
	char bootstrap[256];
	cli_proc_t redis, dispatcher, worker;
	int cluster_n;          /* --redis-cluster N, 0 = one redis-server */
	dev_cluster_t *cluster; /* the nodes, when cluster_n */
	char redis_url[300];
	dev_stub_t *stub;
	char agents[PATH_MAX];
	char dispatcher_url[96];
	char worker_bin[PATH_MAX], dispatcher_bin[PATH_MAX];
	const char *sandbox;
	/* --with-agents: "RUNNEL_WARM_AGENTS=..." this process gives the
	 * worker, or "" (none, or the caller's own setting, which it inherits). */
	char warm_env[64];
	/* The caller's provider keys for the stub ("NAME=value", or "NAME"
	 * when unset), taken out of the environment before any child starts;
	 * wiped at the end. */
	char *keys[3];
} dev_stack_t;

static const char *const dev_key_names[] = { "ANTHROPIC_API_KEY", "OPENAI_API_KEY" };

/* Moves the provider keys from the environment into s->keys: the stub
 * serves them to the runs that name them, and no child (Redis, the
 * dispatcher, the worker) inherits them.  0 or -1 (out of memory). */
static int take_keys(dev_stack_t *s)
{
	for (int i = 0; i < 2; i++) {
		char *v = getenv(dev_key_names[i]);
		if (v && *v ? asprintf(&s->keys[i], "%s=%s", dev_key_names[i], v) < 0
		            : !(s->keys[i] = strdup(dev_key_names[i]))) {
			s->keys[i] = NULL;
			return -1;
		}
		if (v)
			explicit_bzero(v, strlen(v));
		unsetenv(dev_key_names[i]);
	}
	return 0;
}

static void free_keys(dev_stack_t *s)
{
	for (int i = 0; i < 2; i++) {
		if (s->keys[i])
			explicit_bzero(s->keys[i], strlen(s->keys[i]));
		free(s->keys[i]);
		s->keys[i] = NULL;
	}
}

static void say(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
static void say(const char *fmt, ...)
{
	va_list ap;
	fputs("runnel dev: ", stderr);
	va_start(ap, fmt);
	vfprintf(stderr, fmt, ap);
	va_end(ap);
	fputc('\n', stderr);
}

static int is_dir(const char *p)
{
	struct stat st;
	return stat(p, &st) == 0 && S_ISDIR(st.st_mode);
}

static int is_exec(const char *p)
{
	struct stat st;
	return stat(p, &st) == 0 && S_ISREG(st.st_mode) && access(p, X_OK) == 0;
}

/* Directory of this executable. */
static void self_dir(char *buf, size_t size)
{
	char exe[PATH_MAX];
	ssize_t n = readlink("/proc/self/exe", exe, sizeof(exe) - 1);
	if (n <= 0) {
		snprintf(buf, size, ".");
		return;
	}
	exe[n] = '\0';
	char *slash = strrchr(exe, '/');
	if (slash)
		*slash = '\0';
	snprintf(buf, size, "%s", exe);
}

/*
 * Finds a sibling program: the override, next to runnel, the build tree's
 * <sub>/ (build/cli/runnel -> build/<sub>/<name>), an installed ../bin or
 * ../libexec, then PATH.
 */
static int find_program(const char *override, const char *sub, const char *name, char *out, size_t size)
{
	char self[PATH_MAX], cand[PATH_MAX + 64];

	if (override && *override) {
		if (!is_exec(override))
			return -1;
		snprintf(out, size, "%s", override);
		return 0;
	}
	self_dir(self, sizeof(self));
	for (int i = 0; i < 4; i++) {
		switch (i) {
		case 0: snprintf(cand, sizeof(cand), "%s/%s", self, name); break;
		case 1: snprintf(cand, sizeof(cand), "%s/../%s/%s", self, sub, name); break;
		case 2: snprintf(cand, sizeof(cand), "%s/../bin/%s", self, name); break;
		default: snprintf(cand, sizeof(cand), "%s/../libexec/runnel/%s", self, name); break;
		}
		if (is_exec(cand)) {
			char *r = realpath(cand, NULL);
			int n = snprintf(out, size, "%s", r ? r : cand);
			free(r);
			return n > 0 && (size_t)n < size ? 0 : -1;
		}
	}
	return cli_which(name, out, size);
}

static int find_agents(char *out, size_t size)
{
	char self[PATH_MAX], cand[PATH_MAX + 64];

	if (g_opt.agents) {
		if (!is_dir(g_opt.agents))
			return -1;
		snprintf(out, size, "%s", g_opt.agents);
		return 0;
	}
	self_dir(self, sizeof(self));
	const char *const rel[] = { "../examples/agents", "../../examples/agents", "../share/runnel/agents", NULL };
	for (int i = 0; rel[i]; i++) {
		snprintf(cand, sizeof(cand), "%s/%s", self, rel[i]);
		if (is_dir(cand))
			goto found;
	}
	snprintf(cand, sizeof(cand), "%s/examples/agents", RUNNEL_SOURCE_DIR);
	if (RUNNEL_SOURCE_DIR[0] && is_dir(cand))
		goto found;
	snprintf(cand, sizeof(cand), "examples/agents");
	if (is_dir(cand))
		goto found;
	return -1;
found:;
	char *r = realpath(cand, NULL);
	int n = snprintf(out, size, "%s", r ? r : cand);
	free(r);
	return n > 0 && (size_t)n < size ? 0 : -1;
}

/*
 * --with-agents: runs agents/install.sh of the source tree into
 * RUNNEL_ACP_PREFIX, or the build tree's agents/ beside cli/ (where the
 * acp tests install them too, so a second start returns at once), and
 * sets RUNNEL_ACP_PREFIX for the worker, which inherits it.  The install's
 * own output (npm's) goes to the terminal.
 */
static int install_agents(void)
{
	char self[PATH_MAX], prefix[PATH_MAX], script[PATH_MAX];
	const char *given = getenv("RUNNEL_ACP_PREFIX");
	if (given && *given) {
		snprintf(prefix, sizeof(prefix), "%s", given);
	} else {
		self_dir(self, sizeof(self));
		char *slash = strrchr(self, '/');
		if (slash)
			*slash = '\0';
		snprintf(prefix, sizeof(prefix), "%s/agents", self);
	}
	snprintf(script, sizeof(script), "%s/agents/install.sh", RUNNEL_SOURCE_DIR);
	if (!RUNNEL_SOURCE_DIR[0] || access(script, X_OK) != 0) {
		say("--with-agents needs the source tree's agents/install.sh (not found at %s)", script);
		return -1;
	}
	say("installing the ACP agents into %s (agents/install.sh)", prefix);
	pid_t pid = fork();
	if (pid < 0) {
		say("cannot start agents/install.sh: %s", strerror(errno));
		return -1;
	}
	if (pid == 0) {
		dup2(2, 1); /* npm's progress beside runnel dev's own lines */
		char *const argv[] = { script, prefix, NULL };
		execv(script, argv);
		_exit(127);
	}
	int st = 0;
	while (waitpid(pid, &st, 0) < 0 && errno == EINTR)
		;
	if (!WIFEXITED(st) || WEXITSTATUS(st) != 0) {
		say("agents/install.sh %s failed (see its output above)", prefix);
		return -1;
	}
	char *real = realpath(prefix, NULL);
	int rc = real ? setenv("RUNNEL_ACP_PREFIX", real, 1) : -1;
	free(real);
	if (rc < 0) {
		say("cannot use %s: %s", prefix, strerror(errno));
		return -1;
	}
	if (!getenv("ANTHROPIC_API_KEY") && !getenv("OPENAI_API_KEY"))
		say("note: neither ANTHROPIC_API_KEY nor OPENAI_API_KEY is set here; "
		    "claude and codex runs will have no model key");
	return 0;
}

/* 0 when bwrap can build a sandbox here (user namespaces allowed, etc). */
static int bwrap_works(void)
{
	char path[PATH_MAX], err[256];
	if (cli_which("bwrap", path, sizeof(path)) < 0)
		return -1;
	char *argv[] = { path, "--unshare-user", "--unshare-pid", "--unshare-net", "--unshare-ipc",
		         "--unshare-uts", "--die-with-parent", "--ro-bind", "/", "/", "--proc", "/proc",
		         "--dev", "/dev", "true", NULL };
	char **env = cli_env_build(NULL);
	cli_proc_t p;
	int rc = cli_proc_spawn(&p, "bwrap", argv, env, "/dev/null", err, sizeof(err));
	cli_env_free(env);
	if (rc < 0)
		return -1;
	int64_t end = rn_mono_ms() + 5000;
	while (cli_proc_alive(&p) && rn_mono_ms() < end) {
		struct timespec ts = { 0, 10 * 1000000L };
		nanosleep(&ts, NULL);
	}
	if (p.pid > 0) {
		cli_proc_stop(&p, SIGKILL, 0);
		return -1;
	}
	return WIFEXITED(p.status) && WEXITSTATUS(p.status) == 0 ? 0 : -1;
}

/* 1 when the program `name` is next to the worker binary (where the
 * worker looks for it), or given in env_name. */
static int beside_worker(const dev_stack_t *s, const char *env_name, const char *name)
{
	const char *given = getenv(env_name);
	if (given && *given)
		return 1;
	char path[PATH_MAX + 64];
	snprintf(path, sizeof(path), "%s", s->worker_bin);
	char *slash = strrchr(path, '/');
	if (!slash)
		return 0;
	snprintf(slash + 1, sizeof(path) - (size_t)(slash + 1 - path), "%s", name);
	return is_exec(path);
}

/*
 * --with-agents gives a newcomer warm agents (docs/worker.md, "Warm
 * agents"): RUNNEL_WARM_AGENTS=claude:1,codex:1 for the worker when what
 * the worker's pool checks at start holds here (the bwrap sandbox, the
 * allowlist egress and its bridge, two slots; claude also needs Node.js),
 * so that the stack never fails to start for them; otherwise one line says
 * why it runs without.  The caller's own RUNNEL_WARM_AGENTS wins (the
 * worker inherits it; empty: none).
 */
static void choose_warm_agents(dev_stack_t *s)
{
	s->warm_env[0] = '\0';
	if (!g_opt.with_agents || getenv("RUNNEL_WARM_AGENTS"))
		return;
	const char *egress = getenv("RUNNEL_EGRESS"), *net = getenv("RUNNEL_SANDBOX_NET");
	const char *slots = getenv("RUNNEL_SLOTS"), *node = getenv("RUNNEL_NODE");
	char why[160], path[PATH_MAX];
	why[0] = '\0';
	if (strcmp(s->sandbox, "bwrap") != 0)
		snprintf(why, sizeof(why), "they need the bwrap sandbox (this one is %s)", s->sandbox);
	else if (egress && *egress ? strcmp(egress, "allowlist") != 0 : net && !strcmp(net, "host"))
		snprintf(why, sizeof(why), "they need the allowlist egress (RUNNEL_EGRESS=%.32s, RUNNEL_SANDBOX_NET=%.16s)",
		         egress && *egress ? egress : "", net ? net : "");
	else if (slots && *slots && strtol(slots, NULL, 10) < 2)
		snprintf(why, sizeof(why), "they need 2 slots (RUNNEL_SLOTS=%.16s)", slots);
	else if (!beside_worker(s, "RUNNEL_EGRESS_BRIDGE", "runnel-egress-bridge") ||
	         !beside_worker(s, "RUNNEL_WARM_INIT", "runnel-warm-init"))
		snprintf(why, sizeof(why), "runnel-egress-bridge or runnel-warm-init is not next to %.64s",
		         s->worker_bin);
	if (why[0]) {
		say("no warm agents: %s", why);
		return;
	}
	if (node && *node ? is_exec(node) : cli_which("node", path, sizeof(path)) == 0) {
		snprintf(s->warm_env, sizeof(s->warm_env), "RUNNEL_WARM_AGENTS=claude:1,codex:1");
	} else {
		say("no warm claude agent: no Node.js here (node on PATH, or RUNNEL_NODE)");
		snprintf(s->warm_env, sizeof(s->warm_env), "RUNNEL_WARM_AGENTS=codex:1");
	}
}

/* The message of the last line of the worker's log that speaks of warm
 * agents (its JSON "msg"), or "" when there is none. */
static void warm_agents_error(const dev_stack_t *s, char *out, size_t size)
{
	out[0] = '\0';
	FILE *f = fopen(s->worker.log_path, "r");
	char line[4096];
	while (f && fgets(line, sizeof(line), f)) {
		if (!strstr(line, "warm agents") && !strstr(line, "RUNNEL_WARM_AGENTS"))
			continue;
		json_t *o = json_loads(line, 0, NULL);
		const char *msg = json_string_value(json_object_get(o, "msg"));
		if (msg)
			snprintf(out, size, "%s", msg);
		json_decref(o);
	}
	if (f)
		fclose(f);
}

static void mock_log(const rd_kafka_t *rk, int level, const char *fac, const char *buf)
{
	(void)rk;
	(void)level;
	(void)fac;
	(void)buf;
}

/* CreateTopics for --kafka; an existing topic is fine.  0 or -1 (said). */
static int create_topics(rd_kafka_t *rk, rd_kafka_NewTopic_t **nt, const char *b)
{
	char err[512];
	int rc = -1;
	rd_kafka_queue_t *q = rd_kafka_queue_new(rk);
	rd_kafka_AdminOptions_t *o = rd_kafka_AdminOptions_new(rk, RD_KAFKA_ADMIN_OP_CREATETOPICS);
	rd_kafka_AdminOptions_set_request_timeout(o, 10000, err, sizeof(err));
	rd_kafka_AdminOptions_set_operation_timeout(o, 10000, err, sizeof(err));
	rd_kafka_CreateTopics(rk, nt, 2, o, q);
	rd_kafka_event_t *ev = rd_kafka_queue_poll(q, 15000);
	if (!ev) {
		say("--kafka %s: no answer from the broker", b);
	} else if (rd_kafka_event_error(ev) == RD_KAFKA_RESP_ERR__TIMED_OUT) {
		/* librdkafka words this differently by where the wait ran out
		 * ("Timed out waiting for controller", "Failed while waiting for
		 * controller: Local: Timed out"): one message of ours instead. */
		say("--kafka %s: no broker answered within 10 s", b);
	} else if (rd_kafka_event_error(ev)) {
		say("--kafka %s: %s", b, rd_kafka_event_error_string(ev));
	} else {
		size_t n = 0;
		const rd_kafka_topic_result_t **res =
		        rd_kafka_CreateTopics_result_topics(rd_kafka_event_CreateTopics_result(ev), &n);
		rc = 0;
		for (size_t i = 0; i < n; i++) {
			rd_kafka_resp_err_t e = rd_kafka_topic_result_error(res[i]);
			if (e && e != RD_KAFKA_RESP_ERR_TOPIC_ALREADY_EXISTS) {
				say("--kafka %s: topic %s: %s", b, rd_kafka_topic_result_name(res[i]),
				    rd_kafka_topic_result_error_string(res[i]));
				rc = -1;
			}
		}
	}
	if (ev)
		rd_kafka_event_destroy(ev);
	rd_kafka_AdminOptions_destroy(o);
	rd_kafka_queue_destroy(q);
	return rc;
}

/*
 * --kafka: an external broker.  The topics are created when missing (the
 * job topic with DEV_PARTITIONS partitions, the DLQ with one), which also
 * proves the broker answers before anything else starts.
 */
static int start_kafka_external(dev_stack_t *s)
{
	const char *b = g_opt.kafka;
	if (!*b || strcspn(b, " \t\r\n;") != strlen(b) || strlen(b) >= sizeof(s->bootstrap)) {
		say("--kafka: expected HOST:PORT[,HOST:PORT...], got \"%s\"", b);
		return -1;
	}
	snprintf(s->bootstrap, sizeof(s->bootstrap), "%s", b);
	char err[512];
	rd_kafka_conf_t *conf = rd_kafka_conf_new();
	rd_kafka_conf_set_log_cb(conf, mock_log);
	if (rd_kafka_conf_set(conf, "bootstrap.servers", b, err, sizeof(err)) != RD_KAFKA_CONF_OK ||
	    rd_kafka_conf_set(conf, "client.id", "runnel-dev", err, sizeof(err)) != RD_KAFKA_CONF_OK) {
		rd_kafka_conf_destroy(conf);
		say("--kafka %s: %s", b, err);
		return -1;
	}
	rd_kafka_t *rk = rd_kafka_new(RD_KAFKA_PRODUCER, conf, err, sizeof(err));
	if (!rk) {
		rd_kafka_conf_destroy(conf);
		say("--kafka %s: %s", b, err);
		return -1;
	}
	char dlq[300];
	snprintf(dlq, sizeof(dlq), "%s.dlq", g_opt.jobs_topic);
	rd_kafka_NewTopic_t *nt[2] = {
		rd_kafka_NewTopic_new(g_opt.jobs_topic, DEV_PARTITIONS, 1, err, sizeof(err)),
		rd_kafka_NewTopic_new(dlq, 1, 1, err, sizeof(err)),
	};
	int rc = -1;
	if (!nt[0] || !nt[1])
		say("--kafka %s: topic %s: %s", b, g_opt.jobs_topic, err);
	else
		rc = create_topics(rk, nt, b);
	for (int i = 0; i < 2; i++)
		if (nt[i])
			rd_kafka_NewTopic_destroy(nt[i]);
	rd_kafka_destroy(rk);
	return rc;
}

static int start_kafka(dev_stack_t *s)
{
	if (g_opt.kafka)
		return start_kafka_external(s);
	char err[512];
	rd_kafka_conf_t *conf = rd_kafka_conf_new();
	rd_kafka_conf_set_log_cb(conf, mock_log);
	rd_kafka_conf_set(conf, "client.id", "runnel-dev-mock", err, sizeof(err));
	s->mock_rk = rd_kafka_new(RD_KAFKA_PRODUCER, conf, err, sizeof(err));
	if (!s->mock_rk) {
		rd_kafka_conf_destroy(conf);
		say("kafka mock: %s", err);
		return -1;
	}
	s->mock = rd_kafka_mock_cluster_new(s->mock_rk, 1);
	if (!s->mock) {
		say("kafka mock: cannot create the mock cluster");
		return -1;
	}
	snprintf(s->bootstrap, sizeof(s->bootstrap), "%s", rd_kafka_mock_cluster_bootstraps(s->mock));
	char dlq[300];
	snprintf(dlq, sizeof(dlq), "%s.dlq", g_opt.jobs_topic);
	rd_kafka_resp_err_t e1 = rd_kafka_mock_topic_create(s->mock, g_opt.jobs_topic, DEV_PARTITIONS, 1);
	rd_kafka_resp_err_t e2 = rd_kafka_mock_topic_create(s->mock, dlq, 1, 1);
	if (e1 || e2) {
		say("kafka mock: cannot create topics: %s", rd_kafka_err2str(e1 ? e1 : e2));
		return -1;
	}
	return 0;
}

/* 1 when url answers PING; else 0 with the reason in why (may be NULL). */
static int redis_ping_why(const char *url, char *why, size_t why_size)
{
	char err[256];
	rn_rcluster_t *c = cli_rconn_open(url, err, sizeof(err));
	if (!c) {
		if (why)
			snprintf(why, why_size, "%s", err);
		return 0;
	}
	redisReply *r = rn_rcluster_command(c, 0, "PING");
	int ok = r && r->type == REDIS_REPLY_STATUS && !strcmp(r->str, "PONG");
	if (!ok && why)
		cli_rconn_error(c, r, why, why_size);
	if (r)
		freeReplyObject(r);
	rn_rcluster_free(c);
	return ok;
}

static int redis_ping(const char *url)
{
	return redis_ping_why(url, NULL, 0);
}

/*
 * --redis-cluster N: the nodes next to the single Redis's place
 * (redis-cluster/<I>/), redis-cli from redis-server's own directory, else
 * PATH.  The children get node 0's URL: any node will do, they read the
 * slot map from it.
 */
static int start_cluster(dev_stack_t *s, const char *bin)
{
	char cli[PATH_MAX], dir[PATH_MAX + 16], logs[PATH_MAX + 8], err[512];

	snprintf(cli, sizeof(cli), "%s", bin);
	char *slash = strrchr(cli, '/');
	if (slash)
		snprintf(slash + 1, sizeof(cli) - (size_t)(slash + 1 - cli), "redis-cli");
	if ((!slash || !is_exec(cli)) && cli_which("redis-cli", cli, sizeof(cli)) < 0) {
		say("cannot find redis-cli (install redis-tools; --redis-cluster creates the cluster with it)");
		return -1;
	}
	s->cluster = calloc(1, sizeof(*s->cluster));
	if (!s->cluster) {
		say("out of memory");
		return -1;
	}
	snprintf(dir, sizeof(dir), "%s/redis-cluster", s->dir);
	snprintf(logs, sizeof(logs), "%s/logs", s->dir);
	say("starting a Redis Cluster: %d primaries, %d replicas", s->cluster_n, s->cluster_n);
	if (dev_cluster_start(s->cluster, s->cluster_n, bin, cli, dir, logs, DEV_CLUSTER_READY_MS, cli_interrupted,
	                      err, sizeof(err)) < 0) {
		if (!cli_interrupted())
			say("Redis Cluster: %s", err);
		return -1;
	}
	snprintf(s->redis_url, sizeof(s->redis_url), "%s", s->cluster->url);
	if (!redis_ping(s->redis_url)) {
		say("Redis Cluster: node 0 (%s) does not answer as a cluster", s->redis_url);
		return -1;
	}
	return 0;
}

static int start_redis(dev_stack_t *s)
{
	char bin[PATH_MAX], err[512], rdir[PATH_MAX + 16], conf[PATH_MAX + 32], log[PATH_MAX + 32];

	if (g_opt.redis_url) {
		snprintf(s->redis_url, sizeof(s->redis_url), "%s", g_opt.redis_url);
		/* A wrong Redis (password, not Redis, a cluster with unserved
		 * slots) is said now with the reason; the message never holds
		 * the password. */
		if (!redis_ping_why(s->redis_url, err, sizeof(err))) {
			say("RUNNEL_REDIS_URL: %s", err);
			return -1;
		}
		return 0;
	}
	if (cli_which(g_opt.redis_server, bin, sizeof(bin)) < 0) {
		say("cannot find %s (install redis-server, or set RUNNEL_REDIS_URL)", g_opt.redis_server);
		return -1;
	}
	if (s->cluster_n)
		return start_cluster(s, bin);
	snprintf(rdir, sizeof(rdir), "%s/redis", s->dir);
	mkdir(rdir, 0700);
	snprintf(conf, sizeof(conf), "%s/redis.conf", rdir);
	snprintf(log, sizeof(log), "%s/logs/redis.log", s->dir);
	for (int attempt = 0; attempt < 5; attempt++) {
		int port = cli_free_port();
		FILE *f = fopen(conf, "w");
		if (!f || port < 0) {
			if (f)
				fclose(f);
			say("cannot write %s", conf);
			return -1;
		}
		fprintf(f, "port %d\nbind 127.0.0.1\ndir %s\nsave \"\"\nappendonly no\ndaemonize no\n"
		           "protected-mode yes\nlogfile \"\"\ndatabases 16\n",
		        port, rdir);
		fclose(f);
		char *argv[] = { bin, conf, NULL };
		char **env = cli_env_build(NULL);
		int rc = cli_proc_spawn(&s->redis, "redis-server", argv, env, log, err, sizeof(err));
		cli_env_free(env);
		if (rc < 0) {
			say("%s", err);
			return -1;
		}
		snprintf(s->redis_url, sizeof(s->redis_url), "redis://127.0.0.1:%d", port);
		int64_t end = rn_mono_ms() + DEV_REDIS_READY_MS;
		while (rn_mono_ms() < end && cli_proc_alive(&s->redis) && !cli_interrupted()) {
			if (redis_ping(s->redis_url))
				return 0;
			struct timespec ts = { 0, 20 * 1000000L };
			nanosleep(&ts, NULL);
		}
		if (cli_interrupted())
			return -1;
		if (cli_proc_alive(&s->redis)) {
			say("redis-server did not answer PING within %d s", DEV_REDIS_READY_MS / 1000);
			cli_proc_log_tail(&s->redis, stderr, 10);
			return -1;
		}
		/* Died: most likely the port was taken meanwhile; try another. */
	}
	say("redis-server did not start:");
	cli_proc_log_tail(&s->redis, stderr, 10);
	return -1;
}

static int start_stub(dev_stack_t *s)
{
	char err[256], listen[64], results[PATH_MAX + 16];

	snprintf(listen, sizeof(listen), "127.0.0.1:%ld", g_opt.stub_port);
	snprintf(results, sizeof(results), "%s/results", s->dir);
	/* The /ui/ viewer (served by the dispatcher) mints runs from the stub. */
	snprintf(s->dispatcher_url, sizeof(s->dispatcher_url), "http://127.0.0.1:%ld", g_opt.port);
	mkdir(results, 0700);
	/* The provider keys come from the caller's environment, not from a
	 * file: "${ANTHROPIC_API_KEY}" in a definition (see dev/stub.h). */
	dev_stub_opts_t o = {
		.env_values = (const char *const *)s->keys,
		.listen = listen,
		.agents_dir = s->agents,
		.results_dir = results,
		.enable_mint = 1,
		.cors_origin = s->dispatcher_url,
	};
	s->stub = dev_stub_start(&o, err, sizeof(err));
	if (!s->stub) {
		say("workspace stub: %s", err);
		return -1;
	}
	return 0;
}

/* What the dispatcher and the worker are both told: where Kafka, Redis,
 * the key prefix and the job topic are ("NAME=value" each). */
typedef struct dev_shared_env {
	char brokers[300], redis[340], prefix[120], topic[300];
} dev_shared_env_t;

static void shared_env(const dev_stack_t *s, dev_shared_env_t *e)
{
	snprintf(e->brokers, sizeof(e->brokers), "RUNNEL_KAFKA_BROKERS=%s", s->bootstrap);
	snprintf(e->redis, sizeof(e->redis), "RUNNEL_REDIS_URL=%s", s->redis_url);
	snprintf(e->prefix, sizeof(e->prefix), "RUNNEL_KEY_PREFIX=%s", g_opt.prefix);
	snprintf(e->topic, sizeof(e->topic), "RUNNEL_JOBS_TOPIC=%s", g_opt.jobs_topic);
}

/* Starts bin as child p named name, with the environment envv on top of
 * this process's, logging to logs/<name>.log.  0, or -1 after a line. */
static int spawn_child(dev_stack_t *s, cli_proc_t *p, const char *name, const char *bin, const char *const *envv)
{
	char err[512], log[PATH_MAX + 32];
	char **env = cli_env_build(envv);
	char *argv[] = { (char *)bin, NULL };
	snprintf(log, sizeof(log), "%s/logs/%s.log", s->dir, name);
	int rc = cli_proc_spawn(p, name, argv, env, log, err, sizeof(err));
	cli_env_free(env);
	if (rc < 0)
		say("%s", err);
	return rc < 0 ? -1 : 0;
}

static int start_worker(dev_stack_t *s)
{
	dev_shared_env_t e;
	char e_sandbox[64], e_work[PATH_MAX + 32];
	shared_env(s, &e);
	snprintf(e_sandbox, sizeof(e_sandbox), "RUNNEL_SANDBOX=%s", s->sandbox);
	snprintf(e_work, sizeof(e_work), "RUNNEL_WORK_DIR=%s/work", s->dir);
	const char *drain = getenv("RUNNEL_DRAIN_SEC");
	const char *wenv[16] = { e.brokers,
		                 e.redis,
		                 e.prefix,
		                 e.topic,
		                 e_sandbox,
		                 e_work,
		                 "RUNNEL_METRICS_LISTEN=127.0.0.1:0",
		                 "RUNNEL_WEBHOOK_ALLOW_HTTP=true",
		                 "RUNNEL_WEBHOOK_ALLOW_PRIVATE=true" };
	size_t n = 9;
	/* A short drain keeps Ctrl-C snappy; the user's own setting wins. */
	if (!drain || !*drain)
		wenv[n++] = "RUNNEL_DRAIN_SEC=3";
	if (s->warm_env[0])
		wenv[n++] = s->warm_env;
	wenv[n] = NULL;
	return spawn_child(s, &s->worker, "worker", s->worker_bin, wenv);
}

static int start_children(dev_stack_t *s)
{
	char listen[64], work[PATH_MAX + 16];
	char e_ui_stub[160], e_listen[96];
	dev_shared_env_t e;

	snprintf(listen, sizeof(listen), "127.0.0.1:%ld", g_opt.port);
	snprintf(s->dispatcher_url, sizeof(s->dispatcher_url), "http://%s", listen);
	snprintf(work, sizeof(work), "%s/work", s->dir);
	mkdir(work, 0700);
	snprintf(e_listen, sizeof(e_listen), "RUNNEL_LISTEN=%s", listen);
	shared_env(s, &e);
	snprintf(e_ui_stub, sizeof(e_ui_stub), "RUNNEL_UI_DEV_STUB=%s", dev_stub_url(s->stub));

	/* A dev stack lives on loopback: completion webhooks may go to a local
	 * http:// receiver (unsigned unless RUNNEL_WEBHOOK_SECRET is set). */
	const char *denv[] = { e_listen,
		               e.brokers,
		               e.redis,
		               e.prefix,
		               e.topic,
		               e_ui_stub,
		               "RUNNEL_WEBHOOK_ALLOW_HTTP=true",
		               "RUNNEL_WEBHOOK_ALLOW_PRIVATE=true",
		               NULL };
	if (spawn_child(s, &s->dispatcher, "dispatcher", s->dispatcher_bin, denv) < 0)
		return -1;
	return start_worker(s);
}

/*
 * A worker that exits 2 (its start-up checks) while this process gave it
 * warm agents starts again without them, after one line saying why: the
 * dev stack never fails to start for them.  1 when restarted.
 */
static int worker_without_warm(dev_stack_t *s)
{
	if (!s->warm_env[0] || !WIFEXITED(s->worker.status) || WEXITSTATUS(s->worker.status) != 2)
		return 0;
	char why[512];
	warm_agents_error(s, why, sizeof(why));
	if (!why[0])
		return 0;
	say("no warm agents: the worker refused them (%s); starting it without", why);
	s->warm_env[0] = '\0';
	return start_worker(s) == 0;
}

/* Reports a child that died; 1 when one did. */
static int child_died(dev_stack_t *s)
{
	cli_proc_t *procs[] = { &s->dispatcher, &s->worker, &s->redis };
	for (size_t i = 0; i < 3; i++) {
		cli_proc_t *p = procs[i];
		if (!p->name[0] || cli_proc_alive(p) || (p == &s->worker && worker_without_warm(s)))
			continue;
		char how[32];
		cli_proc_describe(p->status, how, sizeof(how));
		say("%s exited (%s); its log (%s) ends with:", p->name, how, p->log_path);
		cli_proc_log_tail(p, stderr, 12);
		p->name[0] = '\0'; /* reported */
		return 1;
	}
	cli_proc_t *node = s->cluster ? dev_cluster_died(s->cluster) : NULL;
	if (node) {
		char how[32];
		cli_proc_describe(node->status, how, sizeof(how));
		say("Redis Cluster node %s exited (%s); its log (%s) ends with:", node->name, how, node->log_path);
		cli_proc_log_tail(node, stderr, 12);
		node->name[0] = '\0';
		return 1;
	}
	return 0;
}

static int wait_ready(dev_stack_t *s)
{
	char url[128], err[256];
	snprintf(url, sizeof(url), "%s/readyz", s->dispatcher_url);
	int64_t end = rn_mono_ms() + DEV_READY_MS;
	while (rn_mono_ms() < end) {
		if (cli_interrupted() || child_died(s))
			return -1;
		cli_http_resp_t resp;
		/* With RUNNEL_API_TOKEN set, /readyz wants it too. */
		if (cli_http_request("GET", url, getenv("RUNNEL_API_TOKEN"), NULL, &resp, err, sizeof(err)) == 0) {
			long st = resp.status;
			cli_http_resp_free(&resp);
			if (st == 200)
				return 0;
		}
		struct timespec ts = { 0, 100 * 1000000L };
		nanosleep(&ts, NULL);
	}
	say("the dispatcher was not ready within %d s; its log ends with:", DEV_READY_MS / 1000);
	cli_proc_log_tail(&s->dispatcher, stderr, 12);
	return -1;
}

static void stop_stack(dev_stack_t *s)
{
	/* Worker first (it drains), then the dispatcher, then what they used. */
	cli_proc_stop(&s->worker, SIGTERM, DEV_STOP_GRACE_MS);
	cli_proc_stop(&s->dispatcher, SIGTERM, 3000);
	cli_proc_stop(&s->redis, SIGTERM, 3000);
	if (s->cluster) {
		dev_cluster_stop(s->cluster, 3000);
		free(s->cluster);
		s->cluster = NULL;
	}
	if (s->stub) {
		dev_stub_stop(s->stub);
		s->stub = NULL;
	}
	if (s->mock) {
		rd_kafka_mock_cluster_destroy(s->mock);
		s->mock = NULL;
	}
	if (s->mock_rk) {
		rd_kafka_destroy(s->mock_rk);
		s->mock_rk = NULL;
	}
	if (s->dir[0]) {
		if (g_opt.keep)
			say("kept %s", s->dir);
		else
			cli_rm_rf(s->dir);
		s->dir[0] = '\0';
	}
}

static void print_banner(const dev_stack_t *s)
{
	const char *stub = dev_stub_url(s->stub);
	const char *prompt = "Add an inference node";
	char exe[PATH_MAX], redis_shown[320], redis_env[360];
	rn_redis_url_t u;
	char err[128];

	/* A Redis given with a password: never print it. */
	redis_env[0] = '\0';
	if (rn_redis_url_parse(s->redis_url, &u, err, sizeof(err)) == 0 && u.password[0]) {
		snprintf(redis_shown, sizeof(redis_shown), "redis://***@%s:%d/%d (from RUNNEL_REDIS_URL)",
		         u.host, u.port, u.db);
	} else if (s->cluster) {
		snprintf(redis_shown, sizeof(redis_shown), "%s (Redis Cluster: %d primaries, %d replicas; "
		                                           "logs/redis-node-*.log)",
		         s->redis_url, s->cluster_n, s->cluster_n);
		snprintf(redis_env, sizeof(redis_env), "RUNNEL_REDIS_URL=%s ", s->redis_url);
	} else {
		snprintf(redis_shown, sizeof(redis_shown), "%s", s->redis_url);
		snprintf(redis_env, sizeof(redis_env), "RUNNEL_REDIS_URL=%s ", s->redis_url);
	}
	sodium_memzero(u.password, sizeof(u.password));
	ssize_t n = readlink("/proc/self/exe", exe, sizeof(exe) - 1);
	exe[n > 0 ? n : 0] = '\0';
	if (n <= 0)
		snprintf(exe, sizeof(exe), "runnel");
	/* With a token the dispatcher wants it: reference the variable, not its value. */
	const char *auth = getenv("RUNNEL_API_TOKEN") && *getenv("RUNNEL_API_TOKEN") ? "-H \"Authorization: Bearer $RUNNEL_API_TOKEN\" " : "";

	printf("runnel dev: the stack is up (Ctrl-C stops it)\n"
	       "  viewer      %s/ui/  (open it in a browser: start runs, watch and steer them)\n",
	       s->dispatcher_url);
	const char *warm = s->warm_env[0] ? s->warm_env + strlen("RUNNEL_WARM_AGENTS=") : getenv("RUNNEL_WARM_AGENTS");
	printf("  dispatcher  %s\n"
	       "  worker      pid %d, sandbox %s%s%s\n"
	       "  redis       %s\n"
	       "  kafka       %s (%s; topics %s, %s.dlq)\n"
	       "  workspace   %s (agents from %s)\n"
	       "  scratch     %s (logs/dispatcher.log, logs/worker.log)\n\n",
	       s->dispatcher_url, (int)s->worker.pid, s->sandbox, warm && *warm ? ", warm agents " : "",
	       warm && *warm ? warm : "", redis_shown, s->bootstrap,
	       g_opt.kafka ? "external broker" : "in-process mock", g_opt.jobs_topic, g_opt.jobs_topic, stub, s->agents, s->dir);
	printf("Start a run and stream it (NDJSON):\n"
	       "  curl -s -X POST '%s/mint?agent=%s' | sed 's/}$/,\"prompt\":\"%s\"}/' | "
	       "curl -sN -H 'Content-Type: application/json' %s--data-binary @- %s/stream\n"
	       "or with the CLI:\n"
	       "  curl -s -X POST '%s/mint?agent=%s' | RUNNEL_DISPATCHER_URL=%s %s"
	       "%s submit --otp-file - --prompt '%s'\n\n",
	       stub, g_opt.agent, prompt, auth, s->dispatcher_url,
	       stub, g_opt.agent, s->dispatcher_url, redis_env, exe, prompt);
	fflush(stdout);
}

/* Mints a run from the stub, enqueues it through the dispatcher and follows it. */
static int run_demo(dev_stack_t *s)
{
	char err[512], url[128], msg[256];
	dev_stub_otps_t o;

	if (dev_stub_add_run_from_agent(s->stub, g_opt.agent, &o) < 0) {
		say("no agent \"%s\" in %s", g_opt.agent, s->agents);
		return CLI_EXIT_RUN_ERROR;
	}
	json_t *b = json_pack("{s:s, s:s, s:s, s:s, s:s, s:s}", "agent_url", o.agent_url,
	                      "otp_setup", o.otp_setup, "otp_run", o.otp_run, "otp_upload", o.otp_upload,
	                      "prompt", g_opt.prompt, "caller", "runnel-dev");
	sodium_memzero(&o, sizeof(o));
	char *body = b ? json_dumps(b, JSON_COMPACT) : NULL;
	json_decref(b);
	if (!body) {
		say("cannot encode the demo run (is the prompt valid UTF-8?)");
		return CLI_EXIT_RUN_ERROR;
	}
	snprintf(url, sizeof(url), "%s/v1/runs", s->dispatcher_url);
	cli_http_resp_t resp;
	int rc = cli_http_request("POST", url, getenv("RUNNEL_API_TOKEN"), body, &resp, err, sizeof(err));
	sodium_memzero(body, strlen(body));
	free(body);
	if (rc < 0) {
		say("%s", err);
		return CLI_EXIT_UNREACHABLE;
	}
	json_error_t jerr;
	json_t *a = resp.status == 202 ? json_loadb(resp.body, resp.len, 0, &jerr) : NULL;
	const char *rid = json_string_value(json_object_get(a, "run_id"));
	char run_id[PROTO_RUN_ID_MAX + 1];
	if (!rid || !proto_run_id_valid(rid)) {
		say("the dispatcher refused the demo run (%ld): %s", resp.status,
		    cli_http_error_message(&resp, msg, sizeof(msg)));
		json_decref(a);
		cli_http_resp_free(&resp);
		return CLI_EXIT_RUN_ERROR;
	}
	snprintf(run_id, sizeof(run_id), "%s", rid);
	json_decref(a);
	cli_http_resp_free(&resp);

	printf("Demo run %s (agent %s):\n", run_id, g_opt.agent);
	fflush(stdout);
	cli_tail_req_t req = {
		.verb = "dev",
		.redis_url = s->redis_url,
		.prefix = g_opt.prefix,
		.run_id = run_id,
		.mode = cli_tail_mode(0),
		.wait_ms = 3000,
	};
	rc = cli_tail_follow(&req);
	printf("\n");
	fflush(stdout);
	return rc;
}

int cli_dev_main(int argc, char **argv)
{
	dev_stack_t s;
	cli_args_t a;
	int rc;

	memset(&s, 0, sizeof(s));
	if (cli_args_begin(&dev_verb, argc, argv, &a, &rc))
		return rc;
	if (g_opt.once)
		g_opt.demo = 1;
	rc = CLI_EXIT_USAGE;
	if (cli_args_check_redis(&dev_verb, g_opt.redis_url, g_opt.prefix) < 0)
		goto out_conf;
	if (g_opt.redis_cluster) {
		char why[160];
		if (dev_cluster_parse_n(g_opt.redis_cluster, &s.cluster_n, why, sizeof(why)) < 0) {
			cli_args_usage_error(&dev_verb, "%s", why);
			goto out_conf;
		}
		if (g_opt.redis_url) {
			cli_args_usage_error(&dev_verb, "--redis-cluster starts its own Redis: it cannot be used with "
			                                "--redis-url/RUNNEL_REDIS_URL");
			goto out_conf;
		}
	}
	if (g_opt.sandbox && cli_args_check_choice(&dev_verb, "sandbox", g_opt.sandbox, "bwrap", "process") < 0)
		goto out_conf;
	rc = CLI_EXIT_RUN_ERROR;
	if (find_program(g_opt.dispatcher_bin, "dispatcher", "runnel-dispatcher", s.dispatcher_bin,
	                 sizeof(s.dispatcher_bin)) < 0) {
		say("cannot find runnel-dispatcher next to runnel or on PATH (set RUNNEL_DISPATCHER_BIN)");
		goto out_conf;
	}
	if (find_program(g_opt.worker_bin, "worker", "runnel-worker", s.worker_bin, sizeof(s.worker_bin)) < 0) {
		say("cannot find runnel-worker next to runnel or on PATH (set RUNNEL_WORKER_BIN)");
		goto out_conf;
	}
	if (g_opt.with_agents && install_agents() < 0)
		goto out_conf;
	if (find_agents(s.agents, sizeof(s.agents)) < 0) {
		say("cannot find the agent definitions (examples/agents); pass --agents DIR");
		goto out_conf;
	}
	if (g_opt.port == 0) {
		g_opt.port = cli_free_port();
	} else if (!cli_port_free((int)g_opt.port)) {
		say("port %ld is busy; pick another with --port (0: any free port)", g_opt.port);
		goto out_conf;
	}
	if (g_opt.sandbox) {
		s.sandbox = g_opt.sandbox;
	} else if (bwrap_works() == 0) {
		s.sandbox = "bwrap";
	} else {
		s.sandbox = "process";
		say("warning: bwrap cannot create a sandbox here; runs use RUNNEL_SANDBOX=process, "
		    "which isolates nothing");
	}
	choose_warm_agents(&s);

	cli_interrupt_install();
	const char *tmp = getenv("TMPDIR");
	snprintf(s.dir, sizeof(s.dir), "%s/runnel-dev-XXXXXX", tmp && *tmp ? tmp : "/tmp");
	if (!mkdtemp(s.dir)) {
		say("cannot create a scratch directory in %s: %s", tmp && *tmp ? tmp : "/tmp", strerror(errno));
		s.dir[0] = '\0';
		goto out_conf;
	}
	/* Searchable, not listable: a root worker's bwrap runs as the
	 * sandbox's unprivileged uid and binds run directories from below. */
	chmod(s.dir, 0711);
	char logs[PATH_MAX + 8];
	snprintf(logs, sizeof(logs), "%s/logs", s.dir);
	mkdir(logs, 0700);

	if (take_keys(&s) < 0) {
		say("out of memory");
		goto out;
	}
	if (start_kafka(&s) < 0 || start_redis(&s) < 0 || start_stub(&s) < 0 || start_children(&s) < 0 ||
	    wait_ready(&s) < 0) {
		rc = cli_interrupted() ? CLI_EXIT_OK : CLI_EXIT_RUN_ERROR;
		goto out;
	}
	print_banner(&s);

	int demo_rc = CLI_EXIT_OK;
	if (g_opt.demo) {
		demo_rc = run_demo(&s);
		if (g_opt.once) {
			rc = demo_rc;
			goto out;
		}
		if (!cli_interrupted())
			printf("The stack keeps running; Ctrl-C stops it.\n");
		fflush(stdout);
	}
	rc = CLI_EXIT_OK;
	while (!cli_interrupted()) {
		if (child_died(&s)) {
			rc = CLI_EXIT_RUN_ERROR;
			break;
		}
		struct timespec ts = { 0, 200 * 1000000L };
		nanosleep(&ts, NULL);
	}
out:
	if (cli_interrupted())
		say("stopping");
	stop_stack(&s);
	free_keys(&s);
out_conf:
	rn_conf_free(dev_opts);
	return rc;
}

#endif /* CLI_HAVE_DEVSTUB */
