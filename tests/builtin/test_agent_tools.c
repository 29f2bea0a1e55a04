/*
 * tests/builtin/test_agent_tools.c - runnel-agent's tools, skills, asks and
 * stop: workspace confinement (.., absolute paths, symlinks out, the skills
 * directory read-only), bash's output cap and timeout, skill discovery from
 * SKILL.md front matter into the system prompt, permission modes ask
 * (allow and reject replies on stdin), deny and bypass, and SIGTERM or a
 * cancel line ending a model request or a tool process at once.
 *
 *   test_agent_tools RUNNEL_AGENT
 */
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <jansson.h>

#include "agent/ctl.h"
#include "agent/skills.h"
#include "agent/tools.h"
#include "proto/utf8.h"
#include "tests/builtin/agentproc.h"
#include "tests/builtin/fakechat.h"
#include "tests/support/harness.h"

static const char *agent_bin;

static void check_open(const agent_tools_cfg_t *cfg, const char *path, int write, const char *want_err)
{
	char err[512] = "";
	int fd = agent_tools_open(cfg, path, write ? O_WRONLY | O_CREAT | O_TRUNC : O_RDONLY, 0644, write, err,
	                          sizeof(err));
	if (want_err) {
		TH_CHECK(fd < 0 && th_streq(err, want_err), "%s: got fd %d err \"%s\", want \"%s\"", path, fd, err, want_err);
	} else {
		TH_CHECK(fd >= 0, "%s: %s", path, err);
	}
	if (fd >= 0)
		close(fd);
}

