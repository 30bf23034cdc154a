package kiev

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"net"
	"reflect"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/kievrpc/kiev/admin"
	"github.com/kievrpc/kiev/codec"
	"github.com/kievrpc/kiev/health"
	"github.com/kievrpc/kiev/internal/transport"
	"github.com/kievrpc/kiev/registry"
	"github.com/kievrpc/kiev/shed"
)

// Server serves registered services over any number of listeners. Create
// one with NewServer; its methods are safe for concurrent use.
type Server struct {
	opts    serverOptions
	handler Handler // the interceptor chain around invoke

	mu         sync.Mutex                    // guards the fields below
	services   map[string]map[string]*method // service -> method name -> method
	listeners  map[net.Listener]struct{}
	conns      map[*transport.ServerConn]struct{}
	codecConns map[*codecConn]struct{} // ServeCodec's
	connCount  atomic.Int64            // len(conns), read without the lock
	closed     bool
	done       chan struct{} // closed by Shutdown and Close

	methods atomic.Pointer[map[string]*method] // "Service.Method" -> method; copy on write
	codecs  map[string]codec.Codec             // read-only after NewServer

	connWG sync.WaitGroup         // connection goroutines
	sched  *shed.Scheduler        // runs every call
	inline transport.InlineWatch  // the watchdog over readers lent to calls
	tcp    transport.ServerConfig // what its connections share

	packets     map[*transport.PacketServer]struct{}
	packetStats transport.PacketServerCounters

	advertised map[any]registry.Instance // what each listener or packet socket registered, without a service
	regWG      sync.WaitGroup            // registrations in progress
	regCtx     context.Context           // canceled when the server deregisters for good
	regClosed  bool                      // no registration may start; under mu
	regCancel  context.CancelFunc

	hooks     hooks                // OnShutdown functions and health checks
	logLimits logLimits            // lines per second of the warnings peers can cause
	partial   transport.Budget     // bytes held for large frames in progress (WithMaxPartialFrameBytes)
	http      *transport.HTTPFront // HTTPHandler's and ServeFastCGI's
	health    *health.Reporter     // the health service's state
	// Registrations not yet confirmed by the registry, and the last one
	// that failed, for readiness (/readyz).
	regPending atomic.Int64
	regFailed  atomic.Pointer[error]

	// unknown is the method of calls of a method the server does not
	// have, while it has interceptors: they see such calls too, so that
	// an authentication interceptor answers a caller without credentials
	// alike whatever it asks for, and no name can be probed. Its handler
	// answers NotFound.
	unknown *method

	inFlight atomic.Int64 // handlers running
	started  time.Time

	streamsOpen atomic.Int64  // streams whose handler runs (WithMaxServerStreams)
	runners     streamRunners // goroutines kept for the next streams' handlers

	registry  *prometheus.Registry // the server's own metrics, unless WithMetrics
	adminOnce sync.Once
	adminSrv  *admin.HTTPServer // WithAdmin's, once started
	hist      history           // the status page's charts
}

