package kiev_test

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"errors"
	"io"
	"log/slog"
	"math/big"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"runtime"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/kievrpc/kiev"
	"github.com/kievrpc/kiev/internal/zktest"
)

// testCA is a certificate authority for tests.
type testCA struct {
	cert *x509.Certificate
	key  *ecdsa.PrivateKey
	pool *x509.CertPool
}

var serial atomic.Int64

func newCA(t *testing.T, name string) *testCA {
	t.Helper()
	key, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(serial.Add(1)), Subject: pkix.Name{CommonName: name},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour),
		IsCA: true, BasicConstraintsValid: true, KeyUsage: x509.KeyUsageCertSign,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	cert, _ := x509.ParseCertificate(der)
	pool := x509.NewCertPool()
	pool.AddCert(cert)
	return &testCA{cert, key, pool}
}

// issue makes a certificate for name, for a server (with 127.0.0.1) or a
// client.
func (ca *testCA) issue(t *testing.T, name string, server bool) tls.Certificate {
	t.Helper()
	key, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(serial.Add(1)), Subject: pkix.Name{CommonName: name},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour),
		KeyUsage: x509.KeyUsageDigitalSignature, ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth},
	}
	if server {
		tmpl.ExtKeyUsage = []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}
		tmpl.IPAddresses = []net.IP{net.IPv4(127, 0, 0, 1)}
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca.cert, &key.PublicKey, ca.key)
	if err != nil {
		t.Fatal(err)
	}
	return tls.Certificate{Certificate: [][]byte{der}, PrivateKey: key}
}

// Secure answers with the common name of the caller's certificate.
type Secure struct{ runs atomic.Int64 }

func (s *Secure) Whoami(ctx context.Context, _ int, reply *string) error {
	s.runs.Add(1)
	if certs := kiev.PeerCertificates(ctx); len(certs) > 0 {
		*reply = certs[0].Subject.CommonName
	}
	return nil
}

func TestMutualTLS(t *testing.T) {
	ca, other := newCA(t, "kiev test CA"), newCA(t, "another CA")
	log := &records{}
	svc := &Secure{}
	srv := kiev.NewServer(kiev.WithLogger(slog.New(log)), kiev.WithTLS(&tls.Config{
		Certificates: []tls.Certificate{ca.issue(t, "server", true)},
		ClientAuth:   tls.RequireAndVerifyClientCert,
		ClientCAs:    ca.pool,
	}))
	srv.Register(svc)
	addr := startServer(t, srv)

	c := dial(t, addr, kiev.WithTLS(&tls.Config{RootCAs: ca.pool, Certificates: []tls.Certificate{ca.issue(t, "billing-service", false)}}))
	var who string
	if err := c.Call(context.Background(), "Secure.Whoami", 0, &who); err != nil || who != "billing-service" {
		t.Fatalf("Whoami over mutual TLS = %q, %v; want the client certificate's name", who, err)
	}

	for _, tc := range []struct {
		name string
		cfg  *tls.Config
	}{
		{"no client certificate", &tls.Config{RootCAs: ca.pool}},
		{"client certificate from another CA", &tls.Config{RootCAs: ca.pool, Certificates: []tls.Certificate{other.issue(t, "intruder", false)}}},
		{"server not trusted", &tls.Config{RootCAs: other.pool, Certificates: []tls.Certificate{ca.issue(t, "billing-service", false)}}},
		{"no TLS", nil},
	} {
		var opts []kiev.DialOption
		if tc.cfg != nil {
			opts = append(opts, kiev.WithTLS(tc.cfg))
		}
		opts = append(opts, kiev.WithDialTimeout(2*time.Second))
		bad, err := kiev.Dial(addr, opts...)
		if err == nil {
			err = bad.Call(context.Background(), "Secure.Whoami", 0, &who)
			bad.Close()
		}
		if err == nil {
			t.Errorf("%s: the call went through", tc.name)
		}
	}
	if n := svc.runs.Load(); n != 1 {
		t.Errorf("the handler ran %d times; want once, for the trusted client only", n)
	}
	deadline := time.Now().Add(5 * time.Second)
	for {
		if _, _, ok := log.find("kiev: TLS handshake failed; closing connection"); ok {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("refused TLS handshakes were not logged")
		}
		time.Sleep(5 * time.Millisecond) // the server logs on its connection goroutine
	}
}

