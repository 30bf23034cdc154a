package kiev

import (
	"crypto/tls"
	"fmt"
	"log/slog"
	"slices"
	"time"

	"github.com/kievrpc/kiev/registry"
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
	streamBudget      int             // WithStreamBudget
}

func (o *connOptions) fill() {
	if o.logger == nil {
		o.logger = defaultLogger()
	}
	if o.maxFrame <= 0 {
		o.maxFrame = DefaultMaxFrameSize
	}
	if o.streamBudget <= 0 {
		o.streamBudget = DefaultStreamBudget
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

// WithTLS runs connections over TLS (crypto/tls) with cfg. On a Server,
// cfg needs a certificate; set ClientAuth to tls.RequireAndVerifyClientCert
// and ClientCAs for mutual TLS, and handlers see the client's verified
// certificate through PeerCertificates. On a Client, cfg names the CAs to
// trust (RootCAs) and, for mutual TLS, the client's certificate;
// ServerName defaults to the host dialed. The handshake is bounded by the
// dial timeout on clients and the heartbeat timeout on servers; a
// connection that fails it is closed and logged, and no call on it runs.
// TLS applies to TCP and Unix listeners; UDP and the HTTP front use their
// own transports.
//
// A server whose cfg requires client certificates (ClientAuth
// tls.RequireAndVerifyClientCert or tls.RequireAnyClientCert) holds every
// entry point to it: HTTPHandler answers a request that came without a
// verified client certificate (an http.Server with the same ClientAuth
// gives it one) 401 Unauthenticated, and ServePacket and ServeFastCGI,
// which cannot see a certificate, refuse to start, unless
// WithoutClientCertsOutsideTLS opts them in.
func WithTLS(cfg *tls.Config) Option { return tlsOption{cfg} }

// WithPacket configures RPC over UDP; see Packet.
func WithPacket(p Packet) Option { return packetOption(p) }

// WithCompression lists the algorithms a side accepts and uses to
// compress call bodies, preferred first; without it (the default), a side
// compresses nothing and accepts no compressed body. A body is compressed
// only when both sides enable compression: a client compresses its
// Requests with the first of its algorithms the server lists, and the
// server its replies with the first of its own that the client lists,
// each only for bodies of WithCompressionThreshold bytes or more, and only
// when compressing makes the frame smaller. A server's list is an allow
// list: it refuses a Request compressed with another algorithm, and no
// kiev client sends one. Peers that do not know compression (kiev before
// it, or another implementation) simply get no compressed body.
//
// Compression costs CPU on both sides, for every call it applies to; on a
// fast network it slows calls down, so it is off unless enabled. It pays
// where bandwidth is scarce or billed: docs/compression.md gives figures.
// It applies over TCP and Unix sockets (and TLS), not to UDP datagrams
// (Server.ServePacket), which are too small to gain, nor to HTTP, which has
// Content-Encoding. It panics on an algorithm kiev does not know.
func WithCompression(algorithms ...Compression) Option {
	var list []Compression
	for _, c := range algorithms {
		switch {
		case c == NoCompression || slices.Contains(list, c):
		case !c.known():
			panic(fmt.Sprintf("kiev: WithCompression: unknown algorithm %v; use kiev.Zstd or kiev.S2", c))
		default:
			list = append(list, c)
		}
	}
	return bothOption(func(o *connOptions) { o.compress.algs = list })
}

// WithCompressionThreshold sets the smallest body, in bytes, that a side
// with WithCompression compresses (DefaultCompressionThreshold, 1 KiB, if
// n is 0). Smaller bodies gain too little to pay for the CPU time.
func WithCompressionThreshold(n int) Option {
	return bothOption(func(o *connOptions) { o.compress.threshold = n })
}
