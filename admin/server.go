package admin

import (
	"context"
	"log/slog"
	"net"
	"net/http"
	"sync"
	"time"

	"github.com/kievrpc/kiev/internal/connlimit"
)

// Limits of the admin HTTP server of Serve (and so of kiev.WithAdmin).
const (
	MaxConns     = 64
	ReadTimeout  = 10 * time.Second
	WriteTimeout = 30 * time.Second
	IdleTimeout  = 60 * time.Second
)

// HTTPServer is an admin HTTP server that Serve started.
type HTTPServer struct {
	hs   *http.Server
	addr string
	wg   sync.WaitGroup
}

// Serve serves h over HTTP on addr, such as "127.0.0.1:9090", until
// Shutdown. It holds at most MaxConns connections (more wait in the
// kernel's backlog to be accepted), gives a request ReadTimeout to arrive
// and its answer WriteTimeout, and closes a keep-alive connection idle for
// IdleTimeout, so that idle or slow clients of the admin pages cannot
// take the process's file descriptors from its RPC listeners. The HTTP
// server's own errors go to logger at Debug level.
func Serve(addr string, h http.Handler, logger *slog.Logger) (*HTTPServer, error) {
	l, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, err
	}
	s := &HTTPServer{addr: l.Addr().String(), hs: &http.Server{
		Handler:           h,
		ReadHeaderTimeout: ReadTimeout,
		ReadTimeout:       ReadTimeout,
		WriteTimeout:      WriteTimeout,
		IdleTimeout:       IdleTimeout,
		ErrorLog:          slog.NewLogLogger(logger.Handler(), slog.LevelDebug),
	}}
	s.wg.Go(func() { _ = s.hs.Serve(connlimit.NewListener(l, MaxConns)) })
	return s, nil
}

// Addr returns the address the server listens on.
func (s *HTTPServer) Addr() string { return s.addr }

// Shutdown stops the server: gracefully within ctx, else at once. It
// returns once the server's goroutine has.
func (s *HTTPServer) Shutdown(ctx context.Context) {
	if s.hs.Shutdown(ctx) != nil {
		s.hs.Close()
	}
	s.wg.Wait()
}
