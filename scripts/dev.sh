#!/usr/bin/env bash
# The README's first command: installs the Debian packages runnel needs,
# builds a Release tree in build/ (gcc, no sanitizers) and starts the whole
# stack locally with a live demo run (`runnel dev --demo`); the banner names
# the viewer's URL (http://127.0.0.1:8080/ui/).  Ctrl-C stops everything it
# started.
#
#   scripts/dev.sh [--agents] [runnel dev options]     e.g. scripts/dev.sh --port 0
#   scripts/dev.sh --redis-cluster 3    a local Redis Cluster (3 primaries + 3 replicas) instead of one Redis
#
# --agents (bare): also install the pinned ACP agents (Claude Code, Codex) into
# $BUILD_DIR/agents and give them to the worker (`runnel dev --with-agents`),
# which keeps one Claude Code and one Codex agent started for the next run
# (RUNNEL_WARM_AGENTS=claude:1,codex:1 unless you set it; empty: none); the
# claude and codex definitions take the key from your own
# ANTHROPIC_API_KEY / OPENAI_API_KEY.
#
# Environment: BUILD_DIR (default build), JOBS (default: nproc).
set -euo pipefail
cd "$(dirname "$0")/.."

# A bare --agents means --with-agents; `--agents DIR` (runnel dev's folder
# of definitions) passes through as before.
args=()
while [ $# -gt 0 ]; do
  if [ "$1" = --agents ] && { [ $# -eq 1 ] || [ "${2#-}" != "$2" ]; }; then
    args+=(--with-agents)
  else
    args+=("$1")
  fi
  shift
done

scripts/deps.sh

build=${BUILD_DIR:-build}
jobs=${JOBS:-$(nproc)}
# CC only matters for a fresh build dir; an existing one keeps its compiler.
# Warnings do not stop this build (newer gcc releases add new ones); CI
# (scripts/test.sh) builds with -Werror.
CC=${CC:-gcc} cmake -S . -B "$build" -DCMAKE_BUILD_TYPE=Release \
  -DRUNNEL_SANITIZE=OFF -DRUNNEL_FUZZ=OFF -DRUNNEL_WERROR=OFF >/dev/null
# The three programs land in build/cli, build/dispatcher and build/worker;
# `runnel dev` finds its siblings there (or via RUNNEL_WORKER_BIN /
# RUNNEL_DISPATCHER_BIN).
cmake --build "$build" -j "$jobs" --target runnel runnel-dispatcher runnel-worker runnel-mock-agent

exec "$build/cli/runnel" dev --demo ${args[@]+"${args[@]}"}
