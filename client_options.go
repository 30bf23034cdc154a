package kiev

import (
	"context"
	"crypto/tls"
	"net"
	"time"

	"github.com/kievrpc/kiev/balance"
	"github.com/kievrpc/kiev/codec"
	"github.com/kievrpc/kiev/internal/transport"
	"github.com/kievrpc/kiev/registry"
)

// The options only a Client takes (DialOption), with their settings and
// defaults. Those a Server and a Client both take, and the plumbing of
// all options, are in options.go; those only a Server takes, in
// server_options.go.

// dialOptions are a Client's settings.
type dialOptions struct {
	connOptions
	codec          codec.Codec
	interceptors   []ClientInterceptor
	streamChain    []StreamInterceptor
	dialTimeout    time.Duration
	minBackoff     time.Duration
	maxBackoff     time.Duration
	dialer         func(ctx context.Context, network, addr string) (net.Conn, error)
	retry          RetryPolicy
	throttle       Throttle
	registry       registry.Registry
	balancer       balance.Balancer
	failFast       bool
	providerWait   time.Duration // < 0: no bound but the call's context
	outlier        Outlier
	packet         Packet
	packetKey      *transport.PacketKey // WithPacketKey
	tls            *tls.Config
	healthInterval time.Duration // WithHealthCheck
	hedging        *Hedging      // WithHedging
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

// DefaultProviderWait bounds how long a call of a service client waits for
// a first provider of the service to register (WithProviderWait).
const DefaultProviderWait = 10 * time.Second

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

// WithStreamInterceptor adds interceptors that wrap the opening of
// every stream a Client opens (Client.Stream), and may observe its
// messages and end (see StreamDesc). The first one given is the
// outermost. A Client's ClientInterceptors do not see streams.
func WithStreamInterceptor(ics ...StreamInterceptor) DialOption {
	return dialOption(func(o *dialOptions) { o.streamChain = append(o.streamChain, ics...) })
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

// WithOutlier sets how a service client ejects misbehaving providers; see
// Outlier. The zero Outlier means the defaults.
func WithOutlier(o Outlier) DialOption {
	return dialOption(func(do *dialOptions) { do.outlier = o })
}

// WithRetry sets the client's RetryPolicy; the zero RetryPolicy means the
// defaults. Retries are on by default.
func WithRetry(p RetryPolicy) DialOption {
	return dialOption(func(o *dialOptions) { o.retry = p })
}

// WithThrottle sets the client's adaptive throttling; see Throttle. It is
// on by default.
func WithThrottle(t Throttle) DialOption {
	return dialOption(func(o *dialOptions) { o.throttle = t })
}

// WithPacketKey makes a Client sign the requests and cancels it sends
// over UDP with key, under id, for a server with WithPacketKeys to check.
// A key is a shared secret of at least 16 bytes.
func WithPacketKey(id string, key []byte) DialOption {
	return dialOption(func(o *dialOptions) { o.packetKey = &transport.PacketKey{ID: id, Key: key} })
}

// WithToken makes a Client send token as the AuthorizationKey metadata of
// every call and stream, for a server's TokenAuth to check.
//
// Over UDP the token is in clear in every request datagram: anyone who
// sees one has the token and can replay the request. Sign the datagrams
// with WithPacketKey, which the server checks with WithPacketKeys; a
// server with TokenAuth serves UDP without them only if
// WithoutPacketKeysForTokenAuth opts in. Over TCP, use WithTLS.
func WithToken(token string) DialOption {
	return dialOption(func(o *dialOptions) {
		o.interceptors = append(o.interceptors, func(next Invoker) Invoker {
			return func(ctx context.Context, call *Call) error {
				return next(WithMetadata(ctx, AuthorizationKey, token), call)
			}
		})
		o.streamChain = append(o.streamChain, func(next StreamOpener) StreamOpener {
			return func(ctx context.Context, desc *StreamDesc) (*Stream, error) {
				return next(WithMetadata(ctx, AuthorizationKey, token), desc)
			}
		})
	})
}

// WithHealthCheck makes a Client over a registry ask each provider's
// health service every interval (kiev.Health.Check, at MaxPriority) and
// keep those that answer health.NotServing out of balancing until they
// serve again; if none serves, all are used, as a provider that may fail
// is better than none. A provider too old to have the health service, or
// one that cannot be reached, is left to the client's outlier ejection.
// The default, 0, checks nothing: a draining provider's GoAway already
// takes it out of balancing.
func WithHealthCheck(interval time.Duration) DialOption {
	return dialOption(func(o *dialOptions) { o.healthInterval = interval })
}
