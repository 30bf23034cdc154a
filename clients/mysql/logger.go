package mysql

import (
	"context"
	"fmt"
	"log/slog"
	"strings"
	"time"

	"gorm.io/gorm/logger"
)

// gormLogger is gorm's logger.Interface over a DB's slog.Logger. It
// passes on gorm's own messages (a failed migration, a missing
// callback) at their level, and ignores Trace: the DB's plugin logs
// statements, without their parameters.
type gormLogger struct {
	log    *slog.Logger
	client string
}

var _ logger.Interface = gormLogger{}

// LogMode returns l: the level is the slog.Logger's.
func (l gormLogger) LogMode(logger.LogLevel) logger.Interface { return l }

func (l gormLogger) Info(ctx context.Context, msg string, args ...any) {
	l.emit(ctx, slog.LevelInfo, msg, args)
}

func (l gormLogger) Warn(ctx context.Context, msg string, args ...any) {
	l.emit(ctx, slog.LevelWarn, msg, args)
}

func (l gormLogger) Error(ctx context.Context, msg string, args ...any) {
	l.emit(ctx, slog.LevelError, msg, args)
}

func (l gormLogger) emit(ctx context.Context, level slog.Level, msg string, args []any) {
	if l.log.Enabled(ctx, level) {
		l.log.Log(ctx, level, "mysql: gorm says", "client", l.client, "detail", strings.TrimSpace(fmt.Sprintf(msg, args...)))
	}
}

func (gormLogger) Trace(context.Context, time.Time, func() (string, int64), error) {}

// driverLogger is github.com/go-sql-driver/mysql's Logger over a DB's
// slog.Logger. The driver logs what it cannot return, such as a broken
// connection it found idle and dropped.
type driverLogger struct {
	log    *slog.Logger
	client string
}

func (l driverLogger) Print(v ...any) {
	l.log.Warn("mysql: driver says", "client", l.client, "detail", strings.TrimSpace(fmt.Sprint(v...)))
}
