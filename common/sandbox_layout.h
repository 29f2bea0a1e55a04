/*
 * common/sandbox_layout.h - the one owner of the sandbox's layout as the
 * agent sees it: where the workspace, the skills and runnel's own files
 * are, the PATH an agent starts with, and the exit status that says "the
 * setup script failed".  The worker builds the sandbox from these (bwrap
 * binds, warm init, egress bridge) and the programs that run inside it
 * (runnel-agent, the mock agent, the ACP adapter's path mapping) read the
 * same names.  Constants only, so static helpers can include it too.
 */
#ifndef RUNNEL_COMMON_SANDBOX_LAYOUT_H
#define RUNNEL_COMMON_SANDBOX_LAYOUT_H

/* HOME, a private tmpfs. */
#define RN_SANDBOX_HOME "/root"
/* The run's workspace (bound read-write) and the agent's cwd. */
#define RN_SANDBOX_WORKSPACE "/root/workspace"
/* The run's skills, one directory per skill (bound read-only). */
#define RN_SANDBOX_SKILLS "/root/skills"

/* runnel's own files inside the sandbox: helper binaries bound read-only
 * (runnel-warm-init is every bwrap sandbox's first program), the setup
 * script the init writes and the egress socket. */
#define RN_SANDBOX_BIN_DIR       "/run/runnel"
#define RN_SANDBOX_MOCK_AGENT    RN_SANDBOX_BIN_DIR "/runnel-mock-agent"
#define RN_SANDBOX_WARM_INIT     RN_SANDBOX_BIN_DIR "/runnel-warm-init"
#define RN_SANDBOX_EGRESS_BRIDGE RN_SANDBOX_BIN_DIR "/runnel-egress-bridge"
#define RN_SANDBOX_EGRESS_SOCK   RN_SANDBOX_BIN_DIR "/egress.sock"
#define RN_SANDBOX_SETUP_PATH    RN_SANDBOX_BIN_DIR "/setup.sh"
/* The model gateway (worker/gateway.h): the same bridge program in front
 * of the gateway's socket, on its own port. */
#define RN_SANDBOX_GATEWAY_BRIDGE RN_SANDBOX_BIN_DIR "/runnel-gateway-bridge"
#define RN_SANDBOX_GATEWAY_SOCK   RN_SANDBOX_BIN_DIR "/gateway.sock"
#define RN_SANDBOX_GATEWAY_PORT   3129
/* A warm agent's socket directory: bound when its sandbox starts, before
 * any run exists; the run that takes the agent creates the proxy's and the
 * gateway's sockets in it (worker/warm_agent.h). */
#define RN_SANDBOX_SOCK_DIR          RN_SANDBOX_BIN_DIR "/sock"
#define RN_SANDBOX_SOCK_EGRESS_NAME  "egress.sock"
#define RN_SANDBOX_SOCK_GATEWAY_NAME "gateway.sock"

/* The agent's PATH (the /env variables may override it). */
#define RN_SANDBOX_PATH "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"

/* Exit status of the sandbox when the setup script fails; the wrapper
 * below spells the same number. */
#define RN_SANDBOX_SETUP_FAILED     97
#define RN_SANDBOX_SETUP_FAILED_STR "97"

/*
 * The setup script runs before the agent in the same sandbox.  Its stdin is
 * /dev/null (so it cannot eat the agent's turn) and its stdout goes to
 * stderr (so it cannot forge envelope lines).  $0 is the script, "$@" the
 * agent.  Shared by the cold start and the warm one (worker/warm.c).
 */
#define RN_SANDBOX_SETUP_WRAPPER \
	"/bin/sh \"$0\" </dev/null 1>&2 || exit " RN_SANDBOX_SETUP_FAILED_STR "; exec \"$@\""

#endif
