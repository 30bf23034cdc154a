package kiev

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"net"
	"reflect"
)

// requiresClientCerts reports whether the server's TLS config requires
// client certificates.
func (s *Server) requiresClientCerts() bool {
	cfg := s.opts.tls
	return cfg != nil && (cfg.ClientAuth == tls.RequireAndVerifyClientCert || cfg.ClientAuth == tls.RequireAnyClientCert)
}

// checkCertEntry says why the entry point named what may not start on a
// server that requires client certificates, or warns that it starts
// without them (WithoutClientCertsOutsideTLS).
func (s *Server) checkCertEntry(what string) error {
	if !s.requiresClientCerts() {
		return nil
	}
	if !s.opts.certsOptional {
		return fmt.Errorf("kiev: %s cannot check client certificates, which this server's WithTLS requires (ClientAuth %v), so it would run calls of callers without one; serve it from a server without that requirement, or opt in with WithoutClientCertsOutsideTLS and check callers another way (TokenAuth)", what, s.opts.tls.ClientAuth)
	}
	s.opts.logger.Warn("kiev: serving callers without client certificates though WithTLS requires them (WithoutClientCertsOutsideTLS)", "entry", what)
	return nil
}

// checkTokenEntry says why ServePacket may not start on a server that
// checks tokens (TokenAuth) in datagrams nobody signs (no
// WithPacketKeys), or warns that it starts
// (WithoutPacketKeysForTokenAuth).
func (s *Server) checkTokenEntry() error {
	if s.opts.packetKeys != nil || !s.checksTokens() {
		return nil
	}
	if !s.opts.tokensUnsigned {
		return errors.New("kiev: ServePacket (UDP) would take TokenAuth's token in clear in every datagram, unsigned: anyone who sees one datagram has the token, and can replay the request from any address to run its handler again; set WithPacketKeys (and WithPacketKey on clients) to sign datagrams, or opt in with WithoutPacketKeysForTokenAuth on a network you trust")
	}
	s.opts.logger.Warn("kiev: serving TokenAuth over UDP without packet keys: tokens travel in clear and a captured request replays (WithoutPacketKeysForTokenAuth)", "entry", "ServePacket (UDP)")
	return nil
}

// checksTokens reports whether one of the server's interceptors is one
// TokenAuth made.
func (s *Server) checksTokens() bool {
	for _, ic := range s.opts.interceptors {
		if reflect.ValueOf(ic).Pointer() == tokenAuthCode {
			return true
		}
	}
	return false
}

// tokenAuthCode is the code of the interceptors TokenAuth returns: the
// closures of one function literal share their code, which reflect
// reports (TokenAuth is not inlined, which would copy the literal).
var tokenAuthCode = reflect.ValueOf(TokenAuth(nil)).Pointer()

type tlsOption struct{ cfg *tls.Config }

func (o tlsOption) applyServer(so *serverOptions) { so.tls = o.cfg }
func (o tlsOption) applyDial(do *dialOptions)     { do.tls = o.cfg }

// tlsServer wraps an accepted connection in TLS and completes the
// handshake within the heartbeat timeout.
func (s *Server) tlsServer(nc net.Conn) (net.Conn, *tls.ConnectionState, error) {
	tc := tls.Server(nc, s.opts.tls)
	ctx, cancel := context.WithTimeout(context.Background(), s.opts.heartbeatTimeout)
	defer cancel()
	if err := tc.HandshakeContext(ctx); err != nil {
		return nil, nil, fmt.Errorf("TLS handshake: %w", err)
	}
	st := tc.ConnectionState()
	return tc, &st, nil
}

// tlsClient wraps a dialed connection in TLS and completes the handshake
// within ctx.
func tlsClient(ctx context.Context, cfg *tls.Config, nc net.Conn, addr string) (net.Conn, error) {
	if cfg.ServerName == "" {
		cfg = cfg.Clone()
		host, _, err := net.SplitHostPort(addr)
		if err != nil {
			host = addr
		}
		cfg.ServerName = host
	}
	tc := tls.Client(nc, cfg)
	if err := tc.HandshakeContext(ctx); err != nil {
		return nil, fmt.Errorf("TLS handshake with %s: %w", addr, err)
	}
	return tc, nil
}

// PeerCertificates returns the certificate chain the caller of the call
// in ctx presented and the server verified (mutual TLS), leaf first, or
// nil if the connection is not TLS or the client sent none.
func PeerCertificates(ctx context.Context) []*x509.Certificate {
	sc, _ := ctx.Value(callKey{}).(*serverCall)
	if sc == nil || sc.req.TLS == nil {
		return nil
	}
	return sc.req.TLS.PeerCertificates
}

// AuthorizationKey is the metadata key WithToken sends and TokenAuth
// checks.
const AuthorizationKey = "authorization"

// ErrUnauthenticated is what TokenAuth answers a call whose token its
// check refused; it matches a ServerError of CodeUnauthenticated.
var ErrUnauthenticated = errors.New("kiev: unauthenticated")

// TokenAuth returns a server interceptor that checks the AuthorizationKey
// metadata of every call with check before anything else happens: before
// the args are decoded and before the handler runs. A call check refuses
// is answered with CodeUnauthenticated, and the refusal is logged with the
// method and peer (never the token).
//
// Over UDP the token travels in every datagram: ServePacket refuses to
// start on a server with TokenAuth unless WithPacketKeys makes clients
// sign their datagrams, or WithoutPacketKeysForTokenAuth opts in.
//
//go:noinline
func TokenAuth(check func(ctx context.Context, token string) error) ServerInterceptor {
	return func(next Handler) Handler {
		return func(ctx context.Context, req *Request) error {
			if err := check(ctx, req.Metadata.Get(AuthorizationKey)); err != nil {
				if sc := req.call; sc != nil {
					sc.srv.warn("kiev: call refused: authentication failed", append(sc.logAttrs(), "err", err)...)
				}
				return &ServerError{Code: CodeUnauthenticated, Message: "kiev: " + req.ServiceMethod + ": unauthenticated: " + err.Error()}
			}
			return next(ctx, req)
		}
	}
}
