package kiev

import (
	"context"
	"crypto/tls"
	"net"
	"net/http"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/kievrpc/kiev/codec"
	"github.com/kievrpc/kiev/internal/transport"
	"github.com/kievrpc/kiev/registry"
	"github.com/kievrpc/kiev/shed"
)

// The options only a Server takes (ServerOption), with their settings and
// defaults. Those a Server and a Client both take, and the plumbing of
// all options, are in options.go; those only a Client takes, in
// client_options.go.

// serverOptions are a Server's settings.
type serverOptions struct {
	connOptions
	codecs         []codec.Codec
	interceptors   []ServerInterceptor
	baseContext    func(net.Listener) context.Context
	shed           shed.Options
	registry       registry.Registry
	advertise      string
	weight         int
	instanceMeta   map[string]string
	packet         Packet
	packetKeys     func(id string) ([]byte, bool) // WithPacketKeys
	accessLog      bool
	slowLog        time.Duration
	admin          string
	adminAuth      func(*http.Request) error
	metrics        prometheus.Registerer
	httpMaxBody    int64
	httpTimeout    time.Duration
	tls            *tls.Config
	certsOptional  bool // WithoutClientCertsOutsideTLS
	tokensUnsigned bool // WithoutPacketKeysForTokenAuth
	maxConns       int
	maxCalls       int
	inline         transport.InlineTuning // set by tests only; zero fields are the defaults
	fastCGI        FastCGILimits
	maxQueued      int
	maxPartial     int
	// Streams: WithMaxStreams, WithMaxServerStreams, WithMaxStreamAge,
	// WithStreamDrain.
	maxStreams       int
	maxServerStreams int
	sseKeepalive     time.Duration // tests shorten it; 0: transport.DefaultSSEKeepalive
	maxStreamAge     time.Duration
	streamDrain      time.Duration

	priorityPolicy func(req *Request, claimed Priority) Priority
	dropHook       func(ctx context.Context, req *Request, reason shed.Reason)
}

func (o *serverOptions) fill() {
	o.connOptions.fill()
	o.fastCGI.fill()
	o.packet.fill()
	if o.httpMaxBody <= 0 {
		o.httpMaxBody = DefaultHTTPMaxBody
	}
	if o.httpTimeout <= 0 {
		o.httpTimeout = DefaultHTTPTimeout
	}
	if o.maxPartial <= 0 {
		o.maxPartial = DefaultMaxPartialFrameBytes
	}
	if o.maxQueued <= 0 {
		o.maxQueued = DefaultMaxQueuedBytes
	}
	if o.maxStreams <= 0 {
		o.maxStreams = DefaultMaxStreams
	}
	if o.maxServerStreams <= 0 {
		o.maxServerStreams = DefaultMaxServerStreams
	}
	if o.streamDrain <= 0 {
		o.streamDrain = DefaultStreamDrain
	}
}

// DefaultMaxPartialFrameBytes is the default of WithMaxPartialFrameBytes.
const DefaultMaxPartialFrameBytes = 256 << 20

// DefaultMaxQueuedBytes is the default of WithMaxQueuedBytes.
const DefaultMaxQueuedBytes = 64 << 20

// MaxUnansweredCalls is how many calls a server's connection may have
// read and not yet answered: past it, the server reads no more of the
// connection's calls until one is answered, and the client's further
// calls wait in its socket (no call fails for it). Streams do not count;
// WithMaxStreams bounds them. WithMaxConcurrentCalls, lower, refuses
// calls instead.
const MaxUnansweredCalls = transport.MaxUnanswered

// WithCodecs adds codecs a Server accepts besides the built-in
// codec.Msgpack and codec.Protobuf. A codec whose Name is already known
// replaces the earlier one.
func WithCodecs(cs ...codec.Codec) ServerOption {
	return serverOption(func(o *serverOptions) { o.codecs = append(o.codecs, cs...) })
}

// WithServerInterceptor adds interceptors that wrap every call a Server
// runs. The first one given is the outermost.
func WithServerInterceptor(ics ...ServerInterceptor) ServerOption {
	return serverOption(func(o *serverOptions) { o.interceptors = append(o.interceptors, ics...) })
}

// WithShed configures the overload scheduler every call passes through
// before its handler runs (see package shed). A zero shed.Options field
// takes its default, so servers shed load without this option; pass
// shed.Options{Disabled: true} to run every call at once on its own
// goroutine, as net/rpc does.
func WithShed(o shed.Options) ServerOption {
	return serverOption(func(so *serverOptions) { so.shed = o })
}

// WithPriorityPolicy sets a function that decides the priority each call
// is scheduled at, from the call as it arrived (its method, peer,
// metadata such as the AuthorizationKey token, TLS state; Args are not
// decoded yet) and the priority its caller claimed, before the overload
// scheduler sees it. Use it to cap what a client may claim by its
// identity, or to set priorities by method. The handler's ctx carries the
// result, so the calls it makes inherit it. It runs on the connection's
// reader for every call, so it must be quick and must not block; values
// above MaxPriority are taken as MaxPriority. Without it, the priority a
// call carries is trusted, as calls between a service's own tiers
// propagate theirs.
func WithPriorityPolicy(f func(req *Request, claimed Priority) Priority) ServerOption {
	return serverOption(func(so *serverOptions) { so.priorityPolicy = f })
}

