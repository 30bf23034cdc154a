package redis

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"os"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/kievrpc/kiev/shed"
)

// hook is the go-redis Hook through which a Client sees every command,
// pipeline and connection: it refuses commands whose ctx has ended,
// counts, times and logs the others, and follows the servers going down
// and coming back.
type hook struct{ c *Client }

var _ redis.Hook = hook{}

func (h hook) DialHook(next redis.DialHook) redis.DialHook {
	return func(ctx context.Context, network, addr string) (net.Conn, error) {
		start := time.Now()
		conn, err := next(ctx, network, addr)
		where := addr // "FailoverClient" for a Sentinel's master
		if err == nil {
			where = conn.RemoteAddr().String()
		}
		h.c.conns.dialed(ctx, addr, where, time.Since(start), err)
		return conn, err
	}
}

// inCommand marks the ctx of a command or pipeline the hook is running:
// the commands the hook sees under it are go-redis's own, the handshake
// of a new connection (HELLO, SELECT, CLIENT SETINFO). They are part of
// the command that needed the connection, and go-redis ignores the
// failures of some, so the hook passes them through unrecorded.
type inCommand struct{}

func (h hook) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		if ctx.Value(inCommand{}) != nil {
			return next(ctx, cmd)
		}
		start := time.Now()
		slot, err := h.c.acquire(ctx)
		if err != nil {
			// The caller has gone, or could not be served in time: send
			// nothing.
			cmd.SetErr(err)
		} else {
			err = next(context.WithValue(ctx, inCommand{}, true), cmd)
			slot.Release()
		}
		return h.c.finish(ctx, cmd, time.Since(start), err)
	}
}

func (h hook) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		if ctx.Value(inCommand{}) != nil {
			return next(ctx, cmds)
		}
		start := time.Now()
		slot, err := h.c.acquire(ctx)
		if err != nil {
			for _, cmd := range cmds {
				cmd.SetErr(err)
			}
		} else {
			err = next(context.WithValue(ctx, inCommand{}, true), cmds)
			slot.Release()
		}
		return h.c.finishPipeline(ctx, cmds, time.Since(start), err)
	}
}

// acquire takes a slot of the Client's Resource for a command or a
// pipeline of ctx, or fails with ctx's error or shed.ErrResourceBusy.
func (c *Client) acquire(ctx context.Context) (shed.Slot, error) {
	if err := ctx.Err(); err != nil {
		return shed.Slot{}, err
	}
	if c.res == nil {
		return shed.Slot{}, nil // the zero Slot's Release does nothing
	}
	return c.res.Acquire(ctx)
}

// dialHook is the hook of a cluster's node clients: the cluster's own
// hook sees the commands, theirs the connections.
type dialHook struct{ hook }

func (h dialHook) ProcessHook(next redis.ProcessHook) redis.ProcessHook { return next }
func (h dialHook) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return next
}

// failed reports whether err is a failure: redis.Nil, a missing key, is
// an answer.
func failed(err error) bool {
	return err != nil && !errors.Is(err, redis.Nil)
}

// bestEffort reports whether cmd is one that go-redis sends on each new
// connection and whose failure it ignores, as servers older than Redis
// 7.2 refuse them. The hook sees them, failing, as the handshake of a
// Pub/Sub connection, which runs outside any command.
func bestEffort(cmd redis.Cmder) bool {
	if cmd.Name() != "client" {
		return false
	}
	args := cmd.Args()
	if len(args) < 2 {
		return false
	}
	sub, _ := args[1].(string)
	return strings.EqualFold(sub, "setinfo") || strings.EqualFold(sub, "maint_notifications")
}

// finish records a command that took d and ended with err, and returns
// the error for go-redis to return. A command cut short by its ctx gets
// an error that wraps the ctx's (context.DeadlineExceeded) as well as
// go-redis's (an i/o timeout).
func (c *Client) finish(ctx context.Context, cmd redis.Cmder, d time.Duration, err error) error {
	m := c.metrics.get(cmd.Name())
	m.duration.Observe(d.Seconds())
	c.commands.Add(1)
	if failed(err) {
		m.failed.Inc()
		c.errors.Add(1)
		err = withCtxErr(ctx, cmd, err)
		c.logFailed(ctx, "redis: command failed", err, bestEffort(cmd), "cmd", describe(cmd), "took", d)
	} else {
		m.ok.Inc()
	}
	if d >= c.slow {
		c.slowCount.Add(1)
		c.log.LogAttrs(ctx, slog.LevelWarn, "redis: slow command",
			slog.String("client", c.name), slog.String("cmd", describe(cmd)), slog.Duration("took", d))
	}
	return err
}

// finishPipeline records a pipeline that took d and ended with err.
func (c *Client) finishPipeline(ctx context.Context, cmds []redis.Cmder, d time.Duration, err error) error {
	if len(cmds) == 0 {
		return err
	}
	kind := "pipeline"
	if cmds[0].Name() == "multi" {
		kind = "multi"
	}
	c.metrics.get(kind).duration.Observe(d.Seconds())
	var nFailed int
	var firstFailed redis.Cmder
	for _, cmd := range cmds {
		m := c.metrics.get(cmd.Name())
		c.commands.Add(1)
		if cerr := cmd.Err(); failed(cerr) {
			m.failed.Inc()
			c.errors.Add(1)
			withCtxErr(ctx, cmd, cerr)
			if nFailed == 0 {
				firstFailed = cmd
			}
			nFailed++
		} else {
			m.ok.Inc()
		}
	}
	if nFailed > 0 {
		c.logFailed(ctx, "redis: pipeline failed", firstFailed.Err(), bestEffort(firstFailed),
			"cmd", describe(firstFailed), "failed", nFailed, "cmds", len(cmds), "took", d)
	}
	if d >= c.slow {
		first := cmds[0]
		if kind == "multi" && len(cmds) > 1 {
			first = cmds[1]
		}
		c.slowCount.Add(1)
		c.log.LogAttrs(ctx, slog.LevelWarn, "redis: slow "+kind,
			slog.String("client", c.name), slog.String("first", describe(first)),
			slog.Int("cmds", len(cmds)), slog.Duration("took", d))
	}
	if failed(err) {
		err = withCtxErr(ctx, nil, err)
	}
	return err
}

// withCtxErr returns err, made to wrap the ctx's error too if the ctx
// has ended and err does not say so already; the command, if not nil,
// keeps the returned error. A socket timeout at the ctx's deadline is
// the deadline's, even if the ctx's timer has not fired yet.
func withCtxErr(ctx context.Context, cmd redis.Cmder, err error) error {
	cerr := ctx.Err()
	if cerr == nil {
		if dl, ok := ctx.Deadline(); ok && !time.Now().Before(dl) && errors.Is(err, os.ErrDeadlineExceeded) {
			cerr = context.DeadlineExceeded
		}
	}
	if cerr == nil || errors.Is(err, cerr) {
		return err
	}
	err = fmt.Errorf("%w: %w", cerr, err)
	if cmd != nil {
		cmd.SetErr(err)
	}
	return err
}

// logFailed logs a failure at WARN, or at DEBUG if the caller cancelled
// its ctx, as then the failure is the caller's choice, or if quiet.
func (c *Client) logFailed(ctx context.Context, msg string, err error, quiet bool, args ...any) {
	level := slog.LevelWarn
	if quiet || errors.Is(err, context.Canceled) {
		level = slog.LevelDebug
	}
	if !c.log.Enabled(ctx, level) {
		return
	}
	c.log.Log(ctx, level, msg, append([]any{"client", c.name, "err", err}, args...)...)
}
