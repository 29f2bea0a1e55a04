#!/usr/bin/env bash
# Sets up a fresh Debian 12 machine, builds runnel with AddressSanitizer and
# UndefinedBehaviorSanitizer (clang, so the libFuzzer targets build too) and
# runs the whole test suite with ctest.  This is the command the README gives
# and the one CI runs.
#
#   scripts/test.sh [extra ctest args]
#
# Environment: BUILD_DIR (default build-asan), JOBS (default: nproc),
# RUNNEL_FUZZ_SECONDS (default 30 per fuzz target).
set -euo pipefail
cd "$(dirname "$0")/.."

scripts/deps.sh

build=${BUILD_DIR:-build-asan}
jobs=${JOBS:-$(nproc)}
CC=${CC:-clang-14} cmake -S . -B "$build" -DCMAKE_BUILD_TYPE=RelWithDebInfo \
  -DRUNNEL_SANITIZE=ON -DRUNNEL_WERROR=ON \
  -DRUNNEL_FUZZ_SECONDS="${RUNNEL_FUZZ_SECONDS:-30}" >/dev/null
cmake --build "$build" -j "$jobs"

export ASAN_OPTIONS=${ASAN_OPTIONS:-detect_leaks=1:abort_on_error=0:strict_string_checks=1}
export UBSAN_OPTIONS=${UBSAN_OPTIONS:-print_stacktrace=1:halt_on_error=1}
cd "$build"
# Tests labelled quarantine show a known intermittent fault that is not
# fixed yet (docs/testing.md); RUNNEL_TEST_QUARANTINE=1 runs them too.
if [ "${RUNNEL_TEST_QUARANTINE:-0}" = 1 ]; then
  ctest --output-on-failure -j "$jobs" "$@"
else
  ctest --output-on-failure -j "$jobs" -LE quarantine "$@"
fi
