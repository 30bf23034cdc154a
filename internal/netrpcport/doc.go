// Package netrpcport holds a port of Go's net/rpc test suite
// (net/rpc/server_test.go) to kiev: the same services and calls, changed
// only where kiev's API makes them differ (see docs/netrpc.md, "Moving from
// net/rpc"). It has no code of its own.
package netrpcport
