#!/usr/bin/env bash
# Installs the ACP agents runnel knows by preset (agents/package.json, pinned
# by agents/package-lock.json) into one prefix:
#
#   agents/install.sh PREFIX
#
# PREFIX/node_modules then holds @zed-industries/claude-agent-acp (run by
# Node.js; it brings Claude Code as the SDK's cli.js) and
# @zed-industries/codex-acp with its platform binary (a static ELF, no Node
# at run time).  runnel-worker binds PREFIX (--acp-prefix /
# RUNNEL_ACP_PREFIX) read-only into every acp sandbox at /run/runnel/agents
# (worker/agent_acp.h); the container image installs it at /opt/runnel/agents.
#
# The install itself is scripts/npm_prefix.sh (the container image copies
# it beside agents/): idempotent, locked, no package install scripts (none
# of these packages needs one, and the prefix is shared by runs).
set -euo pipefail

here=$(cd "$(dirname "$0")" && pwd)
prefix=${1:?usage: install.sh PREFIX}

claude_js=node_modules/@zed-industries/claude-agent-acp/dist/index.js
codex_bin=node_modules/@zed-industries/codex-acp-linux-x64/bin/codex-acp
case "$(uname -m)" in
aarch64 | arm64) codex_bin=node_modules/@zed-industries/codex-acp-linux-arm64/bin/codex-acp ;;
esac
# Claude Code's SDK needs Node.js 18 or later (tested with 20).
exec "$here/../scripts/npm_prefix.sh" agents/install.sh "$here" "$prefix" 18 "$claude_js" "$codex_bin"
