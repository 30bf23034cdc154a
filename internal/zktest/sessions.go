package zktest

import (
	"bytes"
	"context"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"
)

// What a [SessionEvent] tells.
const (
	Established  = "established"  // a session was established (or re-established) on Server
	Expired      = "expired"      // the ensemble expired the session
	Disconnected = "disconnected" // the connection to Server was lost
)

// SessionEvent is a change of a ZooKeeper session that one of kiev's
// registries logged.
type SessionEvent struct {
	Who    string // the name given to [Sessions.Logger]
	What   string // Established, Expired or Disconnected
	Server string // the address the client library had dialed
	At     time.Time
}

// Sessions records the session changes of kiev's ZooKeeper registries
// (registry/zookeeper), read from what they log, one logger each: on
// which server each registry holds its session, when it moved, whether it
// expired. It keeps all they log, for failure messages. It is safe for
// concurrent use.
type Sessions struct {
	mu      sync.Mutex
	buf     bytes.Buffer
	events  []SessionEvent
	changed chan struct{} // closed and replaced at each event
}

// NewSessions returns an empty record.
func NewSessions() *Sessions { return &Sessions{changed: make(chan struct{})} }

// Logger returns a Debug-level logger for the registry (or the server or
// client using it) named who; pass it as zookeeper.Config.Logger.
func (s *Sessions) Logger(who string) *slog.Logger {
	text := slog.NewTextHandler((*sessionsWriter)(s), &slog.HandlerOptions{Level: slog.LevelDebug})
	return slog.New(sessionHandler{s: s, who: who, next: text.WithAttrs([]slog.Attr{slog.String("who", who)})})
}

// Tail returns the last max bytes logged.
func (s *Sessions) Tail(max int) string {
	s.mu.Lock()
	defer s.mu.Unlock()
	b := s.buf.Bytes()
	if len(b) > max {
		b = b[len(b)-max:]
	}
	return string(b)
}

// Since returns the events after t.
func (s *Sessions) Since(t time.Time) []SessionEvent {
	s.mu.Lock()
	defer s.mu.Unlock()
	var out []SessionEvent
	for _, e := range s.events {
		if e.At.After(t) {
			out = append(out, e)
		}
	}
	return out
}

// Where returns the server on which who's registry last established its
// session, or "" if it has not.
func (s *Sessions) Where(who string) string {
	s.mu.Lock()
	defer s.mu.Unlock()
	for i := len(s.events) - 1; i >= 0; i-- {
		if e := s.events[i]; e.Who == who && e.What == Established {
			return e.Server
		}
	}
	return ""
}

// AwaitEstablished waits up to within until who's registry has
// established its session, after t, on a server other than not, and
// returns that event. It fails the test if none comes.
func (s *Sessions) AwaitEstablished(tb testing.TB, who, not string, t time.Time, within time.Duration) SessionEvent {
	tb.Helper()
	timeout := time.NewTimer(within)
	defer timeout.Stop()
	for {
		s.mu.Lock()
		changed := s.changed
		for _, e := range s.events {
			if e.Who == who && e.What == Established && e.Server != not && e.At.After(t) {
				s.mu.Unlock()
				return e
			}
		}
		s.mu.Unlock()
		select {
		case <-changed:
		case <-timeout.C:
			tb.Fatalf("zktest: %s's registry established no session on a server other than %s within %v", who, not, within)
		}
	}
}

// Count returns how many of es tell what.
func Count(es []SessionEvent, what string) int {
	n := 0
	for _, e := range es {
		if e.What == what {
			n++
		}
	}
	return n
}

type sessionsWriter Sessions

func (w *sessionsWriter) Write(p []byte) (int, error) {
	s := (*Sessions)(w)
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.buf.Write(p)
}

// sessionHandler notes the session events among the records it passes on.
type sessionHandler struct {
	s    *Sessions
	who  string
	next slog.Handler
}

// The messages of registry/zookeeper's session events, and what they tell.
var sessionMessages = []struct{ prefix, what string }{
	{"kiev/registry/zookeeper: session established", Established},
	{"kiev/registry/zookeeper: session expired", Expired},
	{"kiev/registry/zookeeper: lost the connection", Disconnected},
}

func (h sessionHandler) Enabled(context.Context, slog.Level) bool { return true }

func (h sessionHandler) Handle(ctx context.Context, r slog.Record) error {
	for _, m := range sessionMessages {
		if !strings.HasPrefix(r.Message, m.prefix) {
			continue
		}
		e := SessionEvent{Who: h.who, What: m.what, At: r.Time}
		r.Attrs(func(a slog.Attr) bool {
			if a.Key == "server" {
				e.Server = a.Value.String()
			}
			return true
		})
		h.s.mu.Lock()
		h.s.events = append(h.s.events, e)
		close(h.s.changed)
		h.s.changed = make(chan struct{})
		h.s.mu.Unlock()
		break
	}
	return h.next.Handle(ctx, r)
}

func (h sessionHandler) WithAttrs(as []slog.Attr) slog.Handler {
	return sessionHandler{h.s, h.who, h.next.WithAttrs(as)}
}

func (h sessionHandler) WithGroup(name string) slog.Handler {
	return sessionHandler{h.s, h.who, h.next.WithGroup(name)}
}
