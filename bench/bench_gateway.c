/*
 * bench/bench_gateway.c - what the model gateway (worker/gateway.h) adds to
 * a model call: time to the first byte of the answer through the gateway
 * and straight to the provider (p50/p99 over N calls on one kept-alive
 * connection each way), the gap between streamed chunks both ways, and the
 * worker's CPU per proxied MiB of answer.
 *
 * The fake provider is a child process on loopback; the gateway runs in
 * this process (its listener on 127.0.0.1, as for a host-network run; a
 * sandbox of its own adds the bridge's relay in front).
 *
 *   cmake --build build --target bench_gateway
 *   build/bench/bench_gateway [calls]
 */
#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <curl/curl.h>
#include <jansson.h>

#include "worker/gateway.h"

#define BIG_MB    64
#define CHUNKS    20
#define CHUNK_GAP 2000 /* µs between the streamed chunks */

static double now_us(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec * 1e6 + (double)ts.tv_nsec / 1e3;
}

static double cpu_us(void)
{
	struct rusage ru;
	getrusage(RUSAGE_SELF, &ru);
	return (double)(ru.ru_utime.tv_sec + ru.ru_stime.tv_sec) * 1e6 + (double)(ru.ru_utime.tv_usec + ru.ru_stime.tv_usec);
}

static int send_all(int fd, const void *p, size_t n)
{
	const char *c = p;
	while (n) {
		ssize_t w = send(fd, c, n, MSG_NOSIGNAL);
		if (w <= 0)
			return -1;
		c += w;
		n -= (size_t)w;
	}
	return 0;
}

/* The fake provider: keep-alive, Content-Length requests; a call answers
 * a short SSE body at once, ?kind=stream CHUNKS events CHUNK_GAP µs apart,
 * ?kind=big BIG_MB MiB (all model calls: the gateway meters them). */
