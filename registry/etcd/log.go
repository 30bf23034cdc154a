package etcd

import (
	"context"
	"log/slog"
	"slices"

	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
)

// zapLogger returns a zap logger, for the etcd client library, that
// passes its entries to log at Debug level: the library logs its retries
// and reconnections as warnings, which the registry reports in its own
// terms. Each record's message starts with "etcd client: "; the library's
// level is the attribute "etcd_level".
func zapLogger(log *slog.Logger) *zap.Logger {
	return zap.New(zapCore{log: log})
}

// zapCore is a zapcore.Core writing to a slog.Logger.
type zapCore struct {
	log    *slog.Logger
	fields []zapcore.Field
}

func (c zapCore) Enabled(zapcore.Level) bool {
	return c.log.Enabled(context.Background(), slog.LevelDebug)
}

func (c zapCore) With(fields []zapcore.Field) zapcore.Core {
	return zapCore{log: c.log, fields: append(slices.Clip(c.fields), fields...)}
}

func (c zapCore) Check(e zapcore.Entry, ce *zapcore.CheckedEntry) *zapcore.CheckedEntry {
	if c.Enabled(e.Level) {
		return ce.AddCore(e, c)
	}
	return ce
}

func (c zapCore) Write(e zapcore.Entry, fields []zapcore.Field) error {
	enc := zapcore.NewMapObjectEncoder()
	for _, f := range c.fields {
		f.AddTo(enc)
	}
	for _, f := range fields {
		f.AddTo(enc)
	}
	attrs := make([]any, 0, 2+2*len(enc.Fields))
	attrs = append(attrs, "etcd_level", e.Level.String())
	names := make([]string, 0, len(enc.Fields))
	for k := range enc.Fields {
		names = append(names, k)
	}
	slices.Sort(names)
	for _, k := range names {
		attrs = append(attrs, k, enc.Fields[k])
	}
	c.log.Debug("etcd client: "+e.Message, attrs...)
	return nil
}

func (c zapCore) Sync() error { return nil }
