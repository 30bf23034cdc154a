package kiev

import (
	"context"
	"crypto/tls"
	"log/slog"
	"net"
	"net/http"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/kievrpc/kiev/balance"
	"github.com/kievrpc/kiev/codec"
	"github.com/kievrpc/kiev/registry"
	"github.com/kievrpc/kiev/shed"
)

// Defaults for the settings below. Every setting's zero value means its
// default, so NewServer() and Dial(addr) work without tuning.
const (
	DefaultMaxFrameSize      = 16 << 20
	DefaultHeartbeatInterval = time.Second
	DefaultHeartbeatTimeout  = 4 * time.Second
	DefaultDialTimeout       = 5 * time.Second
	DefaultMinBackoff        = 50 * time.Millisecond
	DefaultMaxBackoff        = 5 * time.Second
)

// ServerOption configures a Server; pass it to NewServer.
type ServerOption interface{ applyServer(*serverOptions) }

// DialOption configures a Client; pass it to Dial.
type DialOption interface{ applyDial(*dialOptions) }

// Option configures both sides; NewServer and Dial both accept it.
type Option interface {
	ServerOption
	DialOption
}

// connOptions are the settings shared by both ends of a connection.
type connOptions struct {
	logger            *slog.Logger
	maxFrame          int
	heartbeatInterval time.Duration
	heartbeatTimeout  time.Duration
	compress          compressOptions // WithCompression
}

func (o *connOptions) fill() {
	if o.logger == nil {
		o.logger = defaultLogger()
	}
	if o.maxFrame <= 0 {
		o.maxFrame = DefaultMaxFrameSize
	}
	if o.heartbeatInterval <= 0 {
		o.heartbeatInterval = DefaultHeartbeatInterval
	}
	if o.heartbeatTimeout <= 0 {
		o.heartbeatTimeout = max(DefaultHeartbeatTimeout, 3*o.heartbeatInterval)
	}
	if o.heartbeatTimeout < o.heartbeatInterval {
		o.heartbeatTimeout = o.heartbeatInterval
	}
	o.compress.fill(o.maxFrame)
}

type serverOptions struct {
	connOptions
	codecs        []codec.Codec
	interceptors  []ServerInterceptor
	baseContext   func(net.Listener) context.Context
	shed          shed.Options
	registry      registry.Registry
	advertise     string
	weight        int
	instanceMeta  map[string]string
	packet        Packet
	packetKeys    func(id string) ([]byte, bool) // WithPacketKeys
	accessLog     bool
	slowLog       time.Duration
	admin         string
	adminAuth     func(*http.Request) error
	metrics       prometheus.Registerer
	httpMaxBody   int64
	httpTimeout   time.Duration
	tls           *tls.Config
	certsOptional bool // WithoutClientCertsOutsideTLS
	maxConns      int
	maxCalls      int
	maxQueued     int
	maxPartial    int

	priorityPolicy func(req *Request, claimed Priority) Priority
}

func (o *serverOptions) fill() {
	o.connOptions.fill()
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
}

type dialOptions struct {
	connOptions
	codec        codec.Codec
	interceptors []ClientInterceptor
	dialTimeout  time.Duration
	minBackoff   time.Duration
	maxBackoff   time.Duration
	dialer       func(ctx context.Context, network, addr string) (net.Conn, error)
	retry        RetryPolicy
	throttle     Throttle
	registry     registry.Registry
	balancer     balance.Balancer
	failFast     bool
	providerWait time.Duration // < 0: no bound but the call's context
	outlier      Outlier
	packet       Packet
	packetKey    *packetKey // WithPacketKey
	tls          *tls.Config
}

func (o *dialOptions) fill() {
	o.connOptions.fill()
	if o.codec == nil {
		o.codec = codec.Msgpack
	}
	if o.dialTimeout <= 0 {
		o.dialTimeout = DefaultDialTimeout
	}
	if o.minBackoff <= 0 {
		o.minBackoff = DefaultMinBackoff
	}
	if o.maxBackoff <= 0 {
		o.maxBackoff = DefaultMaxBackoff
	}
	if o.maxBackoff < o.minBackoff {
		o.maxBackoff = o.minBackoff
	}
	if o.providerWait == 0 {
		o.providerWait = DefaultProviderWait
	}
	o.outlier.fill()
	o.packet.fill()
	if o.balancer == nil {
		o.balancer = balance.RoundRobin()
	}
	if o.dialer == nil {
		d := &net.Dialer{KeepAlive: -1} // kiev's heartbeats do this job
		o.dialer = d.DialContext
	}
}

