package zktest

import (
	"net"
	"sync"
	"testing"
)

// Proxy forwards TCP connections from its own loopback address to a
// target, and lets a test disturb them: [Proxy.Pause] holds every
// connection open but silent, as a network partition does, so that the
// server expires the client's session; [Proxy.Cut] closes the connections
// at once, as a crashed peer or a reset does.
type Proxy struct {
	target string
	ln     net.Listener
	wg     sync.WaitGroup

	mu      sync.Mutex
	paused  bool
	resumed chan struct{} // closed while not paused
	pipes   map[*pipe]struct{}
	closed  bool
}

// pipe is one client connection and its connection to the target.
type pipe struct {
	client, server net.Conn
	once           sync.Once
	done           chan struct{} // closed by close
}

func (p *pipe) close() {
	p.once.Do(func() {
		close(p.done)
		p.client.Close()
		p.server.Close()
	})
}

// NewProxy starts a proxy to target on a free loopback port. It is closed,
// with all its connections, when the test ends.
func NewProxy(t testing.TB, target string) *Proxy {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatalf("zktest: %v", err)
	}
	resumed := make(chan struct{})
	close(resumed)
	p := &Proxy{target: target, ln: ln, resumed: resumed, pipes: make(map[*pipe]struct{})}
	p.wg.Add(1)
	go p.accept()
	t.Cleanup(p.close)
	return p
}

// Addr returns the address clients dial to reach the target.
func (p *Proxy) Addr() string { return p.ln.Addr().String() }

// Pause stops forwarding: bytes already read are held, nothing more is
// written either way, and no connection is closed, so neither side sees
// an error until its own timeouts fire. Connections accepted while paused
// are held the same way.
func (p *Proxy) Pause() {
	p.mu.Lock()
	defer p.mu.Unlock()
	if !p.paused {
		p.paused = true
		p.resumed = make(chan struct{})
	}
}

// Resume forwards again, held bytes first.
func (p *Proxy) Resume() {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.paused {
		p.paused = false
		close(p.resumed)
	}
}

// Cut closes every current connection, both sides. Later connections are
// forwarded as usual.
func (p *Proxy) Cut() {
	p.mu.Lock()
	pipes := make([]*pipe, 0, len(p.pipes))
	for pp := range p.pipes {
		pipes = append(pipes, pp)
	}
	p.mu.Unlock()
	for _, pp := range pipes {
		pp.close()
	}
}

func (p *Proxy) close() {
	p.mu.Lock()
	p.closed = true
	p.mu.Unlock()
	p.ln.Close()
	p.Cut()
	p.wg.Wait()
}

func (p *Proxy) accept() {
	defer p.wg.Done()
	for {
		c, err := p.ln.Accept()
		if err != nil {
			return
		}
		s, err := net.Dial("tcp", p.target)
		if err != nil {
			// The target is down: the client sees its connection closed.
			c.Close()
			continue
		}
		pp := &pipe{client: c, server: s, done: make(chan struct{})}
		p.mu.Lock()
		if p.closed {
			p.mu.Unlock()
			pp.close()
			return
		}
		p.pipes[pp] = struct{}{}
		p.wg.Add(2)
		p.mu.Unlock()
		go p.forward(pp, s, c)
		go p.forward(pp, c, s)
	}
}

// forward copies src to dst until either fails, holding each chunk while
// the proxy is paused.
func (p *Proxy) forward(pp *pipe, dst, src net.Conn) {
	defer p.wg.Done()
	defer func() {
		pp.close()
		p.mu.Lock()
		delete(p.pipes, pp)
		p.mu.Unlock()
	}()
	buf := make([]byte, 32<<10)
	for {
		n, err := src.Read(buf)
		if !p.wait(pp) {
			return
		}
		if n > 0 {
			if _, err := dst.Write(buf[:n]); err != nil {
				return
			}
		}
		if err != nil {
			return
		}
	}
}

// wait blocks while the proxy is paused; it reports false if pp was closed
// meanwhile.
func (p *Proxy) wait(pp *pipe) bool {
	p.mu.Lock()
	resumed := p.resumed
	p.mu.Unlock()
	select {
	case <-resumed:
		select {
		case <-pp.done:
			return false
		default:
			return true
		}
	case <-pp.done:
		return false
	}
}
