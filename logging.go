package kiev

import (
	"context"
	"log/slog"
	"os"
	"time"

	"github.com/lmittmann/tint"
)

// defaultLogger is the logger of servers and clients made without
// WithLogger: human-readable and coloured (github.com/lmittmann/tint)
// when standard error is a terminal, JSON lines otherwise, at Info level.
func defaultLogger() *slog.Logger {
	if fi, err := os.Stderr.Stat(); err == nil && fi.Mode()&os.ModeCharDevice != 0 {
		return slog.New(tint.NewHandler(os.Stderr, &tint.Options{Level: slog.LevelInfo, TimeFormat: time.TimeOnly}))
	}
	return slog.New(slog.NewJSONHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelInfo}))
}

// TraceIDKey is the metadata key whose value the call's log attributes
// carry as trace_id.
const TraceIDKey = "trace-id"

type callKey struct{}

// Logger returns the logger of the server running the call in ctx, with
// the call's attributes: method, peer, request id, priority and, if the
// caller sent one, trace id (metadata TraceIDKey). A handler's own log
// lines made with it carry them. Outside a handler it returns
// slog.Default().
func Logger(ctx context.Context) *slog.Logger {
	sc, _ := ctx.Value(callKey{}).(*serverCall)
	if sc == nil {
		return slog.Default()
	}
	return sc.srv.opts.logger.With(sc.attrsWith(ctx)...)
}

// LogAttrs returns the attributes of the call in ctx, as Logger adds
// them, or nil outside a handler.
func LogAttrs(ctx context.Context) []any {
	sc, _ := ctx.Value(callKey{}).(*serverCall)
	if sc == nil {
		return nil
	}
	return sc.attrsWith(ctx)
}

// attrsWith returns the call's attributes and those WithLogAttrs put on
// ctx.
func (sc *serverCall) attrsWith(ctx context.Context) []any {
	extra, _ := ctx.Value(logAttrsKey{}).([]any)
	return append(sc.logAttrs(), extra...)
}

type logAttrsKey struct{}

// WithLogAttrs returns a context whose Logger and LogAttrs, in a handler,
// add attrs to the call's attributes. A server interceptor passes it on
// to next, to put attributes of its own on the handler's log lines: the
// trace and span ids, in package otelkiev.
func WithLogAttrs(ctx context.Context, attrs ...slog.Attr) context.Context {
	prev, _ := ctx.Value(logAttrsKey{}).([]any)
	all := make([]any, len(prev), len(prev)+len(attrs))
	copy(all, prev)
	for _, a := range attrs {
		all = append(all, a)
	}
	return context.WithValue(ctx, logAttrsKey{}, all)
}

func (sc *serverCall) logAttrs() []any {
	attrs := []any{
		slog.String("method", sc.req.ServiceMethod),
		slog.Uint64("request_id", sc.st.ID),
		slog.Int("priority", int(sc.ctx.priority)),
	}
	if sc.req.Peer != nil {
		attrs = append(attrs, slog.String("peer", sc.req.Peer.String()))
	}
	if id := sc.req.Metadata.Get(TraceIDKey); id != "" {
		attrs = append(attrs, slog.String("trace_id", id))
	}
	return attrs
}

// NewContextHandler wraps h so that records logged with the context of a
// kiev call (slog.InfoContext(ctx, ...) in a handler, with any logger
// built on the returned handler) carry the call's attributes, as Logger's
// do.
func NewContextHandler(h slog.Handler) slog.Handler { return contextHandler{h} }

type contextHandler struct{ slog.Handler }

func (h contextHandler) Handle(ctx context.Context, r slog.Record) error {
	if attrs := LogAttrs(ctx); attrs != nil {
		r = r.Clone()
		r.Add(attrs...)
	}
	return h.Handler.Handle(ctx, r)
}

func (h contextHandler) WithAttrs(as []slog.Attr) slog.Handler {
	return contextHandler{h.Handler.WithAttrs(as)}
}

func (h contextHandler) WithGroup(name string) slog.Handler {
	return contextHandler{h.Handler.WithGroup(name)}
}

// logCall writes the access and slow-call lines for a call that ran for d
// and ended with code.
func (sc *serverCall) logCall(d time.Duration, code Code, err error) {
	o := &sc.srv.opts
	slow := o.slowLog > 0 && d > o.slowLog
	if !o.accessLog && !slow {
		return
	}
	attrs := append(sc.logAttrs(), slog.String("code", code.String()), slog.Duration("took", d))
	if err != nil {
		attrs = append(attrs, slog.String("err", err.Error()))
	}
	if slow {
		o.logger.Warn("kiev: slow call", attrs...)
	} else {
		o.logger.Info("kiev: call", attrs...)
	}
}
