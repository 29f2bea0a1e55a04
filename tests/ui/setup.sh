#!/usr/bin/env bash
# Installs playwright-core (tests/ui/package.json, pinned by
# package-lock.json) into a directory of the build tree, never the source
# tree, and checks that Debian's chromium is there (scripts/deps.sh installs
# it).  Playwright's own browser download is never used.
#
#   tests/ui/setup.sh DIR
#
# Idempotent (a stamp records what DIR holds); a lock serialises runs.
set -euo pipefail

here=$(cd "$(dirname "$0")" && pwd)
dir=${1:?usage: setup.sh DIR}

for tool in node npm flock sha256sum; do
	if ! command -v "$tool" >/dev/null 2>&1; then
		echo "setup.sh: '$tool' is missing; the ui tests need Node.js and npm" >&2
		exit 2
	fi
done
if [ ! -x /usr/bin/chromium ]; then
	echo "setup.sh: /usr/bin/chromium is missing (apt-get install chromium; scripts/deps.sh does)" >&2
	exit 2
fi

mkdir -p "$dir"
dir=$(cd "$dir" && pwd)
exec 9>"$dir/.lock"
flock 9

want=$(cat "$here/setup.sh" "$here/package.json" "$here/package-lock.json" | sha256sum | cut -d' ' -f1)
if [ -f "$dir/.stamp" ] && [ "$(cat "$dir/.stamp")" = "$want" ] &&
	[ -d "$dir/node_modules/playwright-core" ]; then
	exit 0
fi
rm -f "$dir/.stamp"
cp "$here/package.json" "$here/package-lock.json" "$dir/"
cd "$dir"
# --ignore-scripts: playwright-core has no install script, and nothing
# here may download a browser.
if ! PLAYWRIGHT_SKIP_BROWSER_DOWNLOAD=1 npm ci --no-audit --no-fund --ignore-scripts --loglevel=error >npm.log 2>&1; then
	echo "setup.sh: npm ci failed in $dir:" >&2
	cat npm.log >&2
	exit 1
fi
echo "$want" >"$dir/.stamp"
