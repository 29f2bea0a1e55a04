#!/usr/bin/env bash
# Source check, run by scripts/test.sh before the build (the way curl keeps
# its checksrc): every tracked C file must be formatted as .clang-format says,
# must not call the functions below, and must speak the house dialect:
# `!p` and `p`, never a comparison with NULL; `sizeof(x)`, never `sizeof x`.
# Each finding is printed as "file:line: what", and any finding fails the run.
#
#   scripts/checksrc.sh [FILE...]     (default: every tracked .c and .h)
set -uo pipefail
cd "$(dirname "$0")/.."

# Banned: unbounded writes and parsers that cannot report errors.
#   sprintf vsprintf strcpy strcat strncpy strncat -> snprintf / memcpy with a length
#   strtok                                          -> strtok_r
#   atoi atol atoll                                 -> strtol / strtoll with a check
#   gets                                            -> fgets
banned='sprintf|vsprintf|strcpy|strcat|strncpy|strncat|strtok|atoi|atol|atoll|gets'

if [ $# -gt 0 ]; then
  files=("$@")
elif git rev-parse --is-inside-work-tree >/dev/null 2>&1; then
  mapfile -t files < <(git ls-files '*.c' '*.h')
else
  mapfile -t files < <(find . -path ./build\* -prune -o \( -name '*.c' -o -name '*.h' \) -print | sed 's|^\./||' | sort)
fi

fail=0
for f in "${files[@]}"; do
  while IFS= read -r hit; do
    fail=1
    echo "$f:${hit%%:*}: compare with NULL as !p or p, not == NULL / != NULL"
  done < <(grep -nE '(==|!=)[[:space:]]*NULL\b|\bNULL[[:space:]]*(==|!=)' "$f")
  while IFS= read -r hit; do
    fail=1
    echo "$f:${hit%%:*}: write sizeof(x), not sizeof x"
  done < <(grep -nE '\bsizeof[[:space:]]+[A-Za-z_*(]' "$f")
  # A call is the name not preceded by an identifier character or '.'/'>'
  # (a struct member), followed by '('.  Comments are not exempt on purpose.
  while IFS= read -r hit; do
    fail=1
    line=${hit%%:*}
    name=$(printf '%s\n' "${hit#*:}" | grep -oE "(^|[^A-Za-z0-9_.>])($banned)\(" | head -1 |
           sed -E 's/^[^A-Za-z0-9_]*//; s/\($//')
    echo "$f:$line: banned function $name()"
  done < <(grep -nE "(^|[^A-Za-z0-9_.>])($banned)\(" "$f")
done

cf=${CLANG_FORMAT:-clang-format-14}
if command -v "$cf" >/dev/null 2>&1; then
  # --dry-run prints "file:line:col: error: code should be clang-formatted".
  if ! out=$("$cf" --dry-run --Werror "${files[@]}" 2>&1); then
    fail=1
    printf '%s\n' "$out" | grep -E '^[^ ].*:[0-9]+:[0-9]+: (error|warning):' |
      sed -E 's/:([0-9]+):[0-9]+: (error|warning): .*/:\1: not formatted as .clang-format says (run: '"$cf"' -i FILE)/' | sort -u
  fi
else
  echo "checksrc: $cf not found (scripts/deps.sh installs it)" >&2
  fail=1
fi
[ $fail -eq 0 ] && echo "checksrc: ${#files[@]} files clean"
exit $fail