// NewServer returns a Server with the given options and no services. It
// panics if an option's value is not valid, naming the option, as
// time.NewTicker does for a bad interval: settings are the program's, and
// the mistake shows at start (use shed.Options.Validate to check
// settings read from a file first).
func NewServer(opts ...ServerOption) *Server {
	s := &Server{
		services:   make(map[string]map[string]*method),
		listeners:  make(map[net.Listener]struct{}),
		conns:      make(map[*transport.ServerConn]struct{}),
		codecConns: make(map[*codecConn]struct{}),
		done:       make(chan struct{}),
		codecs:     make(map[string]codec.Codec),
		runners:    streamRunners{work: make(chan streamJob)},

		packets:    make(map[*transport.PacketServer]struct{}),
		advertised: make(map[any]registry.Instance),
	}
	s.regCtx, s.regCancel = context.WithCancel(context.Background())
	s.started = time.Now()
	for _, o := range opts {
		o.applyServer(&s.opts)
	}
	if err := s.opts.shed.Validate(); err != nil {
		panic(fmt.Errorf("kiev: NewServer: WithShed: %w", err))
	}
	s.opts.fill()
	s.partial.Max = int64(s.opts.maxPartial)
	s.tcp = transport.ServerConfig{
		Handler:           (*plumbing)(s),
		HeartbeatInterval: s.opts.heartbeatInterval,
		HeartbeatTimeout:  s.opts.heartbeatTimeout,
		MaxFrame:          s.opts.maxFrame,
		MaxCalls:          s.opts.maxCalls,
		Partial:           &s.partial,
		MaxQueued:         s.opts.maxQueued,
		Conns:             &s.connCount,
		Compress:          s.opts.compress.c,
		Warn:              s.warn,
		Inline:            s.opts.inline,
		Watch:             &s.inline,
		Readers:           &s.connWG,
		MaxStreams:        s.opts.maxStreams,
		StreamBudget:      s.opts.streamBudget,
	}
	s.tcp.Settings = transport.SettingsFrame(s.opts.compress.accept, s.opts.maxStreams, s.opts.maxFrame)
	if s.opts.tls != nil {
		s.tcp.TLS = s.tlsServer
	}
	s.http = transport.NewHTTPFront(transport.HTTPConfig{
		Handler:   (*plumbing)(s),
		Check:     s.httpCheck,
		Closed:    s.isClosed,
		MaxBody:   s.opts.httpMaxBody,
		Timeout:   s.opts.httpTimeout,
		Keepalive: s.opts.sseKeepalive,
		MaxFrame:  s.opts.maxFrame,
		MaxCalls:  s.opts.maxCalls,
		Streams:   s.httpStreams,
	})
	s.unknown = &method{name: "(unknown method)", argType: reflect.TypeFor[struct{}](), replyType: reflect.TypeFor[struct{}](), dropped: dropMessages("(unknown method)")}
	for _, c := range append([]codec.Codec{codec.Msgpack, codec.Protobuf, codec.JSON}, s.opts.codecs...) {
		s.codecs[c.Name()] = c
	}
	s.handler = chainServer(s.invoke, s.opts.interceptors)
	s.sched = shed.New(s.opts.shed)
	empty := map[string]*method{}
	s.methods.Store(&empty)
	s.registerReflection()
	s.registerHealthService()
	s.registerAdminService()
	s.registerMetrics()
	return s
}

// Register publishes the exported methods of svc that fit the method
// contract (see the package documentation) under the name of svc's
// concrete type. It fails if svc has no callable method, saying why for
// each method, or if the name is already registered.
func (s *Server) Register(svc any) error {
	return s.register(svc, "", false)
}

// RegisterName is like Register but publishes the service under name.
func (s *Server) RegisterName(name string, svc any) error {
	if name == "" {
		return errors.New("kiev: RegisterName: empty service name")
	}
	return s.register(svc, name, true)
}

