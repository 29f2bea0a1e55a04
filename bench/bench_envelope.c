/*
 * bench/bench_envelope.c - how many typical envelope lines per second one
 * core validates with proto_env_process(), against the goal of 1 M lines/s.
 *
 *   bench_envelope [lines]      (default 1000000)
 *
 * The mix is what a busy agent prints: info/debug logs, steps going running
 * then succeeded with args and results, some lines without ts.  Rates are
 * per CPU second of the benchmark thread, so other load on the machine
 * does not count against them (the wall time is printed too).
 */
#include "proto/envelope.h"

#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define GOAL_LINES_PER_SEC 1000000.0
#define MIX                1000

static double clock_sec(clockid_t id)
{
	struct timespec ts;

	clock_gettime(id, &ts);
	return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

/* Fills line i of the mix; returns its length. */
static int make_line(char *buf, size_t size, int i)
{
	long long ts = 1700000000000LL + i;
	int step = i / 10;

	switch (i % 10) {
	case 0:
	case 1:
	case 2:
	case 3:
		return snprintf(buf, size, "{\"type\":\"log\",\"level\":\"info\",\"message\":"
		                           "\"Loaded %d skills\",\"ts\":%lld}",
		                i % 7, ts);
	case 4:
		return snprintf(buf, size, "{\"type\":\"log\",\"level\":\"debug\",\"message\":"
		                           "\"tool call %d took 12ms\"}",
		                i);
	case 5:
		return snprintf(buf, size, "{\"type\":\"step\",\"id\":\"step_%d\",\"name\":"
		                           "\"recipes/add-node.sh\",\"status\":\"running\",\"args\":"
		                           "{\"nodeType\":\"inference\",\"position\":[120,340]},\"ts\":%lld}",
		                step, ts);
	case 6:
		return snprintf(buf, size, "{\"type\":\"log\",\"level\":\"warn\",\"message\":"
		                           "\"retrying request (attempt 2 of 3)\",\"ts\":%lld}",
		                ts);
	case 7:
		return snprintf(buf, size, "{\"type\":\"step\",\"id\":\"step_%d\",\"name\":"
		                           "\"recipes/add-node.sh\",\"status\":\"succeeded\",\"result\":"
		                           "{\"nodeId\":\"node_%d\"},\"durationMs\":412,\"ts\":%lld}",
		                step, i, ts);
	case 8:
		return snprintf(buf, size, "{\"type\":\"log\",\"level\":\"info\",\"message\":"
		                           "\"Wrote assets/report.md (2.1 kB)\"}");
	default:
		return snprintf(buf, size, "{\"type\":\"log\",\"level\":\"info\",\"message\":"
		                           "\"Thinking about the next edit\",\"ts\":%lld}",
		                ts);
	}
}

int main(int argc, char **argv)
{
	static char lines[MIX][256];
	static size_t lens[MIX];
	long long total = argc > 1 ? strtoll(argv[1], NULL, 10) : 1000000;
	proto_env_line_t out;
	proto_env_t *env;
	size_t bytes = 0, published = 0, invalid = 0;
	double t0, c0, dt, cpu, rate;
	long long n;
	int i;

	if (total <= 0)
		total = 1000000;
	for (i = 0; i < MIX; i++) {
		lens[i] = (size_t)make_line(lines[i], sizeof(lines[i]), i);
		bytes += lens[i];
	}
	env = proto_env_new(0);
	if (!env)
		return 1;
	/* Warm up caches and the allocator. */
	for (i = 0; i < MIX; i++)
		proto_env_process(env, lines[i], lens[i], 1700000000000LL, &out);

	t0 = clock_sec(CLOCK_MONOTONIC);
	c0 = clock_sec(CLOCK_THREAD_CPUTIME_ID);
	for (n = 0; n < total; n++) {
		int k = (int)(n % MIX);

		proto_env_process(env, lines[k], lens[k], 1700000000000LL + n, &out);
		published += out.len;
		invalid += !out.valid;
	}
	/* CPU time of this thread: on a shared machine wall time also counts
	 * the time other processes held the core. */
	cpu = clock_sec(CLOCK_THREAD_CPUTIME_ID) - c0;
	dt = clock_sec(CLOCK_MONOTONIC) - t0;
	rate = (double)total / cpu;
	printf("lines            %lld\n", total);
	printf("avg line bytes   %.1f\n", (double)bytes / MIX);
	printf("invalid lines    %zu\n", invalid);
	printf("open steps       %zu\n", proto_env_open_steps(env));
	printf("cpu seconds      %.3f (wall %.3f)\n", cpu, dt);
	printf("lines/s          %.0f (per CPU second)\n", rate);
	printf("ns/line          %.1f\n", cpu * 1e9 / (double)total);
	printf("MB/s published   %.1f\n", (double)published / cpu / 1e6);
	printf("ratio to goal    %.2f (goal %.0f lines/s)\n", rate / GOAL_LINES_PER_SEC,
	       GOAL_LINES_PER_SEC);
	proto_env_free(env);
	return invalid != 0;
}
