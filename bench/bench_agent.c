/*
 * bench/bench_agent.c - runnel-agent's own overhead: from the moment the
 * benchmark starts the program (fork) to its first model request arriving
 * at a loopback fake Chat Completions server.  That covers exec, dynamic
 * linking, reading the turn line, skill discovery and building the
 * request.  The loader's share (exec and linking libcurl's ~30 libraries)
 * is measured alone with `runnel-agent --help` and subtracted: what is
 * left is the loop's own overhead, whose goal is 5 ms or less.  Printed,
 * never asserted.
 *
 *   bench_agent RUNNEL_AGENT [runs]
 */
#include <fcntl.h>
#include <signal.h>
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

static long long baseline_us = -1;   /* median exec + link + exit */

/* The loader's share: `runnel-agent --help` from fork to exit. */
static void baseline(const char *bin, int runs)
{
	long long *lat = calloc((size_t)runs, sizeof(*lat));
	int got = 0;
	for (int i = 0; i < runs; i++) {
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
		lat[got++] = now_us() - t0;
	}
	qsort(lat, (size_t)got, sizeof(*lat), cmp);
	baseline_us = lat[got / 2];
	printf("%-28s runs %3d  min %6.2f ms  median %6.2f ms  p90 %6.2f ms\n", "exec + link (--help)", got,
	       (double)lat[0] / 1000.0, (double)lat[got / 2] / 1000.0, (double)lat[(got * 9) / 10] / 1000.0);
	free(lat);
}

/* Runs the agent `runs` times; prints min / median / p90 in ms. */
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
	long long *lat = calloc((size_t)runs, sizeof(*lat));
	int got = 0;
	for (int i = 0; i < runs; i++) {
		ap_t a;
		long long t0 = now_us();
		if (ap_start(&a, bin, args, env, turn) < 0)
			break;
		ap_finish(&a, 10000);
		ap_free(&a);
		if (fakechat_requests(&f) == i + 1)
			lat[got++] = f.at_us[i] - t0;
	}
	fakechat_stop(&f);
	if (!got) {
		printf("%-28s no request arrived\n", label);
		free(lat);
		return;
	}
	qsort(lat, (size_t)got, sizeof(*lat), cmp);
	printf("%-28s runs %3d  min %6.2f ms  median %6.2f ms  p90 %6.2f ms\n", label, got,
	       (double)lat[0] / 1000.0, (double)lat[got / 2] / 1000.0, (double)lat[(got * 9) / 10] / 1000.0);
	if (baseline_us >= 0)
		printf("%-28s median %6.2f ms  (goal <= 5 ms)\n", "  loop's own overhead",
		       (double)(lat[got / 2] - baseline_us) / 1000.0);
	free(lat);
}

int main(int argc, char **argv)
{
	if (argc < 2) {
		fprintf(stderr, "usage: bench_agent RUNNEL_AGENT [runs]\n");
		return 2;
	}
	int runs = argc > 2 ? atoi(argv[2]) : 50;
	if (runs < 1 || runs > 250)
		runs = 50;
	char ws[] = "/tmp/runnel-bench-agent-XXXXXX";
	if (!mkdtemp(ws))
		return 1;
	char skills[512], path[600];
	snprintf(skills, sizeof(skills), "%s/skills", ws);
	mkdir(skills, 0755);
	baseline(argv[1], runs);
	series("start -> first request", argv[1], ws, "/nonexistent", runs);
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
	series("  with 3 skills", argv[1], ws, skills, runs);
	char cmd[700];
	snprintf(cmd, sizeof(cmd), "rm -rf '%s'", ws);
	if (system(cmd) != 0)
		fprintf(stderr, "bench_agent: could not remove %s\n", ws);
	return 0;
}
