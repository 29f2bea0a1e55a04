#!/usr/bin/env bash
# Makes the API tests' Python venv in the build tree: the pinned packages of
# requirements.txt / constraints.txt (Schemathesis, openapi-spec-validator,
# pytest, httpx) and runnel-client (clients/python) installed from the
# source tree.  Idempotent: a venv whose stamp matches the pins is kept.
#
#   tests/api/setup.sh VENV_DIR
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/../.." && pwd)
venv=${1:?usage: setup.sh VENV_DIR}

py=python3
if ! "$py" -c 'import sys; sys.exit(0 if sys.version_info >= (3, 10) else 1)' 2>/dev/null; then
	echo "setup.sh: python3 >= 3.10 is needed (scripts/deps.sh installs Debian's)" >&2
	exit 2
fi
# pip builds a local project inside it (build/, *.egg-info): build a copy,
# so that the source tree stays clean.
install_client() {
	local tmp
	tmp=$(mktemp -d)
	cp -r "$root/clients/python" "$tmp/"
	rm -rf "$tmp/python/build" "$tmp/python/src/"*.egg-info
	"$venv/bin/pip" install -q --disable-pip-version-check "$@" --no-build-isolation -c "$here/constraints.txt" "$tmp/python"
	rm -rf "$tmp"
}

stamp=$(cat "$here/requirements.txt" "$here/constraints.txt" "$root/clients/python/pyproject.toml" | sha256sum | cut -c1-16)
if [ -x "$venv/bin/python" ] && [ "$(cat "$venv/.stamp" 2>/dev/null)" = "$stamp" ]; then
	# The client's code may have changed: reinstall it alone (quick, no deps).
	install_client --no-deps >/dev/null
	exit 0
fi
rm -rf "$venv"
if ! "$py" -m venv "$venv"; then
	echo "setup.sh: python3 -m venv failed (apt-get install python3-venv; scripts/deps.sh does)" >&2
	exit 2
fi
"$venv/bin/pip" install -q --disable-pip-version-check -r "$here/requirements.txt" -c "$here/constraints.txt"
"$venv/bin/pip" install -q --disable-pip-version-check -c "$here/constraints.txt" setuptools
install_client
echo "$stamp" > "$venv/.stamp"
echo "setup.sh: venv ready in $venv"