func (s *Server) register(svc any, name string, useName bool) error {
	methods, sname, err := buildService(name, svc, useName)
	if err != nil {
		return err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if _, dup := s.services[sname]; dup {
		return fmt.Errorf("kiev: Register: service %s is already registered; use RegisterName to publish another under a different name", sname)
	}
	s.services[sname] = methods
	all := make(map[string]*method, len(*s.methods.Load())+len(methods))
	for k, v := range *s.methods.Load() {
		all[k] = v
	}
	for _, m := range methods {
		all[m.name] = m
	}
	s.methods.Store(&all)
	s.publishService(sname)
	return nil
}

// logServing writes the one line a server logs as it starts serving an
// address: where, which services, and its admin page.
func (s *Server) logServing(what string, a net.Addr) {
	s.mu.Lock()
	names := make([]string, 0, len(s.services))
	for n := range s.services {
		if !isBuiltin(n) {
			names = append(names, n)
		}
	}
	s.mu.Unlock()
	slices.Sort(names)
	attrs := []any{"network", a.Network(), "addr", a.String(), "services", strings.Join(names, ",")}
	if admin := s.AdminAddr(); admin != "" {
		attrs = append(attrs, "admin", "http://"+admin+"/")
	}
	s.opts.logger.Info("kiev: serving"+what, attrs...)
}

// lookup finds a method by its "Service.Method" name, or explains why
// there is none.
func (s *Server) lookup(name []byte) (*method, error) {
	if m := (*s.methods.Load())[string(name)]; m != nil {
		return m, nil
	}
	full := string(name)
	dot := strings.LastIndexByte(full, '.')
	if dot < 0 {
		return nil, fmt.Errorf("kiev: method name %q is not of the form Service.Method", full)
	}
	svc, meth := full[:dot], full[dot+1:]
	s.mu.Lock()
	methods, known := s.services[svc]
	var names []string
	if known {
		for n := range methods {
			names = append(names, n)
		}
	} else {
		for n := range s.services {
			if !isBuiltin(n) {
				names = append(names, n)
			}
		}
	}
	s.mu.Unlock()
	slices.Sort(names)
	if !known {
		if len(names) == 0 {
			return nil, fmt.Errorf("kiev: unknown service %q (in %q): the server has no services; register one", svc, full)
		}
		return nil, fmt.Errorf("kiev: unknown service %q (in %q)%s; the server has %s", svc, full, suggest(svc, names), strings.Join(names, ", "))
	}
	return nil, fmt.Errorf("kiev: service %q has no method %q%s; it has %s", svc, meth, suggest(meth, names), strings.Join(names, ", "))
}

// suggest returns `: did you mean "X"?` for the name among names that
// name was most likely meant to be: one that differs only in case, or by
// at most two edits; or "".
func suggest(name string, names []string) string {
	best, bestDist := "", 3
	for _, n := range names {
		d := editDistance(strings.ToLower(name), strings.ToLower(n))
		if strings.EqualFold(name, n) {
			d = 0
		}
		if d < bestDist {
			best, bestDist = n, d
		}
	}
	if best == "" {
		return ""
	}
	return fmt.Sprintf(" (did you mean %q?)", best)
}

// editDistance is the Levenshtein distance between a and b, in bytes.
func editDistance(a, b string) int {
	prev := make([]int, len(b)+1)
	cur := make([]int, len(b)+1)
	for j := range prev {
		prev[j] = j
	}
	for i := 1; i <= len(a); i++ {
		cur[0] = i
		for j := 1; j <= len(b); j++ {
			cost := 1
			if a[i-1] == b[j-1] {
				cost = 0
			}
			cur[j] = min(prev[j]+1, cur[j-1]+1, prev[j-1]+cost)
		}
		prev, cur = cur, prev
	}
	return prev[len(b)]
}

// Serve accepts connections on l and serves each on its own goroutines.
// It returns ErrServerClosed after Shutdown or Close, and otherwise the
// listener's error. Serve closes l when it returns.
func (s *Server) Serve(l net.Listener) error {
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		l.Close()
		return ErrServerClosed
	}
	s.listeners[l] = struct{}{}
	s.mu.Unlock()
	s.startAdmin()
	defer s.doneServing()
	s.publish(l, l.Addr())
	s.logServing("", l.Addr())
	defer func() {
		s.unpublish(context.Background(), l)
		s.mu.Lock()
		delete(s.listeners, l)
		s.mu.Unlock()
		l.Close()
	}()

	base := s.baseContext(l)
	for {
		nc, err := s.accept(l)
		if err != nil {
			return err
		}
		if !s.track(nc, base) {
			nc.Close()
			return ErrServerClosed
		}
	}
}

// accept returns l's next connection. Like net/http, it retries
// temporary errors, such as too many open files, after a pause that
// doubles from 5ms to 1s, so that a listener outlives a burst of them.
// It returns ErrServerClosed once the server is closed.
func (s *Server) accept(l net.Listener) (net.Conn, error) {
	var wait time.Duration
	for {
		nc, err := l.Accept()
		if err == nil {
			return nc, nil
		}
		if s.isClosed() {
			return nil, ErrServerClosed
		}
		te, ok := err.(interface{ Temporary() bool })
		if !ok || !te.Temporary() {
			return nil, err
		}
		wait = min(max(2*wait, 5*time.Millisecond), time.Second)
		s.warn("kiev: accept failed; retrying", "addr", l.Addr().String(), "err", err, "retry_in", wait)
		t := time.NewTimer(wait)
		select {
		case <-t.C:
		case <-s.done:
			t.Stop()
			return nil, ErrServerClosed
		}
	}
}

// track starts serving nc unless the server is closed.
func (s *Server) track(nc net.Conn, base context.Context) bool {
	c, ok := s.adopt(nc, base)
	if c != nil {
		go s.run(c)
	}
	return ok
}

// adopt makes nc one of the server's connections. It returns nil and
// false if the server is closed, and nil and true, having closed nc, if
// the server is at its connection limit.
func (s *Server) adopt(nc net.Conn, base context.Context) (*transport.ServerConn, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return nil, false
	}
	if max := s.opts.maxConns; max > 0 && len(s.conns) >= max {
		s.warn("kiev: connection refused: the server is at its connection limit (WithMaxConnections)", "peer", nc.RemoteAddr(), "limit", max)
		nc.Close()
		return nil, true
	}
	c := transport.NewServerConn(&s.tcp, nc, base)
	s.conns[c] = struct{}{}
	s.connCount.Add(1)
	s.connWG.Add(1)
	return c, true
}