func TestTokenAuth(t *testing.T) {
	log := &records{}
	svc := &Secure{}
	srv := kiev.NewServer(kiev.WithLogger(slog.New(log)), kiev.WithServerInterceptor(kiev.TokenAuth(func(ctx context.Context, token string) error {
		if token != "s3cret" {
			return errors.New("unknown token")
		}
		return nil
	})))
	srv.Register(svc)
	addr := startServer(t, srv)

	good := dial(t, addr, kiev.WithToken("s3cret"))
	if err := good.Call(context.Background(), "Secure.Whoami", 0, new(string)); err != nil {
		t.Fatalf("call with the right token: %v", err)
	}
	for _, opts := range [][]kiev.DialOption{{kiev.WithToken("guess")}, nil} {
		c := dial(t, addr, opts...)
		err := c.Call(context.Background(), "Secure.Whoami", 0, new(string))
		if !errors.Is(err, kiev.ErrUnauthenticated) {
			t.Errorf("call with a wrong or no token = %v; want ErrUnauthenticated", err)
		}
	}
	if n := svc.runs.Load(); n != 1 {
		t.Errorf("the handler ran %d times; want once", n)
	}
	attrs, level, ok := log.find("kiev: call refused: authentication failed")
	if !ok || level != slog.LevelWarn || attrs["method"] != "Secure.Whoami" {
		t.Errorf("refusal log: %v %v %v", attrs, level, ok)
	}
	for _, v := range attrs {
		if strings.Contains(v, "guess") || strings.Contains(v, "s3cret") {
			t.Errorf("the log shows a token: %v", attrs)
		}
	}
}

func TestMaxConnections(t *testing.T) {
	log := &records{}
	srv := kiev.NewServer(kiev.WithLogger(slog.New(log)), kiev.WithMaxConnections(2))
	srv.Register(&Arith{})
	addr := startServer(t, srv)
	c1, c2 := dial(t, addr), dial(t, addr)
	if _, err := kiev.Dial(addr, kiev.WithDialTimeout(2*time.Second)); err == nil {
		t.Fatal("a third connection was served past WithMaxConnections(2)")
	}
	if _, _, ok := log.find("kiev: connection refused: the server is at its connection limit (WithMaxConnections)"); !ok {
		t.Error("the refused connection was not logged")
	}
	var r Reply
	if err := c1.Call(context.Background(), "Arith.Add", Args{1, 2}, &r); err != nil || r.C != 3 {
		t.Fatalf("a connection within the limit: %v, %v", r.C, err)
	}
	c2.Close()
	// Once one is gone a new one is served; the server notices the close
	// on its own goroutine, so the first attempts may still be refused.
	deadline := time.Now().Add(5 * time.Second)
	for {
		c3, err := kiev.Dial(addr, kiev.WithDialTimeout(2*time.Second))
		if err == nil {
			c3.Close()
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("no connection served after one closed: %v", err)
		}
		time.Sleep(10 * time.Millisecond) // waiting on the server's bookkeeping
	}
}

func TestMaxConcurrentCalls(t *testing.T) {
	svc := &Arith{block: make(chan struct{}), started: make(chan struct{}, 2)}
	srv := kiev.NewServer(kiev.WithMaxConcurrentCalls(2))
	srv.Register(svc)
	c := dial(t, startServer(t, srv), kiev.WithRetry(kiev.RetryPolicy{MaxAttempts: 1}))
	done := make(chan error, 2)
	for range 2 {
		go func() { done <- c.Call(context.Background(), "Arith.Block", Args{}, &Reply{}) }()
	}
	<-svc.started
	<-svc.started
	err := c.Call(context.Background(), "Arith.Add", Args{1, 1}, &Reply{})
	if !errors.Is(err, kiev.ErrOverloaded) || !strings.Contains(err.Error(), "WithMaxConcurrentCalls") {
		t.Fatalf("third call on the connection = %v; want ErrOverloaded naming the limit", err)
	}
	close(svc.block)
	for range 2 {
		if err := <-done; err != nil {
			t.Fatal(err)
		}
	}
	if err := c.Call(context.Background(), "Arith.Add", Args{1, 1}, &Reply{}); err != nil {
		t.Fatalf("after the calls in flight ended: %v", err)
	}
}

