/*
 * bench/bench_agent.c - runnel-agent's own overhead: from the moment the
 * benchmark starts the program (fork) to its first model request arriving
 * at a loopback fake Chat Completions server.  That covers exec, dynamic
 * linking, reading the turn line, skill discovery and building the
 * request.  The loader's share (exec and linking libcurl's ~30 libraries)
 * is measured alone with `runnel-agent --help`, interleaved with the real
 * runs so that load on the machine hits both alike, and subtracted pair by
 * pair: what is left is the loop's own overhead, whose goal is 5 ms or less.
 * Printed, never asserted.
 *
 *   bench_agent RUNNEL_AGENT [runs]
 */
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "tests/builtin/agentproc.h"
#include "tests/builtin/fakechat.h"

static long long now_us(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (long long)ts.tv_sec * 1000000 + ts.tv_nsec / 1000;
}

static int cmp(const void *a, const void *b)
{
	long long x = *(const long long *)a, y = *(const long long *)b;
	return x < y ? -1 : x > y;
}

/* `runnel-agent --help` from fork to exit: the loader's share. */
static long long help_us(const char *bin)
{
	long long t0 = now_us();
	pid_t pid = fork();
	if (pid == 0) {
		int fd = open("/dev/null", O_WRONLY);
		dup2(fd, 1);
		execl(bin, bin, "--help", (char *)NULL);
		_exit(127);
	}
	int st;
	waitpid(pid, &st, 0);
	return now_us() - t0;
}

static void print_row(const char *label, long long *v, int n)
{
	qsort(v, (size_t)n, sizeof(*v), cmp);
	printf("%-30s min %6.2f ms  median %6.2f ms  p90 %6.2f ms\n", label, (double)v[0] / 1000.0,
	       (double)v[n / 2] / 1000.0, (double)v[(n * 9) / 10] / 1000.0);
}

/* Runs the agent `runs` times, each after one --help run. */
static void series(const char *label, const char *bin, const char *ws, const char *skills, int runs)
{
	static const fc_resp_t script[] = { { .body = FC_TEXT("ok") FC_STOP FC_DONE } };
	fakechat_t f;
	if (fakechat_start(&f, script, 1) < 0) {
		fprintf(stderr, "bench_agent: cannot start the fake server\n");
		exit(1);
	}
	char base[128];
	snprintf(base, sizeof(base), "OPENAI_BASE_URL=%s", f.base_url);
	const char *env[] = { base, "OPENAI_API_KEY=sk-bench", NULL };
	const char *args[] = { "--workspace", ws, "--skills-dir", skills, NULL };
	const char *turn = "{\"run_id\":\"b\",\"prompt\":\"hi\",\"system_prompt\":\"Be brief.\",\"model\":\"m\",\"skills\":[],"
	                   "\"mcp_servers\":[],\"history\":[],\"permission_mode\":\"bypass\",\"ask_timeout_sec\":600}";
	long long *total = calloc((size_t)runs, sizeof(*total));
	long long *loader = calloc((size_t)runs, sizeof(*loader));
	long long *own = calloc((size_t)runs, sizeof(*own));
	int got = 0;
	for (int i = 0; i < runs; i++) {
		long long h = help_us(bin);
		ap_t a;
		long long t0 = now_us();
		if (ap_start(&a, bin, args, env, turn) < 0)
			break;
		ap_finish(&a, 10000);
		ap_free(&a);
		if (fakechat_requests(&f) == i + 1) {
			total[got] = f.at_us[i] - t0;
			loader[got] = h;
			own[got] = total[got] - h;
			got++;
		}
	}
	fakechat_stop(&f);
	printf("%s (%d runs)\n", label, got);
	if (got) {
		print_row("  start -> first request", total, got);
		print_row("  loader's share (--help)", loader, got);
		print_row("  loop's own overhead", own, got);
		printf("  goal: loop's own overhead <= 5 ms (median %s)\n", own[got / 2] <= 5000 ? "met" : "NOT met");
	}
	free(total);
	free(loader);
	free(own);
}

int main(int argc, char **argv)
{
	if (argc < 2) {
		fprintf(stderr, "usage: bench_agent RUNNEL_AGENT [runs]\n");
		return 2;
	}
	int runs = argc > 2 ? (int)strtol(argv[2], NULL, 10) : 50;
	if (runs < 1 || runs > 250)
		runs = 50;
	char ws[] = "/tmp/runnel-bench-agent-XXXXXX";
	if (!mkdtemp(ws))
		return 1;
	char skills[512], path[600];
	snprintf(skills, sizeof(skills), "%s/skills", ws);
	mkdir(skills, 0755);
	series("no skills, no MCP servers", argv[1], ws, "/nonexistent", runs);
	for (int i = 0; i < 3; i++) {
		snprintf(path, sizeof(path), "%s/s%d", skills, i);
		mkdir(path, 0755);
		snprintf(path, sizeof(path), "%s/s%d/SKILL.md", skills, i);
		FILE *fp = fopen(path, "w");
		if (fp) {
			fprintf(fp, "---\nname: s%d\ndescription: skill %d\n---\nbody\n", i, i);
			fclose(fp);
		}
	}
	series("3 skills", argv[1], ws, skills, runs);
	char cmd[700];
	snprintf(cmd, sizeof(cmd), "rm -rf '%s'", ws);
	if (system(cmd) != 0)
		fprintf(stderr, "bench_agent: could not remove %s\n", ws);
	return 0;
}