// run serves an adopted connection until it ends, then forgets it.
func (s *Server) run(c *transport.ServerConn) {
	defer s.connWG.Done()
	c.Serve()
	s.mu.Lock()
	delete(s.conns, c)
	s.connCount.Add(-1)
	last := len(s.conns) == 0
	s.mu.Unlock()
	if last {
		// No connection, no calls: hold no parked goroutines.
		s.sched.ReleaseIdle()
	}
}

// Scheduler returns the server's overload scheduler, for its Stats.
func (s *Server) Scheduler() *shed.Scheduler { return s.sched }

// ListenAndServe listens on network ("tcp", "tcp4", "tcp6" or "unix") and
// addr, then calls Serve; or for "udp", "udp4" or "udp6", opens a socket
// and calls ServePacket.
func (s *Server) ListenAndServe(network, addr string) error {
	switch network {
	case "tcp", "tcp4", "tcp6", "unix":
	case "udp", "udp4", "udp6":
		pc, err := net.ListenPacket(network, addr)
		if err != nil {
			return err
		}
		return s.ServePacket(pc)
	default:
		return fmt.Errorf("kiev: ListenAndServe: network %q is not supported; use tcp, tcp4, tcp6, unix, udp, udp4 or udp6", network)
	}
	l, err := net.Listen(network, addr)
	if err != nil {
		return err
	}
	return s.Serve(l)
}

func (s *Server) isClosed() bool {
	select {
	case <-s.done:
		return true
	default:
		return false
	}
}

// stopListening marks the server closed, closes its listeners and returns
// the connections it had. It reports false if the server was already
// closed.
func (s *Server) stopListening() []*transport.ServerConn {
	s.mu.Lock()
	defer s.mu.Unlock()
	if !s.closed {
		s.closed = true
		close(s.done)
	}
	for l := range s.listeners {
		l.Close()
	}
	return slices.Collect(maps.Keys(s.conns))
}

// keysOf returns the keys of m, one of the server's sets, read under its
// lock.
func keysOf[K comparable, V any](s *Server, m map[K]V) []K {
	s.mu.Lock()
	defer s.mu.Unlock()
	return slices.Collect(maps.Keys(m))
}

// Shutdown stops the server gracefully. It first withdraws the server's
// registrations (see WithRegistry), so that clients stop picking it. Then
// it closes the listeners, tells every connected client to send no new
// calls (those fail at once on the client with ErrShutdown, and service
// clients retry them on another provider), lets the calls in flight finish
// and send their replies, then closes the connections. Packet sockets
// answer new calls with ErrShutdown and close once their calls have
// replied. If ctx ends first, Shutdown closes what is left as Close does
// and returns ctx's error.
func (s *Server) Shutdown(ctx context.Context) error {
	s.health.Stop()
	s.unpublish(ctx)
	for _, c := range s.stopListening() {
		c.Drain()
	}
	for _, cc := range keysOf(s, s.codecConns) {
		cc.drain()
	}
	for _, ps := range keysOf(s, s.packets) {
		ps.Drain()
	}
	done := make(chan struct{})
	go func() {
		s.connWG.Wait()
		close(done)
	}()
	streams := time.NewTimer(s.opts.streamDrain)
	defer streams.Stop()
	for {
		select {
		case <-done:
			s.sched.Close()
			s.sched.Wait() // every call has finished; workers are parked or leaving
			s.stopAdmin(ctx)
			return s.runShutdownHooks(ctx)
		case <-streams.C:
			s.endStreams(errStreamDrained)
		case <-ctx.Done():
			s.Close()
			<-done
			return ctx.Err()
		}
	}
}

// Close stops the server at once: it closes the listeners and every
// connection. Calls in flight fail on their clients with ErrShutdown, and
// their handlers' contexts are canceled. Close waits for the connection
// goroutines to exit, but not for handlers that ignore their context.
func (s *Server) Close() error {
	s.health.Stop()
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	s.unpublish(ctx)
	cancel()
	for _, c := range s.stopListening() {
		c.Close(ErrServerClosed)
	}
	for _, cc := range keysOf(s, s.codecConns) {
		cc.close()
	}
	for _, ps := range keysOf(s, s.packets) {
		ps.Abort()
	}
	s.sched.Close()
	s.connWG.Wait()
	hctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	s.stopAdmin(hctx)
	s.runShutdownHooks(hctx)
	return nil
}

// baseContext is the parent of the contexts of the calls that come
// through l: WithBaseContext's, or context.Background.
func (s *Server) baseContext(l net.Listener) context.Context {
	if s.opts.baseContext != nil {
		return s.opts.baseContext(l)
	}
	return context.Background()
}