func TestSlowlorisIsCut(t *testing.T) {
	srv := kiev.NewServer(kiev.WithHeartbeat(100*time.Millisecond, 400*time.Millisecond))
	srv.Register(&Arith{})
	addr := startServer(t, srv)
	nc, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	// The preface, then half a frame header, then nothing.
	if _, err := nc.Write([]byte("KIEV\x01\x00\x00\x00\x20\x01\x00")); err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	nc.SetReadDeadline(time.Now().Add(10 * time.Second))
	buf := make([]byte, 64)
	for {
		if _, err := nc.Read(buf); err != nil {
			if ne, ok := err.(net.Error); ok && ne.Timeout() {
				t.Fatal("the server kept a connection that sent half a frame and stalled for 10s")
			}
			break // closed by the server
		}
	}
	if took := time.Since(start); took > 2*time.Second {
		t.Errorf("a stalled half frame was cut after %v; want about the heartbeat timeout (400ms)", took)
	}
	// Others are served meanwhile and after.
	var r Reply
	if err := dial(t, addr).Call(context.Background(), "Arith.Add", Args{2, 3}, &r); err != nil || r.C != 5 {
		t.Fatalf("call after the slowloris: %v, %v", r.C, err)
	}
}

// openFDs counts the process's open file descriptors.
func openFDs(t *testing.T) int {
	t.Helper()
	entries, err := os.ReadDir("/proc/self/fd")
	if err != nil {
		t.Skipf("cannot count file descriptors here: %v", err)
	}
	return len(entries)
}

func TestChurnLeavesNothingBehind(t *testing.T) {
	srv := kiev.NewServer()
	srv.Register(&Arith{})
	addr := startServer(t, srv)
	cycles := 10_000
	if raceEnabled {
		cycles = 2_000 // the race detector makes each cycle ten times slower
	}
	// Warm up, so that lazily started runtime goroutines are counted.
	warm := dial(t, addr)
	warm.Call(context.Background(), "Arith.Add", Args{1, 1}, &Reply{})
	warm.Close()
	baseFDs, baseG := openFDs(t), runtime.NumGoroutine()
	start := time.Now()
	for i := range cycles {
		c, err := kiev.Dial(addr)
		if err != nil {
			t.Fatalf("cycle %d: %v", i, err)
		}
		var r Reply
		if err := c.Call(context.Background(), "Arith.Add", Args{i, 1}, &r); err != nil || r.C != i+1 {
			t.Fatalf("cycle %d: %v, %v", i, r.C, err)
		}
		c.Close()
	}
	took := time.Since(start)
	// The server notices each close on its own goroutines; give it time.
	deadline := time.Now().Add(10 * time.Second)
	for openFDs(t) > baseFDs+2 || runtime.NumGoroutine() > baseG+2 {
		if time.Now().After(deadline) {
			t.Fatalf("after %d connect/call/close cycles: %d open files (baseline %d), %d goroutines (baseline %d)",
				cycles, openFDs(t), baseFDs, runtime.NumGoroutine(), baseG)
		}
		time.Sleep(10 * time.Millisecond) // polling the process's own counts
	}
	t.Logf("%d connect/call/close cycles in %v; open files and goroutines back to baseline (%d, %d)", cycles, took.Round(time.Millisecond), baseFDs, baseG)
}

func TestBlackHoleFailsPendingCalls(t *testing.T) {
	svc := &Arith{block: make(chan struct{}), started: make(chan struct{}, 1)}
	defer close(svc.block)
	srv := kiev.NewServer(kiev.WithHeartbeat(100*time.Millisecond, 500*time.Millisecond))
	srv.Register(svc)
	proxy := zktest.NewProxy(t, startServer(t, srv))
	c := dial(t, proxy.Addr(), kiev.WithHeartbeat(100*time.Millisecond, 500*time.Millisecond),
		kiev.WithRetry(kiev.RetryPolicy{MaxAttempts: 1}))
	done := make(chan error, 1)
	go func() { done <- c.Call(context.Background(), "Arith.Block", Args{}, &Reply{}) }()
	<-svc.started
	// The network stops forwarding without closing anything.
	proxy.Pause()
	start := time.Now()
	select {
	case err := <-done:
		if !errors.Is(err, kiev.ErrShutdown) {
			t.Fatalf("pending call under a black hole = %v; want ErrShutdown", err)
		}
		if took := time.Since(start); took > 2*time.Second {
			t.Errorf("the pending call failed after %v; want within about the heartbeat timeout (500ms)", took)
		}
		t.Logf("black hole: the pending call failed after %v (heartbeat timeout 500ms)", time.Since(start).Round(time.Millisecond))
	case <-time.After(10 * time.Second):
		t.Fatal("a pending call hung for 10s behind a black hole")
	}
	proxy.Resume()
}

