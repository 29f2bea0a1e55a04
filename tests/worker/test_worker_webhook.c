/*
 * tests/worker/test_worker_webhook.c - what backends get from the worker
 * (SPEC §2), with real servers: a loopback webhook receiver that checks
 * every Runnel-Signature; jobs produced straight to Kafka.
 *
 *   1. A run with a webhook and a traceparent: the receiver answers 500,
 *      then a redirect, then hangs past the attempt timeout, then 200; it
 *      sees four attempts with one delivery id and valid signatures, the
 *      body {"run_id","status","code","ended_at","usage"}; the state hash
 *      says delivered after 4 attempts; the terminal line carries trace_id,
 *      the sandbox got TRACEPARENT with the same trace id and a span of the
 *      run's own, and the worker's log lines for the run carry the trace id.
 *      Meanwhile another run ends normally (no run waits on a webhook).
 *   2. Idempotency through Kafka: two jobs with one key start one run; the
 *      second is acknowledged and its OTPs are never redeemed; the same key
 *      of another tenant is another run.
 *   3. Bad input goes to the DLQ with the reason; a bad traceparent is
 *      dropped with a log line and the run goes on.
 *   4. SIGKILL: with the receiver down, a run ends and a second one is left
 *      running; the worker is killed; a new worker writes worker_lost for
 *      the second run and delivers both webhooks exactly once each when the
 *      receiver is back (the outbox is empty afterwards: no attempt left).
 *   5. Metrics, and the secret never in a log or in Redis.
 *   6. An endpoint that only answers 500: retried, then dropped at the
 *      give-up horizon with a log line and the metric.
 *   7. A webhook whose host is a name (this host's own, from /etc/hosts)
 *      that resolves to 127.0.0.1: with private targets allowed the run
 *      goes on and the webhook is delivered (section 1's worker); without,
 *      the run ends bootstrap_failed naming the webhook at its boot, before
 *      any OTP is redeemed (the stub saw no call), and the job goes to
 *      the DLQ once with the reason: the record's bytes as produced, or,
 *      from a worker with a job key, sealed (no OTP or prompt in plaintext).
 *   8. The dispatcher's sweep: a worker is SIGKILLed mid-run with no other
 *      worker alive; the dispatcher's lost-lease sweep writes worker_lost
 *      and makes the webhook due (the dispatcher sends none: it has no
 *      secret); a worker started afterwards delivers exactly one signed
 *      webhook for it.
 */
#include "tests/worker/wtest.h"
#include "tests/dispatcher/dtest.h"

#include <errno.h>
#include <netdb.h>
#include <arpa/inet.h>
#include <netinet/in.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include <sodium.h>

#include "common/util.h"
#include "proto/job.h"

#define SECRET "whsec_test_S3cr3t_never_logged"
#define TP     "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"
#define TID    "4bf92f3577b34da6a3ce929d0e0e4736"

/* ---- the receiver ---- */

#define MAX_SEEN 64
#define HANG     0

typedef struct seen {
	char run_id[80];
	char delivery[96];
	char body[1024];
	int sig_ok;
	int answered; /* the status it got */
} seen_t;

static struct {
	pthread_mutex_t mu;
	int lfd;
	int port;
	pthread_t thread;
	atomic_int stop;
	int plan[8]; /* statuses to answer, in order; then 200 */
	int nplan, used;
	seen_t seen[MAX_SEEN];
	int nseen;
	int hung[8];
	int nhung;
} R = { .mu = PTHREAD_MUTEX_INITIALIZER, .lfd = -1 };

static int listen_on(int port)
{
	int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0), one = 1;
	struct sockaddr_in a = { .sin_family = AF_INET, .sin_port = htons((uint16_t)port) };
	socklen_t al = sizeof(a);
	a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
	setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
	if (bind(fd, (struct sockaddr *)&a, sizeof(a)) < 0 || listen(fd, 16) < 0 ||
	    getsockname(fd, (struct sockaddr *)&a, &al) < 0) {
		close(fd);
		return -1;
	}
	R.port = ntohs(a.sin_port);
	return fd;
}

static const char *header(const char *head, const char *name, char *out, size_t size)
{
	out[0] = '\0';
	for (const char *p = head; (p = strcasestr(p, name)); p++) {
		if (p != head && p[-1] != '\n')
			continue;
		p += strlen(name);
		if (*p != ':')
			continue;
		p++;
		while (*p == ' ')
			p++;
		size_t n = strcspn(p, "\r\n");
		snprintf(out, size, "%.*s", (int)(n < size ? n : size - 1), p);
		return out;
	}
	return NULL;
}