// bothOption is an Option built from one function over connOptions.
type bothOption func(*connOptions)

func (f bothOption) applyServer(o *serverOptions) { f(&o.connOptions) }
func (f bothOption) applyDial(o *dialOptions)     { f(&o.connOptions) }

type serverOption func(*serverOptions)

func (f serverOption) applyServer(o *serverOptions) { f(o) }

type dialOption func(*dialOptions)

func (f dialOption) applyDial(o *dialOptions) { f(o) }

// WithLogger sets the logger for connection events (broken or hostile
// connections, handler panics, providers ejected), access and slow-call
// lines, and handlers' own lines through Logger(ctx). A client dialed
// with a zookeeper:// target also logs its registry's events through it
// (sessions, malformed provider nodes, the ZooKeeper client's own
// connection lines at Info). The default writes
// to standard error at Info level: coloured text on a terminal, JSON
// lines otherwise. kiev never logs an error it also returns to you.
func WithLogger(l *slog.Logger) Option {
	return bothOption(func(o *connOptions) { o.logger = l })
}

// WithMaxFrameSize sets the largest frame, in bytes, accepted or sent
// (DefaultMaxFrameSize, 16 MiB, if n is 0). A peer that announces a larger
// frame is disconnected; a call whose request or reply is larger fails
// with ErrTooLarge. Set the same value on servers and clients.
func WithMaxFrameSize(n int) Option {
	return bothOption(func(o *connOptions) { o.maxFrame = n })
}

// WithHeartbeat sets how often an idle connection is probed (interval,
// default 1s) and how long a silent peer is tolerated before the
// connection is declared dead and every call on it fails with ErrShutdown
// (timeout, default 4s or 3 intervals, whichever is longer). A probe is a
// 16-byte frame, sent only when nothing else arrived in the interval. The
// defaults find a provider that hangs or is cut off in about 4 to 5
// seconds, well before a ZooKeeper session (10s by default) gives it up.
func WithHeartbeat(interval, timeout time.Duration) Option {
	return bothOption(func(o *connOptions) {
		o.heartbeatInterval, o.heartbeatTimeout = interval, timeout
	})
}

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

// WithCodec sets the codec a Client encodes calls with (codec.Msgpack by
// default). The server answers in the same codec.
func WithCodec(c codec.Codec) DialOption {
	return dialOption(func(o *dialOptions) { o.codec = c })
}

// WithClientInterceptor adds interceptors that wrap every call a Client
// makes. The first one given is the outermost.
func WithClientInterceptor(ics ...ClientInterceptor) DialOption {
	return dialOption(func(o *dialOptions) { o.interceptors = append(o.interceptors, ics...) })
}

// WithDialTimeout bounds connecting and the protocol handshake
// (DefaultDialTimeout, 5s, if d is 0).
func WithDialTimeout(d time.Duration) DialOption {
	return dialOption(func(o *dialOptions) { o.dialTimeout = d })
}

// WithBackoff sets the wait between failed redials: it starts at min,
// doubles on each failure up to max, and varies by ±20%. While a wait is
// running, calls fail at once with ErrUnavailable rather than queue.
func WithBackoff(min, max time.Duration) DialOption {
	return dialOption(func(o *dialOptions) { o.minBackoff, o.maxBackoff = min, max })
}

// WithContextDialer sets how the Client opens connections; the default
// is a net.Dialer. Use it for custom transports, proxies or tests.
func WithContextDialer(f func(ctx context.Context, network, addr string) (net.Conn, error)) DialOption {
	return dialOption(func(o *dialOptions) { o.dialer = f })
}

// registryOption is WithRegistry, for both sides.
type registryOption struct{ r registry.Registry }

func (o registryOption) applyServer(so *serverOptions) { so.registry = o.r }
func (o registryOption) applyDial(do *dialOptions)     { do.registry = o.r }

// WithRegistry sets the registry for service discovery. A Server
// registers each of its services there, once per listener, as soon as the
// listener serves, and deregisters them first thing on Shutdown, before it
// drains, so that clients stop picking it. A Client made by Dial of a
// service name follows the service's providers there. Without it both use
// DefaultRegistry.
func WithRegistry(r registry.Registry) Option { return registryOption{r} }

