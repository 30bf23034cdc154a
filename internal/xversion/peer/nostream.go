//go:build kiev_nostream

package main

import "context"

// stream does not apply to a build without streams: its kiev is built
// from a commit before them.
func (r *runner) stream(ctx context.Context) (string, string) {
	return "n/a", "this build's kiev has no streams"
}
