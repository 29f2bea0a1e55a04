#!/usr/bin/env bash
# Installs playwright-core (tests/ui/package.json, pinned by
# package-lock.json) into a directory of the build tree
# (scripts/npm_prefix.sh), and checks that Debian's chromium is there
# (scripts/deps.sh installs it).  Playwright's own browser download is
# never used.
#
#   tests/ui/setup.sh DIR
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
dir=${1:?usage: setup.sh DIR}
if [ ! -x /usr/bin/chromium ]; then
	echo "setup.sh: /usr/bin/chromium is missing (apt-get install chromium; scripts/deps.sh does)" >&2
	exit 2
fi
exec "$here/../../scripts/npm_prefix.sh" setup.sh "$here" "$dir" 18 node_modules/playwright-core
