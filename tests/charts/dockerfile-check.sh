#!/usr/bin/env bash
# Checks the Dockerfile against the build: every target is in its --target
# list, every binary's path in the build tree appears under /build/, every
# shared library a built program needs comes from a package of the runtime
# stage, and .dockerignore keeps build trees and .git out of the context.
# (No container engine is needed; the image itself is built elsewhere.)
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
# Every shared library a built program needs comes from a package the
# runtime stage installs (libc6 and libgcc-s1 are in the base image). Uses
# this machine's dpkg database: it runs Debian 12, like the image. Skipped
# for programs not built yet.
runtime=$(awk '/^FROM .* AS build/{b=1} /^FROM /&&!/AS build/{b=0;r=1} r' "$dockerfile" |
	tr ' \\' '\n\n' | grep -E '^[a-z0-9][a-z0-9.+-]+$' | sort -u)
PATH=$PATH:/usr/sbin:/sbin
ldcache=$(ldconfig -p)
needs=() # "program soname"
for pair in "$@"; do
	file=${pair#*=}
	if [ ! -x "$file" ]; then
		echo "note: $file not built; its libraries are not checked"
		continue
	fi
	for so in $(readelf -d "$file" | sed -n 's/.*(NEEDED).*\[\(.*\)\]/\1/p'); do
		needs+=("${file##*/} $so")
	done
done
# One dpkg query for every library (dpkg -S is slow per call). dpkg knows a
# file by the path its package ships, so ask for each spelling (merged /usr).
declare -A sopath
paths=()
for n in "${needs[@]}"; do
	so=${n#* }
	[ -n "${sopath[$so]:-}" ] && continue
	p=$(awk -v so="$so" '$1 == so {print $NF; exit}' <<<"$ldcache")
	sopath[$so]=${p:-none}
	[ -n "$p" ] && paths+=("$p" "$(readlink -f "$p")" "${p/#\/usr\/lib\//\/lib\/}" "${p/#\/lib\//\/usr\/lib\/}")
done
declare -A owner
if [ ${#paths[@]} -gt 0 ]; then
	while IFS= read -r line; do
		owner[${line#*: }]=${line%%:*}
	done < <(dpkg -S "${paths[@]}" 2>/dev/null || true)
fi
for n in "${needs[@]}"; do
	prog=${n%% *}
	so=${n#* }
	p=${sopath[$so]}
	pkg=""
	for q in "$p" "$(readlink -f "$p" 2>/dev/null)" "${p/#\/usr\/lib\//\/lib\/}" "${p/#\/lib\//\/usr\/lib\/}"; do
		pkg=${owner[$q]:-}
		[ -n "$pkg" ] && break
	done
	case $pkg in
	libc6 | libgcc-s1) pass=$((pass + 1)) ;;
	"") echo "FAIL: $prog needs $so, which no package provides here"; fail=$((fail + 1)) ;;
	*)
		if grep -qxF -- "$pkg" <<<"$runtime"; then
			pass=$((pass + 1))
		else
			echo "FAIL: $prog needs $so from $pkg, which the runtime stage does not install"
			fail=$((fail + 1))
		fi
		;;
	esac
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
