#!/usr/bin/env bash
# modules.sh checks that kiev's modules work as a user fetches them, outside
# this repository and without go.work (docs/modules.md):
#
#   bash scripts/modules.sh         # make test-modules runs it
#   KEEP=1 bash scripts/modules.sh  # leaves its directory, to look into
#
# It publishes this checkout's modules into a module proxy directory (every
# module go.work uses, at the version the others require; files tracked or
# not, as git ls-files lists them: scripts/modproxy.go), then, in an empty
# directory with GOWORK=off and GOPROXY=file://that directory:
#   - go install github.com/kievrpc/kiev/examples/backend@VERSION: the
#     example, built from its own go.mod and go.sum (which go install
#     refuses if they hold a replace directive), against kiev and the
#     database clients as published;
#   - a new module that go gets every other module (the etcd registry,
#     otelkiev, the config client, bench) and loads each one's packages, so
#     that every import resolves against the published modules.
# Modules from elsewhere come from the Go module cache, else the usual
# proxy. It keeps a module cache of its own, ~/.cache/kiev/modules-check,
# from which it removes kiev's modules first: the unpublished versions never
# reach the user's cache, and a module fetched once is not fetched again.
set -euo pipefail
cd "$(dirname "$0")/.."
top=$PWD

work=$(mktemp -d "${TMPDIR:-/tmp}/kiev-modules.XXXXXX")
cleanup() {
	if [ -n "${KEEP:-}" ]; then echo "modules: left $work" >&2; return; fi
	chmod -R u+w "$work" 2>/dev/null || true
	rm -rf "$work"
}
trap cleanup EXIT

mapfile -t published < <(GOWORK=off go run scripts/modproxy.go "$work/proxy")
version=${published[0]}
modules=("${published[@]:1}")
echo "modules: published ${#modules[@]} modules at $version into $work/proxy"

usercache=$(go env GOMODCACHE)
modcache=${XDG_CACHE_HOME:-$HOME/.cache}/kiev/modules-check
chmod -R u+w "$modcache/github.com/kievrpc" "$modcache/cache/download/github.com/kievrpc" 2>/dev/null || true
rm -rf "$modcache/github.com/kievrpc" "$modcache/cache/download/github.com/kievrpc"
export GOWORK=off GOFLAGS=-modcacherw GOMODCACHE="$modcache" GOBIN="$work/bin"
export GOPROXY="file://$work/proxy,file://$usercache/cache/download${KIEV_MODULES_PROXY-,$(go env GOPROXY)}"
# No checksum database knows the published versions (their checksums are
# this checkout's); the go.sum files check the other modules.
export GOSUMDB=off
# Go indexes a module of the module cache once, in its build cache, by
# path and version, taking it never to change; but each run publishes
# this checkout's files anew at the same version, so the index of an
# earlier run would describe files that are gone (an embed pattern that no
# longer matches, say). goindex=0 reads the files themselves.
export GODEBUG=goindex=0

# quiet drops the lines of modules fetched.
quiet() { grep -v -e '^go: downloading ' -e '^go: added ' || true; }

cd "$work"
go install -trimpath "github.com/kievrpc/kiev/examples/backend@$version" 2>&1 | quiet
echo "modules: go install github.com/kievrpc/kiev/examples/backend@$version: ok"

mkdir user && cd user
go mod init example.com/user 2>&1 | quiet
others=()
for m in "${modules[@]}"; do
	case $m in github.com/kievrpc/kiev | github.com/kievrpc/kiev/examples/backend) ;; *) others+=("$m") ;; esac
done
go get "${others[@]/%//...@$version}" 2>&1 | quiet
go list -deps "${others[@]/%//...}" >/dev/null
echo "modules: go get and go list -deps of ${others[*]}: ok"
