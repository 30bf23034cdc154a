// Package xversion checks that builds of kiev from different commits
// talk to each other: the wire protocol lets a newer peer add what an
// older one skips, so that a partial rollout never breaks calls. It holds
// only tests and the peer program they build.
//
// The tests build the peer (./peer, a client and a server of a small test
// service that use only kiev's exported API) from the current tree, and
// from each commit pinned in build_test.go, checked out with git worktree
// from the repository's own history, with the current peer's source
// copied in so that it compiles against that commit's kiev (with the
// build tag kiev_nosign for commits before signed datagrams). Old builds
// are kept in the user's cache directory, under kiev-xversion/<commit>,
// keyed by the peer's source and the Go version. TestCrossVersion runs
// each old build against the current one, both ways, over TCP and UDP,
// with msgpack and protobuf, and wants every scenario to end as between
// two current builds, or as documented where the old build lacks a
// feature; the outcomes that break a promise between builds already made
// are listed once, in knownBugs, and shown as BUG in the matrix it logs.
// TestNewFieldsSkipped shows every build skipping a header field and a
// frame type that no version defines.
//
// Run them with
//
//	go test -count=1 -v ./internal/xversion/
//
// or make test-xversion. They need git and a clone with the pinned
// commits in its history (a shallow clone needs git fetch --unshallow),
// and no network: the builds use the Go module cache alone.
package xversion
