#!/usr/bin/env bash
# sources.sh points the peers' module (bench/peers) at sources fetched by
# hand, for a machine whose module proxy refuses rpcx, arpc or kitex (or
# one of their dependencies). Where the proxy serves them, nothing is
# needed: bench/compare builds the module as it is.
#
#   bench/peers/sources.sh DIR     # writes bench/peers/peers.mod and peers.sum
#   bench/peers/sources.sh -clean  # removes them, and the extracted sources
#
# DIR holds git clones, bare or not, of any of the modules bench/peers
# requires (go.mod, direct and indirect), each found as DIR/OWNER+NAME/repo
# or DIR/OWNER+NAME (the layout of a GitHub snapshot fetched as a bare git
# directory), DIR/github.com/OWNER/NAME or DIR/NAME. For each module found,
# the script extracts the tag of the version go.mod requires (a module in a
# subdirectory of its repository, SUB, at the tag SUB/vX.Y.Z) into
# bench/peers/.sources/, and writes bench/peers/peers.mod: go.mod with
# replace lines that point those modules at the extracted trees, and
# peers.sum, a copy of go.sum, beside it. bench/compare builds the peers
# with -modfile=peers.mod where it exists, always with GOWORK=off, so the
# repository's own go.work is never involved. The modules not found in DIR
# still come from the module proxy. (A go.work with the same replace lines
# did not build: in workspace mode, google.golang.org/genproto/googleapis/
# rpc/status was found in two modules, the old genproto kitex requires and
# the newer module split from it that grpc-go brings.)
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
modfile=$here/peers.mod
srcs=$here/.sources

if [ "${1:-}" = -clean ]; then
	rm -rf "$modfile" "${modfile%.mod}.sum" "$srcs"
	echo "sources.sh: removed peers.mod, peers.sum and .sources/; bench/peers resolves its modules from the module proxy again"
	exit 0
fi
if [ $# -ne 1 ] || [ ! -d "$1" ]; then
	echo "usage: $0 DIR (a directory of git clones: see the comment at the top of this script), or $0 -clean" >&2
	exit 2
fi
dir=$(cd "$1" && pwd)

# gitdir prints the git directory of the clone of github.com/OWNER/NAME in
# DIR, if there is one.
gitdir() {
	local owner=$1 name=$2 c
	for c in "$dir/$owner+$name/repo" "$dir/$owner+$name" "$dir/github.com/$owner/$name" "$dir/$name"; do
		if [ -d "$c" ] && git -C "$c" rev-parse --absolute-git-dir >/dev/null 2>&1; then
			git -C "$c" rev-parse --absolute-git-dir
			return 0
		fi
	done
	return 1
}

replaces=()
missing=()
while read -r path version; do
	case $path in github.com/*/*) ;; *) continue ;; esac
	IFS=/ read -r _ owner name sub <<<"$path"
	# A /vN suffix names a major version, not a subdirectory.
	if [[ $sub =~ ^v[0-9]+$ ]]; then sub=; fi
	git_dir=$(gitdir "$owner" "$name") || continue
	tag=${version%+incompatible}
	if [ -n "$sub" ]; then tag=$sub/$tag; fi
	if ! git --git-dir="$git_dir" rev-parse -q --verify "refs/tags/$tag^{commit}" >/dev/null; then
		missing+=("$path $version: $git_dir has no tag $tag; fetch a newer clone")
		continue
	fi
	dest=$srcs/$path@$version
	if [ ! -f "$dest/go.mod" ]; then
		rm -rf "$dest"
		mkdir -p "$dest"
		git --git-dir="$git_dir" archive --format=tar "$tag" ${sub:+"$sub"} | tar -x -C "$dest"
		if [ -n "$sub" ]; then
			tmp=$(mktemp -d "$srcs/.tmp.XXXXXX")
			mv "$dest/$sub"/. "$tmp"/ 2>/dev/null || cp -a "$dest/$sub"/. "$tmp"/
			rm -rf "$dest"
			mv "$tmp" "$dest"
		fi
	fi
	replaces+=("	$path $version => ./.sources/$path@$version")
	echo "sources.sh: $path $version from $git_dir (tag $tag)"
done < <(cd "$here" && go mod edit -json | awk '
	/"Require"/ { inreq = 1 }
	inreq && /"Path"/ { gsub(/[",]/, ""); p = $2 }
	inreq && /"Version"/ { gsub(/[",]/, ""); print p, $2 }
	/^\t\]/ { inreq = 0 }')

for m in "${missing[@]}"; do echo "sources.sh: skipped $m" >&2; done
if [ ${#replaces[@]} -eq 0 ]; then
	echo "sources.sh: no module of bench/peers/go.mod has a clone in $dir; wrote nothing" >&2
	exit 1
fi
{
	cat "$here/go.mod"
	echo
	echo "// Written by sources.sh from the clones in $dir; not committed."
	echo "replace ("
	printf '%s\n' "${replaces[@]}"
	echo ")"
} >"$modfile"
cp "$here/go.sum" "${modfile%.mod}.sum"
echo "sources.sh: wrote $modfile (${#replaces[@]} modules replaced) and peers.sum; bench/compare now builds the peers with them"
