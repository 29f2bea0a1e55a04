#!/usr/bin/env bash
# Checks that the Dockerfile builds and copies the programs where CMake puts
# them: every target is in its --target list and every binary's path in the
# build tree appears under /build/. (No container engine is needed; the
# image itself is built elsewhere.)
#
#   dockerfile-check.sh DOCKERFILE BINARY_DIR TARGET=FILE...
set -euo pipefail
dockerfile=$1
bindir=$2
shift 2
fail=0
pass=0
targets=$(grep -E -- '--target ' "$dockerfile" | head -n1)
for pair in "$@"; do
	target=${pair%%=*}
	file=${pair#*=}
	rel=${file#"$bindir"/}
	if ! grep -qwF -- "$target" <<<"$targets"; then
		echo "FAIL: $target is not in the Dockerfile's --target list: $targets"
		fail=$((fail + 1))
	else
		pass=$((pass + 1))
	fi
	if ! grep -qF -- "/build/$rel" "$dockerfile"; then
		echo "FAIL: the Dockerfile does not copy /build/$rel ($target)"
		fail=$((fail + 1))
	else
		pass=$((pass + 1))
	fi
done
ignore=$(dirname "$dockerfile")/.dockerignore
for pat in .git 'build-*'; do
	if grep -qxF -- "$pat" "$ignore"; then
		pass=$((pass + 1))
	else
		echo "FAIL: .dockerignore does not exclude $pat"
		fail=$((fail + 1))
	fi
done
echo "$pass passed, $fail failed"
[ "$fail" -eq 0 ]
