#!/usr/bin/env bash
# Installs the ACP agents runnel knows by preset (agents/package.json, pinned
# by agents/package-lock.json) into one prefix:
#
#   agents/install.sh PREFIX
#
# PREFIX/node_modules then holds @zed-industries/claude-agent-acp (run by
# Node.js; it brings Claude Code as the SDK's cli.js) and
# @zed-industries/codex-acp with its platform binary (a static ELF, no Node
# at run time).  runnel-worker binds PREFIX read-only into every sandbox at
# /opt/runnel/agents (--acp-prefix / RUNNEL_ACP_PREFIX).
#
# Idempotent: a stamp records which package.json, lock and script PREFIX was
# built from; a second run with the same inputs returns at once.  A lock
# serialises concurrent runs on one PREFIX.  Package install scripts are not
# run (none of these packages needs one, and the prefix is shared by runs).
set -euo pipefail

here=$(cd "$(dirname "$0")" && pwd)
prefix=${1:?usage: install.sh PREFIX}

for tool in node npm flock sha256sum; do
	if ! command -v "$tool" >/dev/null 2>&1; then
		echo "agents/install.sh: '$tool' is missing: install Node.js 20 or later with npm (scripts/deps.sh does)" >&2
		exit 2
	fi
done

# Claude Code's SDK needs Node.js 18 or later (tested with 20).
major=$(node -p 'process.versions.node.split(".")[0]' 2>/dev/null || echo 0)
if [ "$major" -lt 18 ]; then
	echo "agents/install.sh: Node.js $(node --version 2>/dev/null) is too old: the ACP agents need 18 or later" >&2
	exit 2
fi

mkdir -p "$prefix"
prefix=$(cd "$prefix" && pwd)
exec 9>"$prefix/.lock"
flock 9

want=$(cat "$here/install.sh" "$here/package.json" "$here/package-lock.json" | sha256sum | cut -d' ' -f1)
claude_js=node_modules/@zed-industries/claude-agent-acp/dist/index.js
codex_bin=node_modules/@zed-industries/codex-acp-linux-x64/bin/codex-acp
case "$(uname -m)" in
aarch64 | arm64) codex_bin=node_modules/@zed-industries/codex-acp-linux-arm64/bin/codex-acp ;;
esac
if [ -f "$prefix/.stamp" ] && [ "$(cat "$prefix/.stamp")" = "$want" ] &&
	[ -f "$prefix/$claude_js" ] && [ -x "$prefix/$codex_bin" ]; then
	exit 0
fi
rm -f "$prefix/.stamp"

start=$(date +%s)
cp "$here/package.json" "$here/package-lock.json" "$prefix/"
(
	cd "$prefix"
	if ! npm ci --omit=dev --ignore-scripts --no-audit --no-fund --loglevel=error >npm.log 2>&1; then
		echo "agents/install.sh: npm ci failed in $prefix:" >&2
		cat npm.log >&2
		exit 1
	fi
)
for f in "$claude_js" "$codex_bin"; do
	if [ ! -e "$prefix/$f" ]; then
		echo "agents/install.sh: $prefix/$f is missing after npm ci" >&2
		exit 1
	fi
done
# The tree is read by every run: nobody writes it but this script.
chmod -R a+rX,go-w "$prefix/node_modules"
echo "$want" >"$prefix/.stamp"
echo "agents/install.sh: ACP agents in $prefix ($(du -sh "$prefix/node_modules" | cut -f1), $(($(date +%s) - start)) s)"
