package redis

import (
	"context"
	"fmt"
	"log/slog"
	"strings"
)

// LibraryLog routes go-redis's own messages to a slog.Logger. go-redis
// writes some through a logger of its package rather than through a
// Client (a dial that failed after its retries, a new master named by
// the Sentinels), to stderr by default. A program installs LibraryLog
// once, in main, as go-redis's logger is global:
//
//	goredis.SetLogger(redis.LibraryLog{Logger: logger})
//
// The messages are logged at INFO as "redis: go-redis says", with the
// text as "detail"; a nil Logger discards them.
type LibraryLog struct {
	Logger *slog.Logger
}

// Printf logs one of go-redis's messages.
func (l LibraryLog) Printf(ctx context.Context, format string, v ...any) {
	if l.Logger == nil || !l.Logger.Enabled(ctx, slog.LevelInfo) {
		return
	}
	l.Logger.InfoContext(ctx, "redis: go-redis says", "detail", strings.TrimSpace(fmt.Sprintf(format, v...)))
}