// TestRefusalsDoNotFloodTheLog makes calls with a wrong token for a
// little over a second. Each refusal was a WARN line: a client could
// write the server's log faster than it sent bytes. Now a second holds at
// most LogBurst lines of it, a line says how many were suppressed before
// it, and a metric counts them.
func TestRefusalsDoNotFloodTheLog(t *testing.T) {
	log := &records{}
	srv := kiev.NewServer(kiev.WithLogger(slog.New(log)), kiev.WithServerInterceptor(kiev.TokenAuth(func(ctx context.Context, token string) error {
		return errors.New("unknown token")
	})))
	srv.Register(&Secure{})
	c := dial(t, startServer(t, srv), kiev.WithToken("guess"))
	const msg = "kiev: call refused: authentication failed"
	start := time.Now()
	calls := 0
	// Until a line says how many were suppressed: the first line of a
	// second after one with more than LogBurst refusals. Bounded by 3s.
	for ; time.Since(start) < 3*time.Second; calls++ {
		if err := c.Call(context.Background(), "Secure.Whoami", 0, new(string)); !errors.Is(err, kiev.ErrUnauthenticated) {
			t.Fatalf("call with a wrong token = %v; want ErrUnauthenticated", err)
		}
		if calls%50 == 0 && log.suppressedSeen(msg) {
			break
		}
	}
	took := time.Since(start)
	n := log.count(msg)
	t.Logf("%d refusals in %v: %d lines", calls, took, n)
	if most := kiev.LogBurst * (int(took/time.Second) + 2); n > most {
		t.Errorf("%d refusals in %v wrote %d lines; want at most %d, %d a second", calls, took, n, most, kiev.LogBurst)
	}
	if !log.suppressedSeen(msg) {
		t.Errorf("no line said how many were suppressed, after %d refusals in %v", calls, took)
	}
	hs := httptest.NewServer(srv.AdminHandler())
	defer hs.Close()
	if m := get(t, hs.URL+"/metrics"); !strings.Contains(m, `kiev_server_log_lines_suppressed_total{msg="`+msg+`"} `) {
		t.Error("/metrics lacks kiev_server_log_lines_suppressed_total for the refusals")
	}
}

// TestUnauthenticatedCallersCannotProbeNames calls, without a token,
// methods that exist and methods that do not, over TCP, UDP and HTTP. An
// unknown service or method was answered NotFound before TokenAuth ran,
// so a caller with no credentials could tell names that exist from names
// that do not. Now every such call gets the same Unauthenticated answer;
// with the token, the unknown method is NotFound, listing what there is.
func TestUnauthenticatedCallersCannotProbeNames(t *testing.T) {
	srv := kiev.NewServer(kiev.WithLogger(slog.New(slog.DiscardHandler)), kiev.WithoutPacketKeysForTokenAuth(), kiev.WithServerInterceptor(kiev.TokenAuth(func(ctx context.Context, token string) error {
		if token != "s3cret" {
			return errors.New("send a valid token")
		}
		return nil
	})))
	srv.Register(&Secure{})
	tcp := startServer(t, srv)
	udp := servePacket(t, srv, nil)
	hs := httptest.NewServer(srv.HTTPHandler())
	defer hs.Close()
	names := []string{"Secure.Whoami", "Secure.Nope", "Nope.Whoami", "kiev.Reflection.List"}
	for _, target := range []string{tcp, udp} {
		anon := dial(t, target)
		for _, name := range names {
			if target == udp && name == "kiev.Reflection.List" {
				continue // not served over UDP at all (Packet.ServeReflection), whoever asks
			}
			err := anon.Call(context.Background(), name, 0, new(string))
			if !errors.Is(err, kiev.ErrUnauthenticated) || err.Error() != "kiev: "+name+": unauthenticated: send a valid token" {
				t.Errorf("%s: %s without a token: %v; want the same Unauthenticated answer as any name", target, name, err)
			}
		}
		good := dial(t, target, kiev.WithToken("s3cret"))
		if err := good.Call(context.Background(), "Secure.Nope", 0, new(string)); !errors.Is(err, kiev.ErrNotFound) || !strings.Contains(err.Error(), "Whoami") {
			t.Errorf("%s: Secure.Nope with the token: %v; want NotFound listing Whoami", target, err)
		}
	}
	for _, name := range names[:3] {
		resp, err := http.Post(hs.URL+"/"+name, "application/json", strings.NewReader("0"))
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusUnauthorized {
			t.Errorf("HTTP %s without a token: %d; want 401 for every name", name, resp.StatusCode)
		}
	}
}

