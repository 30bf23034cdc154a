/*
Package kiev is a code-first RPC framework: services are plain Go structs
whose exported methods are found by reflection, as in net/rpc, and every
client talks to a server over one full-duplex, multiplexed connection.

# Services

A service is any exported type with methods of one of these shapes:

	func (t *T) Method(ctx context.Context, args A, reply *R) error
	func (t *T) Method(args A, reply *R) error // net/rpc's shape

T, A and R must be exported (or builtin) types, and reply must be a
pointer. Methods of other shapes are skipped; registering a type with no
callable method fails with an error that names each method and what is
wrong with it. A net/rpc service moves to kiev by changing its import.

	type Arith struct{}

	type Args struct{ A, B int }

	func (t *Arith) Mul(ctx context.Context, args Args, reply *int) error {
		*reply = args.A * args.B
		return nil
	}

	srv := kiev.NewServer()
	if err := srv.Register(&Arith{}); err != nil {
		log.Fatal(err)
	}
	go srv.ListenAndServe("tcp", "127.0.0.1:7000")

The handler's ctx carries the caller's deadline and is canceled when the
caller gives up, the connection dies, or the server closes. Its metadata
is read with MetadataFrom. A handler that panics sends the caller an
ErrInternal error; the server keeps running.

# Clients

	c, err := kiev.Dial("127.0.0.1:7000")
	if err != nil {
		log.Fatal(err)
	}
	defer c.Close()

	var product int
	err = c.Call(ctx, "Arith.Mul", Args{7, 8}, &product)

Call blocks until the reply comes or ctx ends; Go starts a call and
delivers it on a channel, as in net/rpc. Any number of goroutines share a
Client: their calls travel on one connection, each with its own id, and
replies come back in whatever order the handlers finish, so a slow call
holds up no other.

Errors a handler returns arrive as *ServerError with the handler's text.
Framework failures match with errors.Is: ErrNotFound (no such service or
method; the message lists those there are and suggests the close match),
ErrShutdown (the connection or server is going away; a closed client's
calls return ErrShutdown itself, so err == ErrShutdown holds as in
net/rpc), ErrUnavailable (cannot connect, or no provider registered
within WithProviderWait), ErrOverloaded (shed by the server), ErrLimited
(refused at a method's adaptive limit; also ErrOverloaded),
ErrUnauthenticated, ErrTooLarge, ErrBadRequest, ErrInternal,
ErrAnswered (over UDP: the call ran, but its reply was lost and is no
longer kept), context.DeadlineExceeded and context.Canceled. A reply that is not a
pointer is refused before the call is sent.

# Streams

A method that takes a kiev.In[M] or a kiev.Out[M] is a stream: many
messages on one multiplexed connection, beside its calls.

	func (f *Feed) Watch(ctx context.Context, q Query, out kiev.Out[Event]) error       // server stream
	func (f *Feed) Upload(ctx context.Context, in kiev.In[Chunk], sum *Sum) error      // client stream
	func (f *Feed) Chat(ctx context.Context, in kiev.In[Msg], out kiev.Out[Msg]) error // bidirectional

Out.Send queues a whole message or none, waiting within its ctx for the
client's credit; In.Recv returns io.EOF once the client has finished
sending, and In.All ranges over the messages. Returning from the handler
ends the stream with its status, after the messages sent before, as a
call ends; Out.Close ends the sending side earlier, while the handler
reads on. The client opens a stream with Client.Stream:

	s, err := c.Stream(ctx, "Feed.Watch", Query{From: 1})
	if err != nil {
		return err
	}
	defer s.Close()
	for {
		var e Event
		if err := s.Recv(ctx, &e); err == io.EOF {
			break
		} else if err != nil {
			return err
		}
	}

args is nil for client and bidirectional streams, which Send and then
CloseSend; a client stream's reply is its one message. ServerStreamOf,
ClientStreamOf and BidiStreamOf build typed openers from a method
expression, as MethodOf does for calls. A stream is freed
when Recv returns an error (io.EOF at its end), when its ctx ends, or on
Close, which never blocks. A stream opened to a server from before
streams fails with ErrStreamsUnsupported; one whose connection is lost
fails with a *StreamError that says how many of the messages sent the
peer's application took, so that a sender can resume.

Each stream is flow-controlled on its own: a consumer that stops reading
stops only its own stream, and what a connection's streams hold is
bounded by WithStreamBudget. Opening a stream passes the server's
overload scheduler as a call does; once open, it holds no worker. See
docs/streams.md.

# Typed calls

A Method[A, R] calls one method with its own types: its Call takes an A
and returns an R, so a call with the wrong types does not compile.
MethodOf builds one from a method expression, and the compiler checks A
and R against the method's signature; the name comes from the method:

	mul, err := kiev.MethodOf(c, (*Arith).Mul) // a *Method[Args, int]
	product, err := mul.Call(ctx, Args{7, 8})

NetRPCMethodOf does the same for net/rpc's method shape, and
WithServiceName names a service registered under another name, or one
known to the client by an interface it implements. NewMethod builds one
from a "Service.Method" name: it asks the server for the method's
description and refuses, with an error naming both sides' types, types
that do not fit it. A Method's calls are Client.Calls, with the same
interceptors, metadata, priority, deadline and errors, and no allocation
more; Method.Go is Client.Go, typed.

# Moving from net/rpc

Services move unchanged, and a client adds a ctx to Call and Go and
writes Dial's one target ("host:port"). kiev keeps net/rpc's Register,
RegisterName, Accept, ServeConn, ServeCodec, ServeRequest, HandleHTTP,
NewClient, NewClientWithCodec, DialHTTP and DialHTTPPath; dotted service
names split at the last dot, and a half-closed connection still gets the
replies of its calls in flight. The wire is kiev's own protocol and the
default codec msgpack, not gob, so kiev and net/rpc peers talk only
through a codec both have: ServeCodec and NewClientWithCodec take
net/rpc's ServerCodec and ClientCodec, such as net/rpc/jsonrpc's. The
docs/netrpc.md ("Moving from net/rpc") lists every difference and why.

# Codecs

Calls are encoded with codec.Msgpack unless the client picks another with
WithCodec, such as codec.Protobuf for generated protobuf messages. Each
request names its codec, and the server answers in it, so one server
serves clients of every codec at once.

# Connections

A Client redials with backoff when its connection breaks; calls made
while the server is unreachable fail at once with ErrUnavailable rather
than wait. Heartbeats find a dead peer on an idle connection (see
WithHeartbeat), and every call pending on a broken connection fails at
once with ErrShutdown.

Server.Shutdown drains: it stops accepting, tells clients to send no new
calls (those fail fast with ErrShutdown), and ends each connection once
its calls have replied, with a last GoAway that names the last request it
read, so that a client retries elsewhere the calls it sent meanwhile.
Server.Close stops at once. Either way Serve returns ErrServerClosed.

Peers choose no allocation: a frame in progress holds only the bytes that
have arrived, all such frames at most WithMaxPartialFrameBytes in all, and
any byte read proves the peer alive, so a large frame on a slow link keeps
its connection. A Request that reuses the id of a call in flight closes
its connection. Warnings a peer can cause again and again are logged at
most LogBurst times a second each.

A client that does not read its replies cannot hold a server: the
server keeps at most WithMaxQueuedBytes of unread replies in all, shared
equally by its connections; past its share a connection is no longer read
and its queued calls are refused unrun, and a peer that takes no byte for
the heartbeat timeout is cut.

# Compression

Call bodies (args and replies as the codec encoded them) may travel
compressed over TCP, Unix sockets and TLS. WithCompression on both sides
lists the algorithms each accepts and uses, Zstd and S2, preferred first;
the sides agree per connection, so a peer without it, or a kiev from
before it, gets every body as it is. A side compresses bodies of
WithCompressionThreshold bytes or more (1 KiB by default) with its first
choice among the other's algorithms; a server's list is an allow list.
WithCallCompression sets the compression of a context's calls, both ways,
whatever their size, or turns it off. Compression is off by default: on a
fast network it costs more CPU than the bytes it saves (docs/compression.md has
figures). A compressed body announces its length: a receiver refuses one
past WithMaxFrameSize before allocating, and stops decoding one byte past
the length, so that a decompression bomb costs no more than a frame; such
a body fails its call (ErrTooLarge, ErrBadRequest), not the connection.
Datagrams are never compressed, and HTTP has Content-Encoding.

# Discovery and balancing

Dial a service by name, and the Client follows its providers in a
registry (package registry) and balances calls over them, one multiplexed
connection each:

	// On each server:
	srv := kiev.NewServer(kiev.WithRegistry(reg))
	srv.Register(&Arith{})
	go srv.ListenAndServe("tcp", ":7000") // registers Arith once listening

	// On each client:
	c, err := kiev.Dial("Arith", kiev.WithRegistry(reg))

reg is a registry/zookeeper Registry shared by many processes, or
registry/memory within one. Without WithRegistry both sides use
DefaultRegistry, in memory unless SetDefaultRegistry says otherwise, so
kiev.Dial("Arith") finds a service served in the same process with
nothing to configure; kiev.Dial("zookeeper://10.0.0.1:2181/Arith")
needs no code at all. A Server registers each service once per listener,
with an address others can reach (see WithAdvertise), and on Shutdown
deregisters before it drains.

Services may start in any order: Dial of a name returns at once, and a
call waits within its ctx for a provider to register, for at most
WithProviderWait (10s by default), then fails with ErrUnavailable naming
the registry it looked in (WithFailFast makes it fail at once instead). Round robin is the default balancer;
WithBalancer picks another from package balance, such as consistent
hashing on a key set per call with WithHashKey. A call that was never
sent, or that a provider refused (ErrOverloaded, ErrShutdown), is retried
on another provider within the retry budget; a call whose outcome is
unknown is retried only for methods RetryPolicy.Idempotent names.
Providers whose calls keep failing, that cannot be dialed, or whose
heartbeats stop, leave balancing for a while and are then tried again.
When the registry lists no provider at all, as when ZooKeeper loses the
servers' sessions, the client keeps calling those it is still connected to.
Client.Providers shows what the client sees.

# DNS

Where discovery is DNS, as with a Kubernetes headless service or Consul's
DNS interface, dial the name (package registry/dns does the lookups):

	c, err := kiev.Dial("dns:///feed.prod.svc.cluster.local:7000")

Every A and AAAA record of the name is a provider, at the port given,
balanced, ejected and drained as a registry's providers are.
"dns:///_kiev._tcp.feed.prod.svc.cluster.local" reads SRV records instead:
each record's port and weight, and only the lowest priority whose targets
resolve. An authority names the DNS server to ask
("dns://10.0.0.10:53/feed.prod.svc.cluster.local:7000"); without one, the
system's resolver answers. A "host:port" target whose host is a name, not
an IP address, is the same as "dns:///host:port": Dial("feed.internal:7000")
calls every address the name resolves to, each over a connection of its
own, and returns at once, as for a service name; write
"tcp://host:port" for one connection to the first address that answers.

The client resolves the name again every 30 s ("?interval=5s" sets
another; Go's resolver does not report the records' TTL, so match it to
the TTL your DNS server gives) and at once, at most once a second, when it
loses a provider's connection. New addresses join balancing; gone ones
finish their calls in flight and close. A lookup that fails (a timeout,
SERVFAIL) keeps the providers last found, and says so in the log and in
Client.Discovery and the status page. A name that has never resolved
fails calls with ErrUnavailable naming the name and the lookup's error,
after WithProviderWait; one that resolved once and now has no record has
no provider, and the client calls those still connected until their
connections end.

# Hedged calls

WithHedging cuts the tail that one slow provider adds: when a call has had
no answer for a delay, a copy goes to another provider, the first answer
wins and the other copies are canceled (their handlers see ctx canceled):

	c, err := kiev.Dial("feed.internal:7000",
		kiev.WithRetry(kiev.RetryPolicy{Idempotent: kiev.IdempotentMethods("Feed.Get")}),
		kiev.WithHedging(kiev.Hedging{})) // adaptive: the method's recent p95

Only methods marked safe to repeat (RetryPolicy.Idempotent) are hedged: a
hedged call may run on two providers. Given to MethodOf, WithHedging hedges
that one method. Hedges draw on the retry budget, at most Hedging.Ratio
(5%) of a method's calls are hedged, and none is sent for a
throttle window after any provider answers ErrOverloaded or ErrLimited, so
under overload hedging adds no load. Client.HedgeStats, the status page
and the kiev_client_hedges_total metric count the hedges sent, won, and
held back. See Hedging, and docs/hedging.md for measurements.

# UDP

Server.ServePacket serves the same services over UDP, one datagram each
way (ListenAndServe("udp", addr) opens the socket), and Dial of
"udp://host:port" calls them from one socket that carries any number of
concurrent calls. It suits small, latency-critical calls that should not
pay for a connection. The client retransmits after a timeout adapted to
the measured round trips, until the call's deadline; the server runs
each call at most once, answering retransmissions from its memory of
recent calls. A request larger than one datagram (Packet.MaxDatagram,
1200 bytes by default) fails with ErrTooLarge before it is sent, and a
reply too large is answered with ErrTooLarge. Configure both sides with
WithPacket. So that a spoofed datagram cannot make the server flood a
victim, an address that has not shown it receives gets at most
Packet.MaxAmplification times its request's bytes (the client resends with
the ticket the server sent, by itself), kiev.Reflection is not served over
UDP unless Packet.ServeReflection, and a cached reply goes out at most
MaxReplyResends times more. WithPacketKey and WithPacketKeys sign UDP
calls with a shared key, so that no datagram can be replayed.

# HTTP and FastCGI

Server.HTTPHandler serves the same services as JSON over HTTP: POST
/Service.Method with the args as a JSON body, answered with the reply as
JSON, through the same scheduler, interceptors, metrics and logs as a TCP
call. Kiev-Priority, Kiev-Timeout and Kiev-Meta-* headers carry priority,
deadline and metadata (and the W3C traceparent and tracestate headers
become metadata of those names); errors map to HTTP statuses (404, 405,
415 for a body not sent as application/json, 400 naming the field, 401,
413, 503 with Retry-After, 504, 500) with a JSON body.
Server.ServeFastCGI serves the handler as a FastCGI responder, for nginx's
fastcgi_pass; WithFastCGILimits bounds its connections (256 at once, 10s
for each record to arrive, 5 minutes idle by default). codec.JSON is also
a codec any client may choose.

# Overload protection

Every call passes the server's overload scheduler (package shed) before
its handler runs. Its limits follow what is congested. The pool of
workers is elastic: it grows while handlers wait on databases and other
services and the CPU keeps up, and stops growing when the calls running
want the CPU (set shed.Options.Workers for a fixed cap instead). Each
method has an adaptive concurrency limit: when its service time rises
well above its floor (its dependency is slow), its calls past the limit
wait in a queue of the method's own, those that cannot start in time are
refused at once with ErrLimited (which is also ErrOverloaded), and other
methods go on unhindered; a client throttles such a method alone.
Before the limit has learnt anything, a method is bounded from its first
call (a slow start that doubles each round trip, under a ceiling from
the calls that recently ended), and a surge (calls arriving faster than
they end) starts the limit at once. A handler can acquire its
dependency's pool as a shed.Resource: the most important calls get a
connection first, and none that could not finish by its deadline gets
one.
shed.Options.MaxInFlight is a hard ceiling on calls running at once. Each
connection gets a fair share of a binding limit, so one client flooding
cannot crowd out the others, and WithPriorityPolicy decides what priority
a caller may claim. What cannot start waits in a queue with 10
priorities; a call predicted to start too late is refused on arrival.
When the queue is full, a new call takes the place of a less important
one, and both the evicted call and a call with nothing less important to
evict are answered ErrOverloaded at once. Calls whose caller's deadline
has passed or is nearer than the method's usual run time are answered
without running.
Under sustained overload the queue shrinks to about a millisecond of work,
each priority gets a share of it, and a call that will not start in time
is refused on arrival rather than after a wait: a queued call is refused
within a quarter of a millisecond or not at all. Configure it with
WithShed.

A call's priority, 0 (shed first) to 9 (shed last), is set with
WithPriority and read in a handler with PriorityFrom; DefaultPriority
applies when none is set. A handler's ctx carries its call's priority and
deadline, so the calls it makes inherit both and a whole chain sheds
consistently.

Clients make storms smaller, not bigger. A Client retries only calls that
surely did not run (see RetryPolicy), and only within a budget of about
10% extra load that every ErrOverloaded answer shrinks. When a server
keeps refusing, the client refuses a share of new calls itself, at once
(see Throttle).

# Logging and monitoring

Servers and clients log through log/slog: WithLogger sets the logger;
without it they log to standard error at Info level, in colour on a
terminal and as JSON lines otherwise. kiev never logs an error it also
returns. Logger(ctx) in a handler returns the server's logger with the
call's attributes (method, peer, request id, priority, trace id from the
TraceIDKey metadata, and what interceptors add with WithLogAttrs), and
NewContextHandler adds them to any logger's records made with the
handler's ctx. WithAccessLog logs every call;
WithSlowLog logs calls over a threshold.

Every Server keeps Prometheus metrics of its calls (count by method and
code, latency histograms), its scheduler (queue by priority, drops by
reason) and connections, and of the process's Clients (calls by target,
by provider, retries by reason, retry budget, calls pending as
connections ended, unsent apart from failed, ejected providers).
Server.AdminHandler serves them at /metrics, a status page at
/debug/kiev (and at its root, /), rendered on the server and refreshed
by its script, and its JSON twin (package admin's Status) at
/debug/kiev?format=json; WithAdmin
serves them on an address of their own, and WithMetrics registers the
metrics with a registry of yours. The page shows each method's rates
over the last minute (or the time since start, if shorter) and its p50
and p99 latency, interpolated within buckets an eighth of a doubling
wide, and charts of the last 15 minutes drawn on the server (package
admin's History, a sample every 5 seconds). RegisterHealth adds dependency checks that the page
shows, and OnShutdown closes dependencies once the calls in flight have
ended.

Every Server also serves kiev.Health (package health), after gRPC's
grpc.health.v1, over TCP, UDP and HTTP: Check answers health.Serving or
health.NotServing for the server or one of its services, and Watch
waits for a change. A server serves while it is not shutting down, its RegisterHealth
checks pass, and SetHealth has not said otherwise. The admin server
answers Kubernetes' probes at /healthz and /readyz; WithHealthCheck keeps
providers that do not serve out of a client's balancing; `kiev health`
asks from the shell.

Every Server also serves kiev.Reflection (package reflection), which lists
its services and describes each method's argument and reply types; the
kiev command (cmd/kiev) uses it: `kiev describe host:port`, `kiev call
host:port Arith.Mul '{"A":7,"B":8}'`, `kiev list zookeeper://host:2181`.
And every Server serves kiev.Admin (package admin), whose Status answers
with what the status page shows, so that `kiev stat` works on the
address clients dial as well as on the WithAdmin address; WithAdminAuth
makes it refuse, as the pages then want credentials.

# Metadata and interceptors

WithTLS runs connections over TLS, mutual if the server's tls.Config asks
for client certificates (PeerCertificates reads the caller's); a server
that requires them holds every entry point (see WithTLS). TokenAuth
checks a token in each call's metadata (sent by WithToken) before the
arguments are decoded; interceptors see calls of unknown methods too, so a
caller without credentials cannot probe names. Over UDP a token travels
in clear, so ServePacket refuses a server with TokenAuth unless
WithPacketKeys makes clients sign their datagrams (WithPacketKey) or
WithoutPacketKeysForTokenAuth opts in. WithAdminAuth guards the
admin pages.

WithMetadata attaches string pairs (trace ids, auth tokens) to the calls
made with a context; handlers read them with MetadataFrom. Server and
client interceptors wrap each call in the style of net/http middleware;
see ServerInterceptor and ClientInterceptor.

The wire format is specified in PROTOCOL.md in the repository.

# Layers

This package is the API, and the plumbing that is the same for every
protocol; internal/transport owns the wire. Calls go one way: this
package calls the transport, and the transport calls back only through
the small interfaces this package hands it when it builds it.

On a server, each front of the transport (TCP connections, UDP sockets,
HTTP and FastCGI) reads a Request, parses it, refuses it if the server
drains or the caller is at WithMaxConcurrentCalls, decompresses its args,
and only then calls up, once, to open the call (transport.ServerHandler,
call.go), which this package makes in one way for every front; the
transport then runs it on its reader or submits it to the scheduler,
its choice. The call's answer goes down through the front's
transport.Sink as a value and a codec, or an error code: the transport
frames it and compresses it. On a client, this package fills in a
transport.Request for each call and the transport frames it, compresses
it or signs its datagram; the transport hands each Response back parsed
(transport.Response), and this package decodes it into the call. Codes
are one type in every layer (Code, which internal/codes defines), and
the errors the transport returns that callers match (ErrShutdown,
ErrServerClosed, ErrTooLarge, ErrBadRequest) are the transport's values.
This package does not import internal/wire, which frames the bytes; a
test fails if it does. The net/rpc codec front (ServeCodec) stays here,
as an adapter between two APIs. docs/layers.md ("Where the code lives")
names every layer's files.

What is not the RPC API lives in packages of its own, which this package
imports and wires into every Server and which do not import it: the
admin pages and the status shapes (package admin), the health service
and checks (package health), the reflection service and the type shapes
(package reflection), the Prometheus collectors (internal/metrics) and
the call counters behind them and the status page (internal/callstats).
Each reads the Server through a small interface or a snapshot it is
given.
*/
package kiev