/* Runnel-Signature: t=<s>,v1=<hex HMAC-SHA256(secret, "t.body")>. */
static int sig_valid(const char *sig, const char *body)
{
	long long t = 0;
	char hex[65] = "", want[65], msg[1200];
	unsigned char mac[crypto_auth_hmacsha256_BYTES];
	if (sscanf(sig, "t=%lld,v1=%64[0-9a-f]", &t, hex) != 2)
		return 0;
	if (llabs(t - rn_now_ms() / 1000) > 300)
		return 0;
	int n = snprintf(msg, sizeof(msg), "%lld.%s", t, body);
	crypto_auth_hmacsha256_state st;
	crypto_auth_hmacsha256_init(&st, (const unsigned char *)SECRET, strlen(SECRET));
	crypto_auth_hmacsha256_update(&st, (const unsigned char *)msg, (unsigned long long)n);
	crypto_auth_hmacsha256_final(&st, mac);
	sodium_bin2hex(want, sizeof(want), mac, sizeof(mac));
	return strcmp(want, hex) == 0;
}

static void serve_one(int fd)
{
	char buf[8192];
	size_t len = 0;
	char *end = NULL;
	struct pollfd p = { .fd = fd, .events = POLLIN };
	while (!end && len < sizeof(buf) - 1 && poll(&p, 1, 2000) == 1) {
		ssize_t n = read(fd, buf + len, sizeof(buf) - 1 - len);
		if (n <= 0)
			break;
		len += (size_t)n;
		buf[len] = '\0';
		end = strstr(buf, "\r\n\r\n");
	}
	if (!end) {
		close(fd);
		return;
	}
	char cl[32], h[256];
	size_t want = header(buf, "Content-Length", cl, sizeof(cl)) ? strtoul(cl, NULL, 10) : 0;
	size_t have = len - (size_t)(end + 4 - buf);
	while (have < want && len < sizeof(buf) - 1 && poll(&p, 1, 2000) == 1) {
		ssize_t n = read(fd, buf + len, sizeof(buf) - 1 - len);
		if (n <= 0)
			break;
		len += (size_t)n;
		have += (size_t)n;
		buf[len] = '\0';
	}
	*end = '\0';
	const char *body = end + 4;
	pthread_mutex_lock(&R.mu);
	int status = R.used < R.nplan ? R.plan[R.used] : 200;
	R.used++;
	if (R.nseen < MAX_SEEN) {
		seen_t *s = &R.seen[R.nseen++];
		snprintf(s->body, sizeof(s->body), "%s", body);
		snprintf(s->run_id, sizeof(s->run_id), "%s", wt_field(body, "run_id"));
		header(buf, "Runnel-Delivery", s->delivery, sizeof(s->delivery));
		s->sig_ok = header(buf, "Runnel-Signature", h, sizeof(h)) && sig_valid(h, body);
		s->answered = status;
	}
	pthread_mutex_unlock(&R.mu);
	if (status == HANG) {
		if (R.nhung < 8) {
			R.hung[R.nhung++] = fd; /* never answered: the sender's timeout ends it */
			return;
		}
		close(fd);
		return;
	}
	char resp[256];
	int n = snprintf(resp, sizeof(resp),
	                 "HTTP/1.1 %d X\r\nContent-Length: 0\r\nConnection: close\r\n%s\r\n", status,
	                 status == 302 ? "Location: http://127.0.0.1:1/elsewhere\r\n" : "");
	th_send_all(fd, resp, (size_t)n);
	close(fd);
}

static void *receiver_main(void *arg)
{
	(void)arg;
	while (!atomic_load(&R.stop)) {
		struct pollfd p = { .fd = R.lfd, .events = POLLIN };
		if (poll(&p, 1, 100) != 1)
			continue;
		int fd = accept4(R.lfd, NULL, NULL, SOCK_CLOEXEC);
		if (fd >= 0)
			serve_one(fd);
	}
	return NULL;
}

static void receiver_start(int port)
{
	R.lfd = listen_on(port);
	TH_REQUIRE(R.lfd >= 0, "receiver listens on %d", port);
	atomic_store(&R.stop, 0);
	TH_REQUIRE(pthread_create(&R.thread, NULL, receiver_main, NULL) == 0, "receiver thread");
}

static void receiver_stop(void)
{
	atomic_store(&R.stop, 1);
	pthread_join(R.thread, NULL);
	close(R.lfd);
	R.lfd = -1;
	for (int i = 0; i < R.nhung; i++)
		close(R.hung[i]);
	R.nhung = 0;
}