// TestClientCertsOnEveryEntryPoint gives a server that requires client
// certificates entry points that cannot check them. They ran the calls of
// callers without one, and nothing warned. Now ServePacket and
// ServeFastCGI refuse to start, HTTPHandler answers a request without a
// verified certificate 401 and shows handlers the one it has, and
// WithoutClientCertsOutsideTLS opts in, with a warning.
func TestClientCertsOnEveryEntryPoint(t *testing.T) {
	ca := newCA(t, "kiev test CA")
	serverTLS := &tls.Config{
		Certificates: []tls.Certificate{ca.issue(t, "server", true)},
		ClientAuth:   tls.RequireAndVerifyClientCert,
		ClientCAs:    ca.pool,
	}
	log := &records{}
	svc := &Secure{}
	srv := kiev.NewServer(kiev.WithLogger(slog.New(log)), kiev.WithTLS(serverTLS))
	srv.Register(svc)
	defer srv.Close()

	pc, err := net.ListenPacket("udp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	if err := srv.ServePacket(pc); err == nil || !strings.Contains(err.Error(), "WithoutClientCertsOutsideTLS") {
		t.Errorf("ServePacket on a server that requires client certificates: %v; want a refusal that names the opt-in", err)
	}
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	if err := srv.ServeFastCGI(l); err == nil || !strings.Contains(err.Error(), "cannot check client certificates") {
		t.Errorf("ServeFastCGI on a server that requires client certificates: %v; want a refusal", err)
	}

	// Plain HTTP has no certificate: 401. HTTPS with the client's
	// certificate: served, and the handler sees who called.
	plain := httptest.NewServer(srv.HTTPHandler())
	defer plain.Close()
	resp, err := http.Post(plain.URL+"/Secure.Whoami", "application/json", strings.NewReader("0"))
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusUnauthorized {
		t.Errorf("HTTP without a client certificate: %d; want 401", resp.StatusCode)
	}
	secure := httptest.NewUnstartedServer(srv.HTTPHandler())
	secure.TLS = serverTLS
	secure.StartTLS()
	defer secure.Close()
	client := &http.Client{Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: ca.pool, Certificates: []tls.Certificate{ca.issue(t, "billing-service", false)}}}}
	resp, err = client.Post(secure.URL+"/Secure.Whoami", "application/json", strings.NewReader("0"))
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != 200 || string(body) != "\"billing-service\"\n" {
		t.Errorf("HTTPS with a client certificate: %d %s; want 200 and the certificate's name", resp.StatusCode, body)
	}
	if n := svc.runs.Load(); n != 1 {
		t.Errorf("the handler ran %d times; want once, for the caller with a certificate", n)
	}

	// Opted in: UDP serves, and says so.
	open := kiev.NewServer(kiev.WithLogger(slog.New(log)), kiev.WithTLS(serverTLS), kiev.WithoutClientCertsOutsideTLS())
	open.Register(&Secure{})
	defer open.Close()
	target := servePacket(t, open, nil)
	if err := dial(t, target).Call(context.Background(), "Secure.Whoami", 0, new(string)); err != nil {
		t.Errorf("UDP call on the opted-in server: %v", err)
	}
	if attrs, _, ok := log.find("kiev: serving callers without client certificates though WithTLS requires them (WithoutClientCertsOutsideTLS)"); !ok || attrs["entry"] != "ServePacket (UDP)" {
		t.Errorf("no warning for UDP on the opted-in server: %v", attrs)
	}
}

// heldConn is an accepted connection whose Close the server calls is
// held back: the socket stays open, so that a TLS handshake under way
// completes though the server closed the connection meanwhile.
type heldConn struct {
	net.Conn
	closed atomic.Bool
}

func (c *heldConn) Close() error { c.closed.Store(true); return nil }

