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
	"log/slog"
	"math/big"
	"net"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/kievrpc/kiev"
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