static void provider(int lfd)
{
	signal(SIGCHLD, SIG_IGN);
	for (;;) {
		int c = accept(lfd, NULL, NULL);
		if (c < 0)
			continue;
		if (fork() != 0) {
			close(c);
			continue;
		}
		prctl(PR_SET_PDEATHSIG, SIGKILL, 0, 0, 0);
		int one = 1;
		setsockopt(c, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
		static char buf[1 << 16];
		size_t have = 0;
		for (;;) {
			char *e;
			while (!(e = memmem(buf, have, "\r\n\r\n", 4))) {
				ssize_t n = recv(c, buf + have, sizeof(buf) - 1 - have, 0);
				if (n <= 0)
					_exit(0);
				have += (size_t)n;
				buf[have] = '\0';
			}
			size_t hl = (size_t)(e - buf) + 4;
			char *cl = strcasestr(buf, "content-length:");
			size_t blen = cl && cl < e ? strtoul(cl + 15, NULL, 10) : 0;
			while (have < hl + blen) {
				ssize_t n = recv(c, buf + have, sizeof(buf) - 1 - have, 0);
				if (n <= 0)
					_exit(0);
				have += (size_t)n;
				buf[have] = '\0';
			}
			int big = strstr(buf, "kind=big") && strstr(buf, "kind=big") < e;
			int stream = strstr(buf, "kind=stream") && strstr(buf, "kind=stream") < e;
			memmove(buf, buf + hl + blen, have - hl - blen);
			have -= hl + blen;
			static const char ev[] = "data: {\"choices\":[{\"index\":0,\"delta\":{\"content\":\"hi\"}}]}\n\n";
			char head[256];
			if (big) {
				size_t total = (size_t)BIG_MB << 20;
				snprintf(head, sizeof(head), "HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nContent-Length: %zu\r\n\r\n", total);
				send_all(c, head, strlen(head));
				static char blk[1 << 16];
				memset(blk, 'x', sizeof(blk));
				for (size_t o = 0; o < total; o += sizeof(blk))
					send_all(c, blk, sizeof(blk));
			} else if (stream) {
				snprintf(head, sizeof(head), "HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nContent-Length: %zu\r\n\r\n",
				         (sizeof(ev) - 1) * CHUNKS);
				send_all(c, head, strlen(head));
				for (int i = 0; i < CHUNKS; i++) {
					send_all(c, ev, sizeof(ev) - 1);
					usleep(CHUNK_GAP);
				}
			} else {
				snprintf(head, sizeof(head), "HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nContent-Length: %zu\r\n\r\n",
				         sizeof(ev) - 1);
				send_all(c, head, strlen(head));
				send_all(c, ev, sizeof(ev) - 1);
			}
		}
	}
}

static int dial(int port)
{
	int fd = socket(AF_INET, SOCK_STREAM, 0);
	struct sockaddr_in in = { .sin_family = AF_INET, .sin_port = htons((unsigned short)port) };
	in.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
	if (connect(fd, (struct sockaddr *)&in, sizeof(in)) != 0) {
		perror("connect");
		exit(1);
	}
	int one = 1;
	setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
	return fd;
}

/*
 * One call on fd: sends the request, returns µs to the first body byte;
 * reads the whole answer (Content-Length or chunked) and fills gaps[] with
 * the arrival time of each read after the first (when gaps).  *bytes: body
 * bytes as received.
 */
static double call(int fd, const char *path, const char *prefix, const char *key, double *arrivals, int *narr,
                   size_t *bytes)
{
	static const char body[] = "{\"model\":\"m\",\"messages\":[]}";
	char req[512];
	int n = snprintf(req, sizeof(req),
	                 "POST %s%s HTTP/1.1\r\nHost: 127.0.0.1\r\nAuthorization: Bearer %s\r\nContent-Type: application/json\r\n"
	                 "Content-Length: %zu\r\n\r\n%s",
	                 prefix, path, key, sizeof(body) - 1, body);
	double t0 = now_us(), first = -1;
	send_all(fd, req, (size_t)n);
	static char buf[1 << 16];
	size_t have = 0, hl = 0;
	long long clen = -1;
	int chunked = 0;
	*bytes = 0;
	if (narr)
		*narr = 0;
	for (;;) {
		ssize_t r = recv(fd, buf + have, sizeof(buf) - 1 - have, 0);
		if (r <= 0) {
			fprintf(stderr, "connection closed\n");
			exit(1);
		}
		double t = now_us();
		have += (size_t)r;
		buf[have] = '\0';
		if (!hl) {
			char *e = memmem(buf, have, "\r\n\r\n", 4);
			if (!e)
				continue;
			hl = (size_t)(e - buf) + 4;
			char *cl = strcasestr(buf, "content-length:");
			if (cl && cl < e)
				clen = strtoll(cl + 15, NULL, 10);
			chunked = !!strcasestr(buf, "transfer-encoding: chunked");
			memmove(buf, buf + hl, have - hl);
			have -= hl;
			if (!have)
				continue;
		}
		if (first < 0)
			first = t - t0;
		if (narr && *narr < 4096)
			arrivals[(*narr)++] = t;
		*bytes += have;
		/* The end: the length reached, or the chunked terminator. */
		if (clen >= 0 && (long long)*bytes >= clen)
			break;
		if (chunked && have >= 5 && !memcmp(buf + have - 5, "0\r\n\r\n", 5))
			break;
		if (chunked && have < 5) {
			/* keep a tail to find a terminator split across reads */
			continue;
		}
		if (chunked) {
			memmove(buf, buf + have - 5, 5);
			have = 5;
			*bytes -= 5;
		} else {
			have = 0;
		}
	}
	return first;
}

static int cmp(const void *a, const void *b)
{
	double x = *(const double *)a, y = *(const double *)b;
	return x < y ? -1 : x > y;
}

static void pct(const char *what, double *v, int n)
{
	qsort(v, (size_t)n, sizeof(double), cmp);
	printf("  %-26s p50 %8.1f µs   p99 %8.1f µs\n", what, v[n / 2], v[(n * 99) / 100]);
}

int main(int argc, char **argv)
{
	setvbuf(stdout, NULL, _IONBF, 0);
	int calls = argc > 1 ? (int)strtol(argv[1], NULL, 10) : 200;
	if (calls < 10)
		calls = 10;
	curl_global_init(CURL_GLOBAL_DEFAULT);
	int lfd = socket(AF_INET, SOCK_STREAM, 0);
	struct sockaddr_in in = { .sin_family = AF_INET };
	in.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
	socklen_t sl = sizeof(in);
	if (bind(lfd, (struct sockaddr *)&in, sizeof(in)) != 0 || listen(lfd, 16) != 0 ||
	    getsockname(lfd, (struct sockaddr *)&in, &sl) != 0)
		return 1;
	int port = ntohs(in.sin_port);
	pid_t pp = fork();
	if (pp == 0) {
		prctl(PR_SET_PDEATHSIG, SIGKILL, 0, 0, 0);
		provider(lfd);
		_exit(0);
	}
	close(lfd);

	char allow_s[64];
	snprintf(allow_s, sizeof(allow_s), "127.0.0.1:%d", port);
	char *allow[] = { allow_s, NULL };
	worker_gateway_conf_t conf = { .allow = allow, .nallow = 1, .body_max = 1 << 20, .timeout_sec = 60, .bridge_path = "" };
	char base[64];
	snprintf(base, sizeof(base), "http://127.0.0.1:%d/v1", port);
	json_t *vars = json_pack("{s:s,s:s}", "OPENAI_BASE_URL", base, "OPENAI_API_KEY", "sk-bench-real");
	worker_gateway_args_t a = { .run_id = "bench", .variables = vars, .meta_dir = "/tmp", .host_net = 1, .wake_fd = -1 };
	worker_gateway_t *g = NULL;
	char err[256];
	if (worker_gateway_open(&conf, &a, &g, err, sizeof(err)) < 0 || !g) {
		fprintf(stderr, "gateway: %s\n", err);
		return 1;
	}
	const char *gurl = json_string_value(json_object_get(vars, "OPENAI_BASE_URL"));
	const char *token = json_string_value(json_object_get(vars, "OPENAI_API_KEY"));
	int gport = (int)strtol(strrchr(gurl, ':') + 1, NULL, 10);

	double *d = calloc((size_t)calls, sizeof(double)), *gw = calloc((size_t)calls, sizeof(double));
	size_t bytes;
	int dfd = dial(port), gfd = dial(gport);
	/* warm both paths (the gateway's upstream connection is kept) */
	call(dfd, "/chat/completions", "/v1", "sk-bench-real", NULL, NULL, &bytes);
	call(gfd, "/chat/completions", "/openai", token, NULL, NULL, &bytes);
	for (int i = 0; i < calls; i++) {
		d[i] = call(dfd, "/chat/completions", "/v1", "sk-bench-real", NULL, NULL, &bytes);
		gw[i] = call(gfd, "/chat/completions", "/openai", token, NULL, NULL, &bytes);
	}
	printf("first byte of the answer, %d calls each (keep-alive)\n", calls);
	double dm = 0, gm = 0;
	pct("straight to the provider", d, calls);
	dm = d[calls / 2];
	pct("through the gateway", gw, calls);
	gm = gw[calls / 2];
	printf("  added at p50: %.1f µs\n", gm - dm);

	/* Streamed chunks: the gap between arrivals, both ways. */
	static double arr[4096];
	int na;
	double gaps_d[4096], gaps_g[4096];
	int nd = 0, ng = 0;
	for (int r = 0; r < 10; r++) {
		call(dfd, "/chat/completions?kind=stream", "/v1", "sk-bench-real", arr, &na, &bytes);
		for (int i = 1; i < na && nd < 4096; i++)
			gaps_d[nd++] = arr[i] - arr[i - 1];
		call(gfd, "/chat/completions?kind=stream", "/openai", token, arr, &na, &bytes);
		for (int i = 1; i < na && ng < 4096; i++)
			gaps_g[ng++] = arr[i] - arr[i - 1];
	}
	printf("streamed chunks (%d events %d µs apart, 10 answers): reads %d straight, %d through\n", CHUNKS, CHUNK_GAP,
	       nd + 10, ng + 10);
	if (nd > 1 && ng > 1) {
		pct("gap straight", gaps_d, nd);
		pct("gap through the gateway", gaps_g, ng);
	}

	/* CPU per proxied MiB: the client's own reading measured straight,
	 * then through; the difference is the gateway's. */
	double c0 = cpu_us(), t0 = now_us();
	call(dfd, "/chat/completions?kind=big", "/v1", "sk-bench-real", NULL, NULL, &bytes);
	double c_direct = cpu_us() - c0, t_direct = now_us() - t0;
	c0 = cpu_us();
	t0 = now_us();
	call(gfd, "/chat/completions?kind=big", "/openai", token, NULL, NULL, &bytes);
	double c_gw = cpu_us() - c0, t_gw = now_us() - t0;
	printf("%d MiB answer: straight %.0f ms (client CPU %.0f ms), through %.0f ms (CPU %.0f ms)\n", BIG_MB,
	       t_direct / 1e3, c_direct / 1e3, t_gw / 1e3, c_gw / 1e3);
	printf("  gateway CPU per proxied MiB: %.2f ms\n", (c_gw - c_direct) / 1e3 / BIG_MB);
	free(d);
	free(gw);
	close(dfd);
	close(gfd);
	worker_gateway_stop(g);
	json_decref(vars);
	kill(pp, SIGKILL);
	waitpid(pp, NULL, 0);
	return 0;
}
