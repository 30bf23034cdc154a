package kiev

import (
	"context"
	"log/slog"
	"sync"
	"time"
)

// LogBurst is how many lines of one kind a server logs per second for
// what its peers can make happen again and again: refused calls and
// connections, failed handshakes, protocol errors, panicking handlers.
// The lines past it are counted, and the next line logged says how many
// were suppressed (the "suppressed" attribute); the metric
// kiev_server_log_lines_suppressed_total counts them by message. A flood
// of bad calls thus costs the log a few lines a second, not a line each.
const LogBurst = 10

// logLimit counts the lines of one message in the current second.
type logLimit struct {
	mu         sync.Mutex // guards the fields below
	sec        int64      // the Unix second counted
	n          int        // lines logged in it
	suppressed int64      // lines suppressed since the last one logged
	total      int64      // lines suppressed, ever
}

// logLimits holds a server's logLimit by message.
type logLimits struct{ m sync.Map } // string -> *logLimit

// warn logs msg at Warn level with attrs, unless LogBurst lines of msg
// were logged in this second already.
func (s *Server) warn(msg string, attrs ...any) { s.logLimited(slog.LevelWarn, msg, attrs...) }

// logLimited logs msg at level with attrs within LogBurst lines a second.
func (s *Server) logLimited(level slog.Level, msg string, attrs ...any) {
	v, ok := s.logLimits.m.Load(msg)
	if !ok {
		v, _ = s.logLimits.m.LoadOrStore(msg, new(logLimit))
	}
	l := v.(*logLimit)
	sec := time.Now().Unix()
	l.mu.Lock()
	if l.sec != sec {
		l.sec, l.n = sec, 0
	}
	if l.n >= LogBurst {
		l.suppressed++
		l.total++
		l.mu.Unlock()
		return
	}
	l.n++
	suppressed := l.suppressed
	l.suppressed = 0
	l.mu.Unlock()
	if suppressed > 0 {
		attrs = append(attrs, "suppressed", suppressed)
	}
	s.opts.logger.Log(context.Background(), level, msg, attrs...)
}

// suppressedLines calls f with each message and the lines of it
// suppressed since the server started.
func (ls *logLimits) suppressedLines(f func(msg string, n int64)) {
	ls.m.Range(func(k, v any) bool {
		l := v.(*logLimit)
		l.mu.Lock()
		n := l.total
		l.mu.Unlock()
		if n > 0 {
			f(k.(string), n)
		}
		return true
	})
}
