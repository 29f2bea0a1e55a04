#!/usr/bin/env bash
# Installs the MCP servers the runnel-agent tests start
# (tests/builtin/mcp/package.json, pinned by package-lock.json) into a
# directory of the build tree (scripts/npm_prefix.sh).
#
#   tests/builtin/mcp/install.sh DIR
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
exec "$here/../../../scripts/npm_prefix.sh" install.sh "$here" "${1:?usage: install.sh DIR}" 20 \
	node_modules/@modelcontextprotocol/server-everything
