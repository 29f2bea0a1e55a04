#!/bin/sh
# Runs one libFuzzer target for a while on a private copy of its seed corpus
# (the committed corpus is never modified) and removes the copy afterwards.
#   smoke.sh <fuzzer> <corpus dir> <seconds> <artifact dir>
set -eu
fuzzer=$1 corpus=$2 seconds=$3 artifacts=$4
work=$(mktemp -d "${TMPDIR:-/tmp}/runnel-fuzz.XXXXXX")
trap 'rm -rf "$work"' EXIT INT TERM
cp -R "$corpus/." "$work/"
mkdir -p "$artifacts"
"$fuzzer" -max_total_time="$seconds" -timeout=10 -rss_limit_mb=2048 \
  -artifact_prefix="$artifacts/" -print_final_stats=1 "$work"