static void test_confinement(void)
{
	const char *root = th_tmpdir();
	const char *ws = th_strf("%s/ws", root), *sk = th_strf("%s/skills", root);
	TH_REQUIRE(mkdir(ws, 0755) == 0 && mkdir(sk, 0755) == 0 && mkdir(th_strf("%s/t", sk), 0755) == 0);
	TH_REQUIRE(th_file_write(th_strf("%s/secret", root), "s", strlen("s")) == 0);
	TH_REQUIRE(th_file_write(th_strf("%s/t/SKILL.md", sk), "x", strlen("x")) == 0);
	TH_REQUIRE(th_file_write(th_strf("%s/in.txt", ws), "in", strlen("in")) == 0);
	TH_REQUIRE(symlink("/etc/passwd", th_strf("%s/abs-link", ws)) == 0);
	TH_REQUIRE(symlink("../secret", th_strf("%s/up-link", ws)) == 0);
	TH_REQUIRE(symlink("..", th_strf("%s/dir-up", ws)) == 0);
	TH_REQUIRE(symlink("in.txt", th_strf("%s/ok-link", ws)) == 0);
	agent_tools_cfg_t cfg = { .workspace = ws, .skills = sk, .bash_timeout_ms = 2000, .output_max = 1024 };

	check_open(&cfg, "in.txt", 0, NULL);
	check_open(&cfg, th_strf("%s/in.txt", ws), 0, NULL);
	check_open(&cfg, "ok-link", 0, NULL);
	check_open(&cfg, "sub/dir/new.txt", 1, NULL);
	TH_CHECK(access(th_strf("%s/sub/dir/new.txt", ws), F_OK) == 0, "parents created");
	check_open(&cfg, th_strf("%s/t/SKILL.md", sk), 0, NULL);

	check_open(&cfg, "../secret", 0, "path \"../secret\" is outside the workspace");
	check_open(&cfg, "a/../../secret", 1, "path \"a/../../secret\" is outside the workspace");
	check_open(&cfg, "/etc/passwd", 0, "path \"/etc/passwd\" is outside the workspace");
	check_open(&cfg, th_strf("%s/secret", root), 0, th_strf("path \"%s/secret\" is outside the workspace", root));
	check_open(&cfg, "abs-link", 0, "path \"abs-link\" is outside the workspace");
	check_open(&cfg, "up-link", 0, "path \"up-link\" is outside the workspace");
	check_open(&cfg, "dir-up/secret", 0, "path \"dir-up/secret\" is outside the workspace");
	check_open(&cfg, "up-link", 1, "path \"up-link\" is outside the workspace");
	check_open(&cfg, "dir-up/new", 1, "path \"dir-up/new\" is outside the workspace");
	check_open(&cfg, th_strf("%s/t/SKILL.md", sk), 1,
	           th_strf("path \"%s/t/SKILL.md\" is outside the workspace", sk));
	check_open(&cfg, "", 0, "the path is empty");
	TH_CHECK(access(th_strf("%s/new", root), F_OK) != 0, "nothing written outside");

	/* Through the tools: read, list, write, errors as results. */
	agent_tool_out_t out;
	json_t *args = json_pack("{s:s}", "path", "../secret");
	agent_tools_run(&cfg, "read_file", args, &out);
	TH_CHECK(!out.ok && th_streq(out.error, "path \"../secret\" is outside the workspace"), "%s", out.error);
	agent_tool_out_free(&out);
	json_decref(args);

	args = json_pack("{s:s,s:s}", "path", "assets/a.txt", "content", "hello");
	agent_tools_run(&cfg, "write_file", args, &out);
	TH_CHECK(out.ok && th_streq(out.text, "wrote 5 bytes to assets/a.txt"), "%s", out.text);
	agent_tool_out_free(&out);
	json_decref(args);

	args = json_pack("{s:s,s:b}", "path", ".", "recursive", 1);
	agent_tools_run(&cfg, "list_files", args, &out);
	TH_CHECK(out.ok && strstr(out.text, "assets/\nassets/a.txt\n") && strstr(out.text, "sub/dir/new.txt\n"),
	         "%s", out.text);
	TH_CHECK(strstr(out.text, "dir-up\n"), "links listed, not followed: %s", out.text);
	agent_tool_out_free(&out);
	json_decref(args);

	/* bash: cap, timeout, exit status, the workspace as cwd. */
	args = json_pack("{s:s}", "command", "pwd >&2; head -c 5000 /dev/zero | tr '\\0' x; echo; exit 3");
	agent_tools_run(&cfg, "bash", args, &out);
	TH_CHECK(!out.ok && th_streq(out.error, "the command exited with status 3"), "%s", out.error);
	TH_CHECK(strstr(out.text, "[... output cut]") && strlen(out.text) < 1200, "capped: %zu", strlen(out.text));
	json_t *o = json_object_get(out.result, "output");
	TH_CHECK(json_integer_value(json_object_get(out.result, "exitCode")) == 3);
	TH_CHECK(o && strstr(json_string_value(o), ws), "cwd is the workspace: %s", json_string_value(o));
	agent_tool_out_free(&out);
	json_decref(args);

	int64_t t0 = th_now_ms();
	args = json_pack("{s:s,s:i}", "command", "sleep 30 & sleep 30", "timeout_sec", 1);
	agent_tools_run(&cfg, "bash", args, &out);
	int64_t took = th_now_ms() - t0;
	TH_CHECK(!out.ok && th_streq(out.error, "the command timed out after 1 s"), "%s", out.error);
	TH_CHECK(took < 3000, "%lld ms", (long long)took);
	agent_tool_out_free(&out);
	json_decref(args);

	args = json_pack("{s:i}", "command", 3);
	agent_tools_run(&cfg, "bash", args, &out);
	TH_CHECK(!out.ok && th_streq(out.error, "bash needs a string \"command\""), "%s", out.error);
	agent_tool_out_free(&out);
	json_decref(args);
}