static int count_for(const char *run_id, int answered)
{
	int n = 0;
	pthread_mutex_lock(&R.mu);
	for (int i = 0; i < R.nseen; i++)
		if (th_streq(R.seen[i].run_id, run_id) && (answered < 0 || R.seen[i].answered == answered))
			n++;
	pthread_mutex_unlock(&R.mu);
	return n;
}

/* ---- jobs ---- */

static wt_t T;

#define JOB_KEY_HEX "00112233445566778899aabbccddeeff00112233445566778899aabbccddeeff"

/* Produces a job for a fresh stub run of agent_json, with extra JSON
 * fields (an object's members, e.g. "\"priority\":3") spliced in; returns
 * the record's value as produced. */
static const char *produce(const char *run_id, const char *agent_json, const char *tenant, const char *extra, int partition,
                           dev_stub_otps_t *o)
{
	wt_add_agent_run(&T, agent_json, o);
	char *v = th_strf("{\"v\":1,\"run_id\":\"%s\",\"agent_url\":\"%s\",\"otp_setup\":\"%s\",\"otp_run\":\"%s\","
	                  "\"prompt\":\"hi\",\"enqueued_at\":%lld%s%s%s%s%s}",
	                  run_id, o->agent_url, o->otp_setup, o->otp_run, (long long)rn_now_ms(),
	                  tenant ? ",\"tenant\":\"" : "", tenant ? tenant : "", tenant ? "\"" : "", extra ? "," : "",
	                  extra ? extra : "");
	TH_REQUIRE(th_kafka_produce(&T.kafka, T.topic, partition, run_id, v, strlen(v), NULL) == 0, "produce %s",
	           run_id);
	return v;
}

/* The DLQ messages keyed run_id, read from the start of <topic>.dlq until
 * none came for 3 s: their count; the last one's reason and value. */
static int dlq_for(const char *run_id, char **reason, char **value, size_t *len)
{
	th_kafka_consumer_t *dc = th_kafka_consumer_new(&T.kafka, th_strf("%s.dlq", T.topic), NULL);
	TH_REQUIRE(dc, "dlq consumer");
	int n = 0;
	th_kafka_msg_t m;
	while (th_kafka_consumer_next(dc, 3000, &m) == 1) {
		if (th_streq(m.key, run_id)) {
			const char *r = th_kafka_msg_header(&m, "reason");
			*reason = th_strf("%s", r ? r : "(none)");
			*value = m.value ? th_strf("%.*s", (int)m.len, m.value) : NULL;
			*len = m.len;
			n++;
		}
		th_kafka_msg_free(&m);
	}
	th_kafka_consumer_free(dc);
	return n;
}

static const char *hook(void)
{
	return th_strf("\"webhook\":\"http://127.0.0.1:%d/hook\"", R.port);
}

/* This host's name when it resolves to 127/8 (through /etc/hosts), else
 * NULL: a name, not a literal, that the intake cannot judge by its text. */
static const char *loopback_name(void)
{
	static char host[256];
	struct addrinfo *ai = NULL, hints = { .ai_family = AF_INET, .ai_socktype = SOCK_STREAM };
	int ok = gethostname(host, sizeof(host)) == 0 && host[0] && !strchr(host, '.') &&
	        getaddrinfo(host, NULL, &hints, &ai) == 0 &&
	        (ntohl(((struct sockaddr_in *)ai->ai_addr)->sin_addr.s_addr) >> 24) == 127;
	if (ai)
		freeaddrinfo(ai);
	return ok ? host : NULL;
}

static char *agent_cmd(const char *script)
{
	json_t *j = json_pack("{s:s,s:[s,s,s]}", "kind", "command", "argv", "/bin/sh", "-c", script);
	char *s = json_dumps(j, JSON_COMPACT);
	char *out = th_strf("%s", s);
	free(s);
	json_decref(j);
	return out;
}

typedef struct state_arg {
	const char *run_id, *field, *want;
} state_arg_t;

static int state_is(void *arg)
{
	state_arg_t *a = arg;
	return th_streq(wt_state(&T, a->run_id, a->field), a->want);
}

static int either_ended(void *arg)
{
	(void)arg;
	return !th_streq(wt_state(&T, "run_i1", "ended_at"), "") || !th_streq(wt_state(&T, "run_i2", "ended_at"), "");
}

static int outbox_empty(void *arg)
{
	(void)arg;
	return th_redis_int(T.rc, -1, "ZCARD runnel:{wh}:outbox") == 0;
}