// WithDropHook sets a function the server calls for each call its
// overload scheduler drops without running it, with the call's context
// and Request (its Args are nil) and why: shed.Evicted, shed.Refused,
// shed.Expired or shed.Limited under overload, shed.Deadline when too
// little time was left. No interceptor sees such a call, since none runs;
// the hook lets tracing and logs show it on the server's side, as
// otelkiev.DropHook does. It runs on the scheduler's goroutine, before
// the call is answered, so it must be quick and must not block.
func WithDropHook(f func(ctx context.Context, req *Request, reason shed.Reason)) ServerOption {
	return serverOption(func(o *serverOptions) { o.dropHook = f })
}

// WithBaseContext sets the function that gives the parent context of
// every handler context for calls arriving through listener l, that is
// through Serve or ServeFastCGI; the handler contexts take their values
// from it, and end when it does. The default is context.Background. Calls
// through HTTPHandler take their values from the request's context, which
// the http.Server's own BaseContext and ConnContext set; calls through
// ServePacket, which has no listener, from context.Background.
func WithBaseContext(f func(l net.Listener) context.Context) ServerOption {
	return serverOption(func(o *serverOptions) { o.baseContext = f })
}

// WithAdvertise sets the address a Server registers for its listeners,
// "host" or "host:port", for when the one it finds is not the one clients
// must use (NAT, containers). Without it a listener on a specific host
// advertises that address, and one on ":port", "0.0.0.0:port" or
// "[::]:port" advertises the first non-loopback address of the machine's
// network interfaces, or loopback if it has none. A host without a port
// takes the listener's port.
func WithAdvertise(addr string) ServerOption {
	return serverOption(func(o *serverOptions) { o.advertise = addr })
}

// WithWeight sets the weight a Server registers: its capacity relative to
// other providers of the same services, for weighted balancers (1 by
// default).
func WithWeight(w int) ServerOption {
	return serverOption(func(o *serverOptions) { o.weight = w })
}

// WithInstanceMetadata sets labels a Server registers with its services,
// such as zone or build, for clients and operators to read.
func WithInstanceMetadata(md map[string]string) ServerOption {
	return serverOption(func(o *serverOptions) { o.instanceMeta = md })
}

// WithMaxConnections bounds the client connections a Server keeps open at
// once (0, the default, means no bound). Connections past it are closed as
// soon as they are accepted, and logged, so that a flood of connections
// cannot exhaust the server's memory or file descriptors.
func WithMaxConnections(n int) ServerOption {
	return serverOption(func(o *serverOptions) { o.maxConns = n })
}

// WithMaxConcurrentCalls bounds the calls one connection may have in
// flight on a Server (0, the default, means no bound beyond the overload
// scheduler's); over UDP, the calls one client address has running.
// Calls past it are refused at once with ErrOverloaded, so that one
// client cannot take the whole server.
func WithMaxConcurrentCalls(n int) ServerOption {
	return serverOption(func(o *serverOptions) { o.maxCalls = n })
}

// WithMaxPartialFrameBytes bounds the bytes a Server holds, across all
// its connections, for frames larger than its 64 KiB read buffer while
// they arrive (DefaultMaxPartialFrameBytes, 256 MiB). A frame is held as
// its bytes come in, 64 KiB at a time, never as its length prefix
// announces; a connection whose frame would take the server past the
// bound is closed, and the warning says so. So peers that announce large
// frames and send them slowly, or never finish them, cannot hold more.
func WithMaxPartialFrameBytes(n int) ServerOption {
	return serverOption(func(o *serverOptions) { o.maxPartial = n })
}

// WithMaxQueuedBytes bounds the memory a Server holds for its
// connections' calls (DefaultMaxQueuedBytes, 64 MiB): the replies queued
// for their clients to read, and the room their calls in flight will
// need. Each connection gets an equal share of it, at least 64 KiB and at
// most 16 MiB. A call in flight holds its args, twice its method's recent
// reply size (the reply and its encoding; 64 KiB while the method has made
// none) and 1 KiB, from when it is read until it is answered.
//
// A connection whose queued replies and calls in flight pass its share
// (once it has 16 calls in flight: a few long polls never hold up the
// rest) is not read until they drop back (its client's further calls wait in its
// socket); so is one with MaxUnansweredCalls calls unanswered, as HTTP/2
// servers cap a connection's streams. Calls read
// before that are refused unrun with ErrOverloaded once the connection is
// past twice its share, as are their replies larger than 1 KiB; a
// connection that takes no byte for the heartbeat timeout is closed. So a
// client that does not read its replies, however many calls it pipelines,
// holds about its share of memory and none of the goroutines that serve
// everyone else.
func WithMaxQueuedBytes(n int) ServerOption {
	return serverOption(func(o *serverOptions) { o.maxQueued = n })
}