static void test_front_matter(void)
{
	char name[64], desc[256];
	const char *ok = "---\nname: tables\ndescription: \"Edit tables: add rows\"\nother: x\n---\n# Tables\n";
	TH_CHECK(agent_skills_front_matter(ok, strlen(ok), name, sizeof(name), desc, sizeof(desc)) == 0);
	TH_CHECK(th_streq(name, "tables") && th_streq(desc, "Edit tables: add rows"), "%s / %s", name, desc);
	const char *crlf = "\xEF\xBB\xBF---\r\nname: 'x'\r\n---\r\n";
	TH_CHECK(agent_skills_front_matter(crlf, strlen(crlf), name, sizeof(name), desc, sizeof(desc)) == 0);
	TH_CHECK(th_streq(name, "x") && th_streq(desc, ""));
	const char *none = "# no front matter\nname: y\n";
	TH_CHECK(agent_skills_front_matter(none, strlen(none), name, sizeof(name), desc, sizeof(desc)) == -1);
	const char *open_fm = "---\nname: z\n";
	TH_CHECK(agent_skills_front_matter(open_fm, strlen(open_fm), name, sizeof(name), desc, sizeof(desc)) == -1);

	/* Bytes that are not UTF-8 never reach the request as such. */
	const char *dir = th_tmpdir();
	TH_REQUIRE(mkdir(th_strf("%s/bad", dir), 0755) == 0);
	static const char bad[] = "---\nname: b\xff\ndescription: \xc3\n---\n";
	TH_REQUIRE(th_file_write(th_strf("%s/bad/SKILL.md", dir), bad, sizeof(bad) - 1) == 0);
	char *prompt = NULL;
	TH_CHECK(agent_skills_scan(dir, &prompt) == 1);
	TH_CHECK(prompt && proto_utf8_valid(prompt, strlen(prompt)) && strstr(prompt, "- b\xef\xbf\xbd: \xef\xbf\xbd ("),
	         "%s", prompt ? prompt : "-");
	free(prompt);
	TH_CHECK(agent_skills_scan(th_strf("%s/missing", dir), &prompt) == 0 && !prompt);
}

/* A workspace, a skills dir with one skill, and the fake server. */
typedef struct env {
	const char *ws, *skills;
	fakechat_t f;
	char base[128];
} env_t;

static void env_start(env_t *e, const fc_resp_t *script, int n)
{
	const char *root = th_tmpdir();
	e->ws = th_strf("%s/ws", root);
	e->skills = th_strf("%s/skills", root);
	TH_REQUIRE(mkdir(e->ws, 0755) == 0 && mkdir(e->skills, 0755) == 0);
	TH_REQUIRE(fakechat_start(&e->f, script, n) == 0);
	snprintf(e->base, sizeof(e->base), "OPENAI_BASE_URL=%s", e->f.base_url);
}

static void env_run(env_t *e, ap_t *a, const char *perm)
{
	const char *env[] = { e->base, "OPENAI_API_KEY=sk-tools-test", NULL };
	const char *args[] = { "--workspace", e->ws, "--skills-dir", e->skills, NULL };
	char turn[512];
	snprintf(turn, sizeof(turn),
	         "{\"run_id\":\"r\",\"prompt\":\"go\",\"system_prompt\":\"Base prompt.\",\"model\":\"m\",\"history\":[],"
	         "\"mcp_servers\":[],\"permission_mode\":\"%s\",\"ask_timeout_sec\":5}",
	         perm);
	TH_REQUIRE(ap_start(a, agent_bin, args, env, turn) == 0);
}

static void test_skills_prompt(void)
{
	static const fc_resp_t script[] = {
		{ .body = FC_CALL(0, "c1", "bash", "{\\\"command\\\":\\\"sh /SKILLS/tables/run.sh\\\"}") FC_CALLS FC_DONE },
		{ .body = FC_TEXT("ok") FC_STOP FC_DONE },
	};
	/* The script path is only known once the dirs exist: patch it in. */
	env_t e;
	fc_resp_t s2[2];
	memcpy(s2, script, sizeof(s2));
	const char *root = th_tmpdir();
	e.ws = th_strf("%s/ws", root);
	e.skills = th_strf("%s/skills", root);
	TH_REQUIRE(mkdir(e.ws, 0755) == 0 && mkdir(e.skills, 0755) == 0);
	TH_REQUIRE(mkdir(th_strf("%s/tables", e.skills), 0755) == 0 && mkdir(th_strf("%s/notes", e.skills), 0755) == 0);
	static const char md[] = "---\nname: tables\ndescription: Edit tables\n---\nRun run.sh\n";
	TH_REQUIRE(th_file_write(th_strf("%s/tables/SKILL.md", e.skills), md, sizeof(md) - 1) == 0);
	TH_REQUIRE(th_file_write(th_strf("%s/tables/run.sh", e.skills), "echo skill-ran\n", strlen("echo skill-ran\n")) == 0);
	TH_REQUIRE(th_file_write(th_strf("%s/notes/SKILL.md", e.skills), "no front matter\n", strlen("no front matter\n")) == 0);
	char *body = strdup(script[0].body);
	char *hit = strstr(body, "/SKILLS");
	char *patched = th_strf("%.*s%s%s", (int)(hit - body), body, e.skills, hit + 7);
	free(body);
	s2[0].body = patched;
	TH_REQUIRE(fakechat_start(&e.f, s2, 2) == 0);
	snprintf(e.base, sizeof(e.base), "OPENAI_BASE_URL=%s", e.f.base_url);
	ap_t a;
	env_run(&e, &a, "bypass");
	TH_CHECK(ap_finish(&a, 20000) == 0);
	TH_CHECK(strstr(a.out, "\"message\":\"Loaded 2 skills, 0 MCP tools\""), "%s", a.out);
	TH_CHECK(strstr(a.out, "skill-ran"), "the skill's script ran: %s", a.out);
	TH_REQUIRE(fakechat_requests(&e.f) >= 1);
	json_t *req = json_loads(e.f.bodies[0], 0, NULL);
	const char *sys = json_string_value(json_object_get(json_array_get(json_object_get(req, "messages"), 0), "content"));
	TH_CHECK(sys && !strncmp(sys, "Base prompt.\n\nSkills are installed under ", 41), "%s", sys ? sys : "-");
	TH_CHECK(sys && strstr(sys, th_strf("- notes: no description (%s/notes/SKILL.md)\n", e.skills)), "%s", sys ? sys : "-");
	TH_CHECK(sys && strstr(sys, th_strf("- tables: Edit tables (%s/tables/SKILL.md)\n", e.skills)), "%s", sys ? sys : "-");
	json_decref(req);
	ap_free(&a);
	fakechat_stop(&e.f);
}

