#!/usr/bin/env bash
# Keeps docs/configuration.md true to the code: every flag and every
# RUNNEL_* variable that a program lists in its --help must be documented
# there, and every RUNNEL_* variable the document names must exist in some
# program's --help (or be one of the few set only for the agent).
#
#   check_config_doc.sh DOC PROGRAM[:VERB] ...
set -u
doc=$1
shift
[ -r "$doc" ] || { echo "FAIL cannot read $doc"; exit 1; }

fail=0
all_vars=$(mktemp)
trap 'rm -f "$all_vars"' EXIT

for spec in "$@"; do
	prog=${spec%%:*}
	verb=""
	[ "$spec" != "$prog" ] && verb=${spec#*:}
	name="$(basename "$prog")${verb:+ $verb}"
	# shellcheck disable=SC2086
	help=$("$prog" $verb --help 2>&1)
	if [ -z "$help" ]; then
		echo "FAIL $name --help printed nothing"
		fail=1
		continue
	fi
	flags=$(printf '%s\n' "$help" | grep -oE '^ +(-[A-Za-z], )?--[a-z][a-z0-9-]*' | grep -oE -- '--[a-z][a-z0-9-]*' | grep -vx -- '--help' | sort -u)
	vars=$(printf '%s\n' "$help" | grep -oE 'RUNNEL_[A-Z0-9_]+' | grep -v '_$' | sort -u)
	printf '%s\n' "$vars" >>"$all_vars"
	for f in $flags; do
		if ! grep -qE -- "\`$f( [^\`]*)?\`" "$doc"; then
			echo "FAIL $name: flag $f is not in $(basename "$doc")"
			fail=1
		fi
	done
	for v in $vars; do
		if ! grep -qF -- "\`$v\`" "$doc"; then
			echo "FAIL $name: variable $v is not in $(basename "$doc")"
			fail=1
		fi
	done
done

# Variables the worker sets inside the sandbox, not configuration.
agent_only="RUNNEL_RUN_ID RUNNEL_WORKSPACE_API_URL RUNNEL_WORKSPACE_TOKEN"
for v in $(grep -oE 'RUNNEL_[A-Z0-9_]+' "$doc" | sort -u); do
	case " $agent_only " in *" $v "*) continue ;; esac
	if ! grep -qx -- "$v" "$all_vars"; then
		echo "FAIL $(basename "$doc") names $v, which no program's --help lists"
		fail=1
	fi
done

if [ $fail -eq 0 ]; then
	echo "ok: $(basename "$doc") documents every flag and variable of $# programs"
fi
exit $fail