type heldListener struct {
	net.Listener
	accepted chan *heldConn
}

func (l heldListener) Accept() (net.Conn, error) {
	nc, err := l.Listener.Accept()
	if err != nil {
		return nil, err
	}
	hc := &heldConn{Conn: nc}
	l.accepted <- hc
	return hc, nil
}

// TestCloseDuringTLSHandshake closes the server while a connection's TLS
// handshake completes. The connection then starts using the TLS conn in
// place of the socket, while Close, on another goroutine, closes what the
// connection uses: the race detector checks that the two agree on it
// without a data race (the connection took the TLS conn outside its lock).
func TestCloseDuringTLSHandshake(t *testing.T) {
	ca := newCA(t, "kiev test CA")
	log := &records{}
	srv := kiev.NewServer(kiev.WithLogger(slog.New(log)), kiev.WithTLS(&tls.Config{Certificates: []tls.Certificate{ca.issue(t, "server", true)}}))
	srv.Register(new(Arith))
	l := heldListener{listen(t), make(chan *heldConn, 1)}
	served := make(chan error, 1)
	go func() { served <- srv.Serve(l) }()

	nc, err := net.Dial("tcp", l.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	held := <-l.accepted
	defer held.Conn.Close()

	// Close and the handshake run side by side, with nothing ordering
	// them, as a Close in production meets a handshake.
	closed := make(chan error, 1)
	go func() { closed <- srv.Close() }()
	tc := tls.Client(nc, &tls.Config{RootCAs: ca.pool, ServerName: "127.0.0.1"})
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := tc.HandshakeContext(ctx); err != nil {
		t.Fatalf("TLS handshake: %v; the held socket should let it complete", err)
	}
	nc.Close() // the server's reader, waiting for the preface, ends

	select {
	case err := <-closed:
		if err != nil {
			t.Fatalf("Close: %v", err)
		}
	case <-ctx.Done():
		t.Fatal("Close did not return once the connection ended")
	}
	if err := <-served; !errors.Is(err, kiev.ErrServerClosed) {
		t.Fatalf("Serve returned %v; want ErrServerClosed", err)
	}
	if !held.closed.Load() {
		t.Fatal("Close did not close the connection")
	}
	if n := log.count("kiev: handshake failed; closing connection"); n != 0 {
		t.Errorf("%d warnings of a failed handshake; the server closed the connection itself, which is no failure to warn of", n)
	}
}

// TestSilentCloseIsNotWarned connects to a server, plain and with TLS,
// and closes without sending a byte, as a load balancer's TCP health
// check does: that is no failed handshake to warn of. A peer that sends
// something else than kiev's preface still is.
func TestSilentCloseIsNotWarned(t *testing.T) {
	ca := newCA(t, "kiev test CA")
	for _, tc := range []struct {
		name string
		opts []kiev.ServerOption
		warn string
	}{
		{"plain", nil, "kiev: handshake failed; closing connection"},
		{"TLS", []kiev.ServerOption{kiev.WithTLS(&tls.Config{Certificates: []tls.Certificate{ca.issue(t, "server", true)}})}, "kiev: TLS handshake failed; closing connection"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			log := &records{}
			srv := kiev.NewServer(append([]kiev.ServerOption{kiev.WithLogger(slog.New(log))}, tc.opts...)...)
			srv.Register(new(Arith))
			addr := startServer(t, srv)
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			// Each connection is seen open, then gone, before the log
			// is read: the server has handled its end.
			visit := func(send []byte) {
				nc, err := net.Dial("tcp", addr)
				if err != nil {
					t.Fatal(err)
				}
				waitFor(t, ctx, "the connection open", func() bool { return srv.Status(ctx).Connections == 1 })
				if send != nil {
					nc.Write(send)
				}
				nc.Close()
				waitFor(t, ctx, "the connection gone", func() bool { return srv.Status(ctx).Connections == 0 })
			}
			visit(nil)
			if n := log.count(tc.warn); n != 0 {
				t.Errorf("%d warnings %q for a peer that closed without a byte", n, tc.warn)
			}
			visit([]byte("GET / HTTP/1.0\r\n\r\n"))
			if n := log.count(tc.warn); n != 1 {
				t.Errorf("%d warnings %q for a peer that sent HTTP; want 1", n, tc.warn)
			}
		})
	}
}