static const fc_resp_t bash_then_done[] = {
	{ .body = FC_CALL(0, "c1", "bash", "{\\\"command\\\":\\\"echo ran > ran.txt\\\"}") FC_CALLS FC_DONE },
	{ .body = FC_TEXT("finished") FC_STOP FC_DONE },
};

static void test_ask(const char *reply, int want_ran, const char *want_error)
{
	env_t e;
	env_start(&e, bash_then_done, 2);
	ap_t a;
	env_run(&e, &a, "ask");
	TH_CHECK(ap_wait_for(&a, "\"status\":\"open\"", 10000), "ask emitted: %s", a.out ? a.out : "");
	TH_CHECK(strstr(a.out, "{\"type\":\"ask\",\"id\":\"ask_1\",\"kind\":\"permission\",\"title\":\"Run: echo ran > ran.txt\","
	                       "\"tool\":\"bash\",\"args\":{\"command\":\"echo ran > ran.txt\"},\"options\":[{\"id\":\"allow_once\","
	                       "\"label\":\"Allow\"},{\"id\":\"reject_once\",\"label\":\"Reject\"}],\"status\":\"open\""),
	         "%s", a.out);
	TH_CHECK(access(th_strf("%s/ran.txt", e.ws), F_OK) != 0, "nothing ran before the reply");
	/* A reply to another ask first: ignored. */
	ap_write(&a, "{\"type\":\"reply\",\"id\":\"ask_9\",\"option\":\"allow_once\"}");
	ap_write(&a, reply);
	TH_CHECK(ap_finish(&a, 20000) == 0);
	TH_CHECK((access(th_strf("%s/ran.txt", e.ws), F_OK) == 0) == want_ran, "ran: %d", want_ran);
	if (!want_ran)
		TH_CHECK(strstr(a.out, "\"status\":\"failed\"") && strstr(a.out, th_strf("\"error\":{\"message\":\"%s\"}", want_error)),
		         "%s", a.out);
	TH_CHECK(strstr(a.out, "\"type\":\"result\",\"message\":\"finished\""));
	ap_free(&a);
	fakechat_stop(&e.f);
}

static void test_deny(void)
{
	env_t e;
	env_start(&e, bash_then_done, 2);
	ap_t a;
	env_run(&e, &a, "deny");
	TH_CHECK(ap_finish(&a, 20000) == 0);
	TH_CHECK(!strstr(a.out, "\"type\":\"ask\""));
	TH_CHECK(strstr(a.out, "\"error\":{\"message\":\"refused: the run's permission mode is deny\"}"), "%s", a.out);
	TH_CHECK(access(th_strf("%s/ran.txt", e.ws), F_OK) != 0);
	json_t *req = json_loads(e.f.bodies[1], 0, NULL);
	json_t *msgs = json_object_get(req, "messages");
	TH_CHECK(th_streq(json_string_value(json_object_get(json_array_get(msgs, json_array_size(msgs) - 1), "content")),
	                  "refused: the run's permission mode is deny"));
	json_decref(req);
	ap_free(&a);
	fakechat_stop(&e.f);
}