// WithAdmin makes a Server serve its admin pages over HTTP on addr, such
// as "127.0.0.1:9090", from its first Serve (or ServePacket) until it
// stops; see Server.AdminHandler. Server.AdminAddr reports the address,
// which helps with ":0". The pages show the server's services, peers and
// health: bind addr to loopback or a private network, or protect them
// with WithAdminAuth.
//
// The admin HTTP server holds at most admin.MaxConns connections (more
// wait to be accepted), gives a request admin.ReadTimeout to arrive and
// its answer admin.WriteTimeout, and closes a keep-alive connection idle
// for admin.IdleTimeout (see admin.Serve), so that idle or slow clients
// of the admin pages cannot take the process's file descriptors from its
// RPC listeners.
func WithAdmin(addr string) ServerOption {
	return serverOption(func(o *serverOptions) { o.admin = addr })
}

// WithFastCGILimits bounds the connections of Server.ServeFastCGI: how
// many are open at once, how long each record may take to arrive, and how
// long a connection may be idle. A zero field of l takes its default; see
// FastCGILimits. Without this option every field takes its default.
func WithFastCGILimits(l FastCGILimits) ServerOption {
	return serverOption(func(o *serverOptions) { o.fastCGI = l })
}

// WithAdminAuth makes the admin pages (WithAdmin and AdminHandler) call
// check for every request first; a request it returns an error for is
// answered 401 Unauthorized with the error's text, and nothing else. For
// example, to require a bearer token:
//
//	kiev.WithAdminAuth(func(r *http.Request) error {
//		if subtle.ConstantTimeCompare([]byte(r.Header.Get("Authorization")), []byte("Bearer "+token)) != 1 {
//			return errors.New("send Authorization: Bearer <the admin token>")
//		}
//		return nil
//	})
func WithAdminAuth(check func(r *http.Request) error) ServerOption {
	return serverOption(func(o *serverOptions) { o.adminAuth = check })
}

// WithMetrics registers the Server's Prometheus collectors, and those of
// the process's Clients, with reg (for instance prometheus.DefaultRegisterer,
// to serve them from promhttp.Handler on your own mux). Without it they go
// to a registry of the server's own, which the admin pages serve.
func WithMetrics(reg prometheus.Registerer) ServerOption {
	return serverOption(func(o *serverOptions) { o.metrics = reg })
}

// WithHTTPMaxBody bounds the request bodies of the HTTP front (default
// DefaultHTTPMaxBody, 4 MiB); a larger one is answered 413.
func WithHTTPMaxBody(n int64) ServerOption {
	return serverOption(func(o *serverOptions) { o.httpMaxBody = n })
}

// WithHTTPTimeout sets the deadline of HTTP calls that send no
// Kiev-Timeout header (default DefaultHTTPTimeout, 10s).
func WithHTTPTimeout(d time.Duration) ServerOption {
	return serverOption(func(o *serverOptions) { o.httpTimeout = d })
}

// WithAccessLog makes a Server log every call it answers, at Info level:
// its attributes (see Logger), the code it ended with and how long it
// took.
func WithAccessLog() ServerOption {
	return serverOption(func(o *serverOptions) { o.accessLog = true })
}

// WithSlowLog makes a Server log, at Warn level, every call whose handler
// ran longer than threshold.
func WithSlowLog(threshold time.Duration) ServerOption {
	return serverOption(func(o *serverOptions) { o.slowLog = threshold })
}

// WithPacketKeys makes a Server accept over UDP only requests and cancels
// signed with a key that lookup returns for the id they name
// (WithPacketKey), and only while fresh (Packet.AuthSkew): the others are
// answered ErrUnauthenticated, or for a cancel dropped. A signed call is
// remembered by its key id, session and call id until it is no longer
// fresh, so a replay, from any address, never runs its handler again.
// Handlers find the key id under PacketKeyMetadata.
func WithPacketKeys(lookup func(id string) (key []byte, ok bool)) ServerOption {
	return serverOption(func(o *serverOptions) { o.packetKeys = lookup })
}

// WithoutClientCertsOutsideTLS lets a server whose WithTLS requires client
// certificates serve callers without one where no certificate can be
// seen: over UDP (ServePacket), FastCGI (ServeFastCGI, behind a web server
// that checks clients itself) and HTTPHandler. Each such entry point
// logs a warning when it starts. Check callers there another way, such
// as TokenAuth.
func WithoutClientCertsOutsideTLS() ServerOption {
	return serverOption(func(o *serverOptions) { o.certsOptional = true })
}

// WithoutPacketKeysForTokenAuth lets a server with TokenAuth serve UDP
// (ServePacket) without WithPacketKeys, which it otherwise refuses to:
// the token then travels in clear in every datagram, so anyone who sees
// one has the token, and can replay the captured request: from another
// address it is another call to the server, which knows an unsigned call
// by its address and session, and its handler runs again. ServePacket
// logs a warning when it starts. Use it only where nobody else can see or
// send the datagrams. ServePacket knows the interceptors TokenAuth makes
// among those of WithServerInterceptor; a token check of your own is
// not known, and carries the same risk over UDP.
func WithoutPacketKeysForTokenAuth() ServerOption {
	return serverOption(func(o *serverOptions) { o.tokensUnsigned = true })
}
