#!/usr/bin/env bash
# Installs the MCP servers the runnel-agent tests start
# (tests/builtin/mcp/package.json, pinned by package-lock.json) into a
# directory of the build tree, never the source tree.
#
#   tests/builtin/mcp/install.sh DIR
#
# Idempotent: a stamp records what DIR holds; a lock serialises concurrent
# runs on one DIR.
set -euo pipefail

here=$(cd "$(dirname "$0")" && pwd)
dir=${1:?usage: install.sh DIR}
for tool in node npm flock sha256sum; do
	if ! command -v "$tool" >/dev/null 2>&1; then
		echo "install.sh: '$tool' is missing; the MCP tests need it (scripts/deps.sh installs Node.js)" >&2
		exit 2
	fi
done
major=$(node -p 'process.versions.node.split(".")[0]')
if [ "$major" -lt 20 ]; then
	echo "install.sh: the pinned MCP servers need Node.js 20 or newer (found $(node --version))" >&2
	exit 2
fi
mkdir -p "$dir"
dir=$(cd "$dir" && pwd)
exec 9>"$dir/.lock"
flock 9
want=$(cat "$here/install.sh" "$here/package.json" "$here/package-lock.json" | sha256sum | cut -d' ' -f1)
if [ -f "$dir/.stamp" ] && [ "$(cat "$dir/.stamp")" = "$want" ] &&
	[ -d "$dir/node_modules/@modelcontextprotocol/server-everything" ]; then
	exit 0
fi
rm -f "$dir/.stamp"
cp "$here/package.json" "$here/package-lock.json" "$dir/"
(cd "$dir" && npm ci --ignore-scripts --no-audit --no-fund --loglevel=error)
echo "$want" >"$dir/.stamp"