static int request_in(void *arg)
{
	return fakechat_requests(arg) >= 1;
}

/* The pid file holds a whole line (the shell creates it before writing). */
static int file_there(void *arg)
{
	char *c = th_file_read(arg, NULL);
	int ok = c && strchr(c, '\n') && strtol(c, NULL, 10) > 0;
	free(c);
	return ok;
}

/* SIGTERM during a long tool, during a stalled model request, and a cancel
 * line: the agent is gone within a second and so is its tool process. */
static void test_stop(int how)
{
	static const fc_resp_t tool[] = {
		{ .body = FC_CALL(0, "c1", "bash", "{\\\"command\\\":\\\"echo $$ > pid; sleep 60\\\"}") FC_CALLS FC_DONE },
	};
	static const fc_resp_t stall[] = { { .body = FC_TEXT("thinking"), .stall = 1 } };
	env_t e;
	env_start(&e, how == 1 ? stall : tool, 1);
	ap_t a;
	env_run(&e, &a, "bypass");
	if (how == 1) {
		TH_CHECK(th_wait_until(request_in, &e.f, 10000), "the model request is in flight");
	} else {
		TH_CHECK(ap_wait_for(&a, "\"status\":\"running\"", 10000));
		TH_CHECK(th_wait_until(file_there, (void *)th_strf("%s/pid", e.ws), 5000), "the tool runs");
	}
	int64_t t0 = th_now_ms();
	if (how == 2)
		ap_write(&a, "{\"type\":\"cancel\"}");
	else
		kill(a.pid, SIGTERM);
	TH_CHECK(ap_finish(&a, 5000) == 0);
	int64_t took = th_now_ms() - t0;
	/* "At once": far below the 60 s tool or stalled stream; the margin
	 * covers a sanitizer build exiting on a loaded machine. */
	TH_CHECK(took < 2000, "stopped in %lld ms", (long long)took);
	TH_CHECK(WIFEXITED(a.status) && WEXITSTATUS(a.status) == 0, "status %d", a.status);
	TH_CHECK(!strstr(a.out ? a.out : "", "\"type\":\"result\"") && !strstr(a.out ? a.out : "", "\"type\":\"error\""),
	         "no terminal line after a stop (the runner writes it): %s", a.out ? a.out : "");
	if (how != 1) {
		char *pid = th_file_read(th_strf("%s/pid", e.ws), NULL);
		TH_CHECK(pid && strtol(pid, NULL, 10) > 0 && kill((pid_t)strtol(pid, NULL, 10), 0) < 0 && errno == ESRCH, "the tool process is gone");
		free(pid);
	}
	ap_free(&a);
	fakechat_stop(&e.f);
}

int main(int argc, char **argv)
{
	th_init("agent_tools");
	TH_REQUIRE(argc == 2, "usage: test_agent_tools RUNNEL_AGENT");
	agent_bin = argv[1];
	test_confinement();
	test_front_matter();
	test_skills_prompt();
	test_ask("{\"type\":\"reply\",\"id\":\"ask_1\",\"option\":\"allow_once\"}", 1, NULL);
	test_ask("{\"type\":\"reply\",\"id\":\"ask_1\",\"option\":\"reject_once\"}", 0,
	         "refused: the user rejected this tool call");
	test_ask("{\"type\":\"reply\",\"id\":\"ask_1\",\"reject\":true}", 0, "refused: the user rejected this tool call");
	test_ask("{\"type\":\"reply\",\"id\":\"ask_1\",\"reject\":true,\"expired\":true}", 0,
	         "refused: nobody answered the permission request in time");
	test_ask("{\"type\":\"reply\",\"id\":\"ask_1\",\"text\":\"go ahead\"}", 0, "refused: the user rejected this tool call");
	test_deny();
	test_stop(0);
	test_stop(1);
	test_stop(2);
	return th_done();
}