// WithBalancer sets how a service client picks a provider for each call
// (balance.RoundRobin by default); see package balance.
func WithBalancer(b balance.Balancer) DialOption {
	return dialOption(func(o *dialOptions) { o.balancer = b })
}

// WithFailFast makes calls of a service client fail at once with
// ErrUnavailable while the registry lists no provider of the service,
// instead of waiting, within their context, for one to register.
func WithFailFast() DialOption {
	return dialOption(func(o *dialOptions) { o.failFast = true })
}

// DefaultProviderWait bounds how long a call of a service client waits for
// a first provider of the service to register (WithProviderWait).
const DefaultProviderWait = 10 * time.Second

// WithProviderWait bounds how long a call of a service client waits, while
// the registry lists no provider of the service, for one to register
// (DefaultProviderWait, 10s, by default): servers and clients may start in
// any order, but a name that nothing registers (a mistyped service, a host
// written without its port, a registry the servers do not use) fails with
// ErrUnavailable, saying so, instead of waiting for as long as the call's
// context lets it. A negative d waits within the context alone.
func WithProviderWait(d time.Duration) DialOption {
	return dialOption(func(o *dialOptions) {
		o.providerWait = d
		if d == 0 {
			o.providerWait = -1 // 0 means the default in fill; a zero wait fails fast
			o.failFast = true
		}
	})
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

// Outlier configures how a service client takes misbehaving providers out
// of balancing, as an outlier detector or circuit breaker does. A
// provider whose calls fail Failures times in a row (it cannot be reached,
// its connection breaks, it fails internally, refuses for overload, or
// leaves a call unanswered past its deadline) is ejected for Ejection; each
// further ejection in a row lasts twice as long, up to MaxEjection. When
// an ejection ends, the provider gets calls again: one success clears its
// record, one more run of failures ejects it for longer. A provider that
// cannot be dialed is out until its redial backoff ends (see WithBackoff),
// and one whose server sent GoAway is out for Ejection. If every provider
// is out, all are used: a provider that may fail is better than none.
type Outlier struct {
	// Failures is the run of failed calls that ejects a provider
	// (default 5).
	Failures int
	// Ejection is how long a first ejection lasts (default 1s).
	Ejection time.Duration
	// MaxEjection bounds the doubling (default 30s).
	MaxEjection time.Duration
	// Disabled turns ejection for failed calls off; providers that
	// cannot be dialed still wait out their backoff.
	Disabled bool
}

// Defaults for Outlier.
const (
	DefaultOutlierFailures    = 5
	DefaultOutlierEjection    = time.Second
	DefaultOutlierMaxEjection = 30 * time.Second
)

func (o *Outlier) fill() {
	if o.Failures <= 0 {
		o.Failures = DefaultOutlierFailures
	}
	if o.Ejection <= 0 {
		o.Ejection = DefaultOutlierEjection
	}
	if o.MaxEjection <= 0 {
		o.MaxEjection = DefaultOutlierMaxEjection
	}
	o.MaxEjection = max(o.MaxEjection, o.Ejection)
}

// WithOutlier sets how a service client ejects misbehaving providers; see
// Outlier. The zero Outlier means the defaults.
func WithOutlier(o Outlier) DialOption {
	return dialOption(func(do *dialOptions) { do.outlier = o })
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

// DefaultMaxPartialFrameBytes is the default of WithMaxPartialFrameBytes.
const DefaultMaxPartialFrameBytes = 256 << 20

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

// DefaultMaxQueuedBytes is the default of WithMaxQueuedBytes.
const DefaultMaxQueuedBytes = 64 << 20

// WithMaxQueuedBytes bounds the reply bytes a Server holds queued for its
// clients to read (DefaultMaxQueuedBytes, 64 MiB). Each connection gets an
// equal share of it, at least 64 KiB and at most 16 MiB. A connection past
// its share stops being read (its client's writes block), and calls it sent
// before that are refused unrun with ErrOverloaded once it is past twice its
// share, as are their replies larger than 1 KiB; a connection that takes no
// byte for the heartbeat timeout is closed. So clients that do not read their replies hold neither memory
// beyond this bound nor the goroutines that serve everyone else.
func WithMaxQueuedBytes(n int) ServerOption {
	return serverOption(func(o *serverOptions) { o.maxQueued = n })
}