int main(void)
{
	const char *env[] = { "RUNNEL_WEBHOOK_SECRET=" SECRET,
		              "RUNNEL_WEBHOOK_ALLOW_HTTP=true",
		              "RUNNEL_WEBHOOK_ALLOW_PRIVATE=true",
		              "RUNNEL_WEBHOOK_TIMEOUT_SEC=2",
		              "RUNNEL_LEASE_SEC=3",
		              NULL };
	dev_stub_otps_t o, o2, o3;
	TH_REQUIRE(sodium_init() >= 0, "libsodium");
	pid_t w1 = wt_start(&T, "worker_webhook", 2, "w1", env);
	const char *quick = agent_cmd("read turn; echo '{\"type\":\"result\",\"message\":\"ok\"}'");

	/* ---- 1. retries, one delivery id, signatures, trace context ---- */
	R.plan[0] = 500;
	R.plan[1] = 302;
	R.plan[2] = HANG;
	R.nplan = 3;
	receiver_start(0);
	const char *tp_agent = agent_cmd("read turn; printf '{\"type\":\"result\",\"message\":\"tp=%s\"}\\n' "
	                                 "\"$TRACEPARENT\"");
	produce("run_wh1", tp_agent, NULL, th_strf("%s,\"traceparent\":\"%s\"", hook(), TP), -1, &o);
	size_t n = 0;
	char **lines = wt_ended_lines(&T, "run_wh1", 30000, &n);
	TH_REQUIRE(n > 0, "run_wh1 has lines");
	const char *last = lines[n - 1];
	TH_CHECK(th_streq(wt_field(last, "type"), "result") && th_streq(wt_field(last, "trace_id"), TID),
	         "terminal line carries trace_id: %s", last);
	char msg[200];
	snprintf(msg, sizeof(msg), "%s", wt_field(last, "message"));
	TH_CHECK(strncmp(msg, "tp=00-" TID "-", 6 + 32 + 1) == 0 && strlen(msg) == 3 + 55 &&
	                 !strstr(msg, "00f067aa0ba902b7") && th_streq(msg + 3 + 52, "-01"),
	         "the sandbox's TRACEPARENT is the caller's trace with the run's own span: %s", msg);
	th_strv_free(lines, n);
	TH_CHECK(th_streq(wt_state(&T, "run_wh1", "traceparent"), TP), "traceparent in the state hash");
	TH_CHECK(wt_log_has(&T, "w1", "\"run_id\":\"run_wh1\",\"trace_id\":\"" TID "\""),
	         "the worker's log lines for the run carry its trace id");

	/* While the receiver fails and hangs, other runs go on. */
	wt_submit_agent(&T, "run_plain", quick, "x", 0, 0, NULL);
	TH_CHECK(wt_wait_terminal(&T, "run_plain", 20000), "a run without webhook ends meanwhile");

	state_arg_t delivered1 = { "run_wh1", "webhook_state", "delivered" };
	TH_CHECK(th_wait_until(state_is, &delivered1, 30000), "run_wh1's webhook delivered (state %s, error %s)",
	         wt_state(&T, "run_wh1", "webhook_state"), wt_state(&T, "run_wh1", "webhook_error"));
	TH_CHECK(th_streq(wt_state(&T, "run_wh1", "webhook_attempts"), "4"), "4 attempts (%s)",
	         wt_state(&T, "run_wh1", "webhook_attempts"));
	pthread_mutex_lock(&R.mu);
	TH_CHECK(R.nseen == 4, "the receiver saw 4 attempts (%d)", R.nseen);
	for (int i = 0; i < R.nseen; i++) {
		TH_CHECK(R.seen[i].sig_ok, "attempt %d: signature valid", i);
		TH_CHECK(th_streq(R.seen[i].delivery, R.seen[0].delivery) && R.seen[0].delivery[0],
		         "attempt %d: same delivery id %s", i, R.seen[i].delivery);
	}
	json_t *b = json_loads(R.seen[R.nseen - 1].body, 0, NULL);
	TH_CHECK(b && json_object_size(b) == 5 && th_streq(json_string_value(json_object_get(b, "run_id")), "run_wh1") &&
	                 th_streq(json_string_value(json_object_get(b, "status")), "succeeded") &&
	                 json_is_null(json_object_get(b, "code")) && json_is_null(json_object_get(b, "usage")) &&
	                 json_integer_value(json_object_get(b, "ended_at")) ==
	                         strtoll(wt_state(&T, "run_wh1", "ended_at"), NULL, 10),
	         "body %s", R.seen[R.nseen - 1].body);
	json_decref(b);
	pthread_mutex_unlock(&R.mu);
	TH_CHECK(wt_log_has(&T, "w1", "HTTP 302 (redirects are not followed)"), "the redirect was not followed");
	TH_CHECK(wt_log_has(&T, "w1", "\"event\":\"webhook_delivered\",\"run_id\":\"run_wh1\",\"trace_id\":\"" TID "\""),
	         "the delivery's log line carries the trace id");

	/* ---- 7a. a name resolving to loopback, private targets allowed ---- */
	const char *lname = loopback_name();
	if (lname) {
		produce("run_name_ok", quick, NULL, th_strf("\"webhook\":\"http://%s:%d/hook\"", lname, R.port), -1, &o);
		state_arg_t dn = { "run_name_ok", "webhook_state", "delivered" };
		TH_CHECK(th_wait_until(state_is, &dn, 30000), "a name resolving to loopback is delivered when the operator "
		                                              "allows private targets (state %s, error %s)",
		         wt_state(&T, "run_name_ok", "webhook_state"), wt_state(&T, "run_name_ok", "webhook_error"));
		TH_CHECK(count_for("run_name_ok", -1) == 1, "one delivery for run_name_ok (%d)", count_for("run_name_ok", -1));
	} else {
		TH_NOTE("this host's name does not resolve to a loopback address: name lookup not checked");
	}

	/* ---- 2. idempotency through Kafka ---- */
	produce("run_i1", quick, "acme", "\"idempotency_key\":\"order-7\"", 0, &o);
	produce("run_i2", quick, "acme", "\"idempotency_key\":\"order-7\"", 1, &o2);
	produce("run_i3", quick, "other", "\"idempotency_key\":\"order-7\"", 0, &o3);
	TH_CHECK(wt_wait_terminal(&T, "run_i3", 20000), "the same key of another tenant is another run");
	TH_CHECK(wt_wait_log(&T, "w1", "idempotency key already used by run", 20000), "the duplicate is logged");
	TH_CHECK(th_wait_until(either_ended, NULL, 20000), "one of the two runs ended");
	int t1 = !th_streq(wt_state(&T, "run_i1", "ended_at"), "");
	int t2 = !th_streq(wt_state(&T, "run_i2", "ended_at"), "");
	TH_CHECK(t1 + t2 == 1, "exactly one of the two runs ran (%d %d)", t1, t2);
	const char *dup = t1 ? "run_i2" : "run_i1";
	const dev_stub_otps_t *dupo = t1 ? &o2 : &o;
	TH_CHECK(th_streq(wt_state(&T, dup, "status"), ""), "the duplicate has no state");
	TH_CHECK(dev_stub_total_calls(T.stub, dupo->session) == 0, "the duplicate's OTPs were never redeemed");
	redisReply *ir = redisCommand(T.rc, "GET runnel:idem:{acme}:order-7");
	TH_CHECK(ir && ir->type == REDIS_REPLY_STRING && th_streq(ir->str, t1 ? "run_i1" : "run_i2"),
	         "the idempotency record names the run");
	if (ir)
		freeReplyObject(ir);

	/* ---- 3. bad input: DLQ with the reason; a bad traceparent dropped ---- */
	produce("run_bad_p", quick, NULL, "\"priority\":12", -1, &o);
	produce("run_bad_k", quick, NULL, "\"idempotency_key\":\"no spaces\"", -1, &o);
	produce("run_bad_w", quick, NULL, "\"webhook\":\"https://u:p@hooks.example/x\"", -1, &o);
	produce("run_bad_tp", quick, NULL, "\"traceparent\":\"00-xyz\"", -1, &o);
	TH_CHECK(wt_wait_terminal(&T, "run_bad_tp", 20000) && th_streq(wt_run_code(&T, "run_bad_tp", NULL), ""),
	         "a run with a bad traceparent runs");
	TH_CHECK(wt_log_has(&T, "w1", "traceparent_dropped"), "the bad traceparent is logged");
	th_kafka_consumer_t *dc = th_kafka_consumer_new(&T.kafka, th_strf("%s.dlq", T.topic), NULL);
	TH_REQUIRE(dc, "dlq consumer");
	int found = 0;
	th_kafka_msg_t m;
	while (found < 3 && th_kafka_consumer_next(dc, 15000, &m) == 1) {
		const char *reason = th_kafka_msg_header(&m, "reason");
		const char *want = th_streq(m.key, "run_bad_p") ? "priority: must be an integer from 0 to 9"
		        : th_streq(m.key, "run_bad_k")          ? "idempotency_key: 1 to 128 characters of A-Z a-z 0-9 _ . : -"
		        : th_streq(m.key, "run_bad_w")          ? "webhook: must not carry user credentials"
		                                                : NULL;
		if (want) {
			TH_CHECK(th_streq(reason, want), "%s: reason %s", m.key, reason ? reason : "(none)");
			found++;
		}
		th_kafka_msg_free(&m);
	}
	TH_CHECK(found == 3, "three jobs in the DLQ with their reasons (%d)", found);
	th_kafka_consumer_free(dc);

	/* ---- 4. SIGKILL between the terminal line and the delivery ---- */
	int port = R.port;
	receiver_stop();
	pthread_mutex_lock(&R.mu);
	R.nplan = 0;
	R.used = 0;
	pthread_mutex_unlock(&R.mu);
	produce("run_k1", quick, NULL, hook(), -1, &o);
	produce("run_k2", agent_cmd("read turn; sleep 60"), NULL, hook(), -1, &o2);
	TH_REQUIRE(wt_wait_terminal(&T, "run_k1", 20000), "run_k1 ended");
	TH_REQUIRE(wt_wait_started(&T, "run_k2", 20000) || th_streq(wt_state(&T, "run_k2", "status"), "running"),
	           "run_k2 running");
	state_arg_t tried = { "run_k1", "webhook_state", "retrying" };
	TH_CHECK(th_wait_until(state_is, &tried, 10000), "run_k1's webhook failed once (receiver down)");
	TH_REQUIRE(th_kill(w1) == 0, "SIGKILL the worker");
	receiver_start(port);
	pid_t w2 = wt_worker(&T, "w2", env);
	state_arg_t lost = { "run_k2", "status", "lost" };
	TH_CHECK(th_wait_until(state_is, &lost, 30000), "run_k2 ended worker_lost");
	state_arg_t d1 = { "run_k1", "webhook_state", "delivered" }, d2 = { "run_k2", "webhook_state", "delivered" };
	TH_CHECK(th_wait_until(state_is, &d1, 40000), "run_k1's webhook delivered by the new worker");
	TH_CHECK(th_wait_until(state_is, &d2, 40000), "run_k2's (worker_lost) webhook delivered");
	TH_CHECK(th_wait_until(outbox_empty, NULL, 10000), "the outbox is empty: no attempt left");
	TH_CHECK(count_for("run_k1", -1) == 1 && count_for("run_k2", -1) == 1,
	         "exactly one delivery per run end (%d, %d)", count_for("run_k1", -1), count_for("run_k2", -1));
	pthread_mutex_lock(&R.mu);
	for (int i = 0; i < R.nseen; i++)
		if (th_streq(R.seen[i].run_id, "run_k2"))
			TH_CHECK(strstr(R.seen[i].body, "\"status\":\"lost\",\"code\":\"worker_lost\"") && R.seen[i].sig_ok,
			         "worker_lost body %s", R.seen[i].body);
	pthread_mutex_unlock(&R.mu);

	/* ---- 5. metrics; the secret nowhere ---- */
	int mport = wt_metrics_port(&T, "w2");
	long st = 0;
	char *met = mport > 0 ? wt_http_get(th_strf("http://127.0.0.1:%d/metrics", mport), &st) : NULL;
	TH_CHECK(met && strstr(met, "runnel_webhooks_delivered_total 2") && strstr(met, "runnel_webhooks_dropped_total 0") &&
	                 strstr(met, "runnel_queue_priority_queued{priority=\"9\"}") &&
	                 strstr(met, "runnel_webhook_delivery_seconds"),
	         "metrics of the new worker");
	free(met);
	TH_CHECK(!wt_log_has(&T, "w1", SECRET) && !wt_log_has(&T, "w2", SECRET), "the secret is in no log");
	TH_CHECK(!th_dir_contains(T.redis.dir, SECRET, strlen(SECRET)), "the secret is not in Redis's data");

	/* ---- 6. an endpoint that never says 2xx: dropped at the give-up ---- */
	wt_stop_worker(w2, 20000, "w2");
	const char *env3[] = { "RUNNEL_WEBHOOK_SECRET=" SECRET, "RUNNEL_WEBHOOK_ALLOW_HTTP=true",
		               "RUNNEL_WEBHOOK_ALLOW_PRIVATE=true", "RUNNEL_WEBHOOK_TIMEOUT_SEC=2",
		               "RUNNEL_WEBHOOK_GIVE_UP_SEC=2", NULL };
	pthread_mutex_lock(&R.mu);
	for (int i = 0; i < 8; i++)
		R.plan[i] = 500;
	R.nplan = 8;
	R.used = 0;
	pthread_mutex_unlock(&R.mu);
	pid_t w3 = wt_worker(&T, "w3", env3);
	produce("run_drop", quick, NULL, hook(), -1, &o);
	state_arg_t dropped = { "run_drop", "webhook_state", "dropped" };
	TH_CHECK(th_wait_until(state_is, &dropped, 60000), "run_drop's webhook dropped (state %s)",
	         wt_state(&T, "run_drop", "webhook_state"));
	TH_CHECK(th_streq(wt_state(&T, "run_drop", "webhook_error"), "HTTP 500"), "last error %s",
	         wt_state(&T, "run_drop", "webhook_error"));
	TH_CHECK(wt_log_has(&T, "w3", "\"event\":\"webhook_dropped\",\"run_id\":\"run_drop\""), "a log line says so");
	TH_CHECK(count_for("run_drop", 500) >= 2, "retried before the give-up (%d attempts)", count_for("run_drop", 500));
	TH_CHECK(th_wait_until(outbox_empty, NULL, 10000), "nothing left in the outbox");
	mport = wt_metrics_port(&T, "w3");
	met = mport > 0 ? wt_http_get(th_strf("http://127.0.0.1:%d/metrics", mport), &st) : NULL;
	TH_CHECK(met && strstr(met, "runnel_webhooks_dropped_total 1") && !strstr(met, "runnel_webhooks_retried_total 0"),
	         "dropped and retried counted");
	free(met);
	TH_CHECK(!wt_log_has(&T, "w3", SECRET), "the secret is in no log");

	wt_stop_worker(w3, 20000, "w3");

	/* ---- 7b. the same name without private targets: refused at boot ---- */
	if (lname) {
		const char *env4[] = { "RUNNEL_WEBHOOK_SECRET=" SECRET, "RUNNEL_WEBHOOK_ALLOW_HTTP=true",
			               "RUNNEL_WEBHOOK_TIMEOUT_SEC=2", NULL };
		pid_t w4 = wt_worker(&T, "w4", env4);
		dev_stub_otps_t on;
		const char *sent = produce("run_name_bad", quick, NULL,
		                           th_strf("\"webhook\":\"http://%s:%d/hook\"", lname, R.port), -1, &on);
		TH_REQUIRE(wt_wait_terminal(&T, "run_name_bad", 20000), "run_name_bad ended");
		size_t nl = 0;
		char **ll = wt_ended_lines(&T, "run_name_bad", 5000, &nl);
		TH_REQUIRE(nl > 0, "run_name_bad has lines");
		TH_CHECK(th_streq(wt_field(ll[nl - 1], "code"), "bootstrap_failed") &&
		                 th_streq(wt_field(ll[nl - 1], "message"),
		                          "The run was not started: webhook: resolves to a loopback address, which is not "
		                          "allowed."),
		         "ended bootstrap_failed naming the webhook: %s", ll[nl - 1]);
		th_strv_free(ll, nl);
		TH_CHECK(dev_stub_total_calls(T.stub, on.session) == 0, "no OTP of the refused run was redeemed");
		TH_CHECK(wt_log_has(&T, "w4", "\"event\":\"job_rejected\",\"run_id\":\"run_name_bad\""),
		         "the worker logs the refusal");
		TH_CHECK(count_for("run_name_bad", -1) == 0, "nothing was sent to the refused target");
		/* The DLQ: once, with the reason, the record's bytes as produced. */
		char *reason = NULL, *value = NULL;
		size_t vlen = 0;
		const char *want = "webhook: resolves to a loopback address, which is not allowed";
		TH_CHECK(dlq_for("run_name_bad", &reason, &value, &vlen) == 1, "exactly one DLQ message for run_name_bad");
		TH_CHECK(th_streq(reason, want), "its reason: %s", reason ? reason : "(none)");
		TH_CHECK(value && vlen == strlen(sent) && !memcmp(value, sent, vlen), "its value is the record as produced: %s",
		         value ? value : "(none)");
		wt_stop_worker(w4, 20000, "w4");

		/* A worker with a job key queues the job sealed: the DLQ gets it
		 * sealed, never the OTPs or the prompt in plaintext. */
		const char *env5[] = { "RUNNEL_WEBHOOK_SECRET=" SECRET, "RUNNEL_WEBHOOK_ALLOW_HTTP=true",
			               "RUNNEL_WEBHOOK_TIMEOUT_SEC=2", "RUNNEL_JOB_KEY=" JOB_KEY_HEX, NULL };
		pid_t w4s = wt_worker(&T, "w4s", env5);
		dev_stub_otps_t os;
		produce("run_name_sealed", quick, NULL, th_strf("\"webhook\":\"http://%s:%d/hook\"", lname, R.port), -1,
		        &os);
		TH_REQUIRE(wt_wait_terminal(&T, "run_name_sealed", 20000), "run_name_sealed ended");
		TH_CHECK(th_streq(wt_run_code(&T, "run_name_sealed", NULL), "bootstrap_failed"), "run_name_sealed: %s",
		         wt_run_code(&T, "run_name_sealed", NULL));
		TH_CHECK(dev_stub_total_calls(T.stub, os.session) == 0, "no OTP of the sealed refused run was redeemed");
		reason = value = NULL;
		TH_CHECK(dlq_for("run_name_sealed", &reason, &value, &vlen) == 1,
		         "exactly one DLQ message for run_name_sealed");
		TH_CHECK(th_streq(reason, want), "its reason: %s", reason ? reason : "(none)");
		TH_CHECK(value && strstr(value, "\"sealed\":") && !memmem(value, vlen, os.otp_setup, strlen(os.otp_setup)) &&
		                 !memmem(value, vlen, os.otp_run, strlen(os.otp_run)) &&
		                 !memmem(value, vlen, "\"prompt\":\"hi\"", 13),
		         "sealed in the DLQ, no plaintext OTP or prompt: %.120s", value ? value : "(none)");
		TH_CHECK(!wt_log_has(&T, "w4s", os.otp_setup) && !wt_log_has(&T, "w4s", os.otp_run),
		         "no OTP in the worker's log");
		wt_stop_worker(w4s, 20000, "w4s");
	}

	/* ---- 8. worker_lost written by the dispatcher's sweep ---- */
	pthread_mutex_lock(&R.mu); /* the receiver answers 200 from here on */
	R.nplan = 0;
	R.used = 0;
	pthread_mutex_unlock(&R.mu);
	dt_disp_t D;
	TH_REQUIRE(dt_disp_start(&D, &T.redis, &T.kafka, (const char *const[]){ "RUNNEL_SWEEP_MS=200", NULL }) == 0,
	           "dispatcher");
	pid_t w5 = wt_worker(&T, "w5", env);
	produce("run_sweep", agent_cmd("read turn; sleep 60"), NULL, hook(), -1, &o);
	TH_REQUIRE(wt_wait_started(&T, "run_sweep", 20000) || th_streq(wt_state(&T, "run_sweep", "status"), "running"),
	           "run_sweep running");
	TH_REQUIRE(th_kill(w5) == 0, "SIGKILL the only worker");
	state_arg_t slost = { "run_sweep", "status", "lost" };
	TH_CHECK(th_wait_until(state_is, &slost, 30000), "run_sweep ended worker_lost with no worker alive");
	TH_CHECK(th_file_contains(D.log, "\"event\":\"run_lost\",\"run_id\":\"run_sweep\""),
	         "the dispatcher's sweep wrote it");
	redisReply *zs = redisCommand(T.rc, "ZSCORE runnel:{wh}:outbox run_sweep");
	TH_CHECK(zs && zs->type == REDIS_REPLY_STRING && th_streq(zs->str, "0"),
	         "its webhook is due in the outbox at once (%s)", zs && zs->type == REDIS_REPLY_STRING ? zs->str : "none");
	if (zs)
		freeReplyObject(zs);
	TH_CHECK(count_for("run_sweep", -1) == 0, "nothing delivered while no worker is alive");
	pid_t w6 = wt_worker(&T, "w6", env);
	state_arg_t sd = { "run_sweep", "webhook_state", "delivered" };
	TH_CHECK(th_wait_until(state_is, &sd, 30000), "the next worker delivers it (state %s, error %s)",
	         wt_state(&T, "run_sweep", "webhook_state"), wt_state(&T, "run_sweep", "webhook_error"));
	TH_CHECK(th_wait_until(outbox_empty, NULL, 10000), "the outbox is empty afterwards");
	TH_CHECK(count_for("run_sweep", -1) == 1, "exactly one delivery (%d)", count_for("run_sweep", -1));
	pthread_mutex_lock(&R.mu);
	for (int i = 0; i < R.nseen; i++)
		if (th_streq(R.seen[i].run_id, "run_sweep"))
			TH_CHECK(strstr(R.seen[i].body, "\"status\":\"lost\",\"code\":\"worker_lost\"") &&
			                 R.seen[i].sig_ok,
			         "signed worker_lost body %s", R.seen[i].body);
	pthread_mutex_unlock(&R.mu);
	wt_stop_worker(w6, 20000, "w6");
	TH_CHECK(dt_disp_stop(&D), "the dispatcher exits cleanly");
	receiver_stop();
	wt_teardown(&T);
	return th_done();
}
