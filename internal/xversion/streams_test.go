package xversion

import (
	"fmt"
	"io"
	"net"
	"slices"
	"sync"
	"testing"

	"github.com/kievrpc/kiev/internal/wire"
)

// TestOldServersSeeNoStreamFrame runs the current client's stream
// scenario and a call against each build's server through a proxy that
// reads every frame the client sends. A server from before streams must
// be sent no stream frame (Message, Credit, End) nor a Request that opens
// a stream, the stream must fail with ErrStreamsUnsupported, and the call
// must go on. Against the current server the proxy must see the
// stream's Request: the control that shows it would see one.
func TestOldServersSeeNoStreamFrame(t *testing.T) {
	bs := allBuilds(t)
	cur := bs[0]
	for _, srv := range bs {
		t.Run(cur.name+"_to_"+srv.name, func(t *testing.T) {
			a := startServer(t, srv)
			spy := spyOn(t, a.TCP)
			a.TCP = spy.addr
			results := runClient(t, cur, a, "tcp", "msgpack", "call", "stream")
			want := map[string]string{"call": "ok", "stream": expect("stream", "tcp", cur, srv)[0]}
			for _, r := range results {
				if r.Class != want[r.Scenario] {
					t.Errorf("%s: %s (%s); want %s", r.Scenario, r.Class, r.Detail, want[r.Scenario])
				}
				delete(want, r.Scenario)
			}
			for s := range want {
				t.Errorf("%s: no result", s)
			}
			seen := spy.seen()
			switch {
			case srv.lacks.stream && len(seen) > 0:
				t.Errorf("the %s server, from before streams, was sent %v", srv.name, seen)
			case !srv.lacks.stream && !slices.Contains(seen, "a Request with Stream"):
				t.Errorf("the proxy saw %v between two builds with streams; want the Request that opens the stream", seen)
			}
			t.Logf("stream frames the %s server was sent: %v", srv.name, seen)
		})
	}
}

// frameSpy relays TCP connections to a server, reading the frames each
// client sends, and noting those of streams.
type frameSpy struct {
	addr string
	wg   sync.WaitGroup

	mu     sync.Mutex // guards the fields below
	frames []string   // the stream frames clients sent, named
	conns  []net.Conn
}

// spyOn relays a loopback listener to target until the test ends.
func spyOn(t *testing.T, target string) *frameSpy {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	s := &frameSpy{addr: l.Addr().String()}
	s.wg.Go(func() {
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			s.wg.Go(func() { s.relay(c, target) })
		}
	})
	t.Cleanup(func() {
		l.Close()
		s.mu.Lock()
		for _, c := range s.conns {
			c.Close()
		}
		s.mu.Unlock()
		s.wg.Wait()
	})
	return s
}

// relay copies c to a connection to target and back, reading the frames
// c sends as they pass.
func (s *frameSpy) relay(c net.Conn, target string) {
	up, err := net.Dial("tcp", target)
	if err != nil {
		c.Close()
		return
	}
	s.mu.Lock()
	s.conns = append(s.conns, c, up)
	s.mu.Unlock()
	s.wg.Go(func() {
		_, _ = io.Copy(c, up)
		c.Close()
	})
	defer up.Close()
	r := wire.NewReader(io.TeeReader(c, up), 4096, 1<<30)
	if _, err := wire.ReadPreface(r); err != nil {
		return
	}
	var h wire.Header
	for {
		f, err := r.Next()
		if err != nil {
			return
		}
		switch {
		case f.Type >= wire.TypeMessage && f.Type <= wire.TypeEnd:
			s.note(fmt.Sprintf("a frame of type %d", f.Type))
		case f.Type == wire.TypeRequest && wire.ParseHeader(f.Header, &h) == nil && h.HasStream:
			s.note("a Request with Stream")
		}
	}
}

func (s *frameSpy) note(what string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if !slices.Contains(s.frames, what) {
		s.frames = append(s.frames, what)
	}
}

// seen returns the stream frames clients sent, each named once.
func (s *frameSpy) seen() []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return slices.Clone(s.frames)
}
