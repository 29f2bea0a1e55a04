#!/usr/bin/env bash
# Installs a pinned npm package set (SRC/package.json with its
# package-lock.json) into DIR: the ACP agents of the image and of the
# tests (agents/install.sh), and the npm packages of test fixtures, which go
# into the build tree so that the source tree never gets a node_modules.
#
#   scripts/npm_prefix.sh NAME SRC DIR MIN_NODE MARKER...
#
# NAME prefixes every message; MIN_NODE is the oldest Node.js major the
# packages take; each MARKER is a path under DIR that a complete install
# has.  Idempotent: a stamp records which package files and arguments (and
# this script) DIR was built from, so a second run returns at once; a lock
# serialises concurrent runs on one DIR.  Package install scripts never run
# (nothing here may download a browser or a binary of its own, and a prefix
# may be shared by runs).
set -euo pipefail

name=$1 src=$2 dir=$3 min_node=$4
shift 4
markers=("$@")

for tool in node npm flock sha256sum; do
	if ! command -v "$tool" >/dev/null 2>&1; then
		echo "$name: '$tool' is missing: install Node.js $min_node or later with npm (scripts/deps.sh does)" >&2
		exit 2
	fi
done
major=$(node -p 'process.versions.node.split(".")[0]' 2>/dev/null || echo 0)
if [ "$major" -lt "$min_node" ]; then
	echo "$name: the pinned packages need Node.js $min_node or newer (found $(node --version 2>/dev/null))" >&2
	exit 2
fi

mkdir -p "$dir"
dir=$(cd "$dir" && pwd)
exec 9>"$dir/.lock"
flock 9

complete() {
	for m in "${markers[@]}"; do
		[ -e "$dir/$m" ] || return 1
	done
}

want=$( (cat "$0" "$src/package.json" "$src/package-lock.json" && echo "${markers[*]}") | sha256sum | cut -d' ' -f1)
if [ -f "$dir/.stamp" ] && [ "$(cat "$dir/.stamp")" = "$want" ] && complete; then
	exit 0
fi
rm -f "$dir/.stamp"
start=$(date +%s)
cp "$src/package.json" "$src/package-lock.json" "$dir/"
if ! (cd "$dir" && PLAYWRIGHT_SKIP_BROWSER_DOWNLOAD=1 npm ci --omit=dev --ignore-scripts --no-audit --no-fund --loglevel=error >npm.log 2>&1); then
	echo "$name: npm ci failed in $dir:" >&2
	cat "$dir/npm.log" >&2
	exit 1
fi
for m in "${markers[@]}"; do
	if [ ! -e "$dir/$m" ]; then
		echo "$name: $dir/$m is missing after npm ci" >&2
		exit 1
	fi
done
# The tree may be read by others (every sandbox of a worker binds the
# agents' prefix): nobody writes it but this script.
chmod -R a+rX,go-w "$dir/node_modules"
echo "$want" >"$dir/.stamp"
echo "$name: npm packages in $dir ($(du -sh "$dir/node_modules" | cut -f1), $(($(date +%s) - start)) s)"
