package otelkiev

import (
	"errors"
	"fmt"
	"testing"

	"github.com/kievrpc/kiev"
)

func TestServerAddressOfTargets(t *testing.T) {
	for _, tc := range []struct {
		target string
		addr   string
		port   int
	}{
		{"127.0.0.1:7000", "127.0.0.1", 7000},
		{"tcp://db.internal:7000", "db.internal", 7000},
		{"udp://[::1]:7001", "::1", 7001},
		{"unix:///run/kiev.sock", "/run/kiev.sock", 0},
		{"Arith", "Arith", 0},
		{"zookeeper://10.0.0.1:2181,10.0.0.2:2181/team-a/kiev/Arith?session_timeout=10s", "Arith", 0},
		{"conn 10.1.2.3:4000", "10.1.2.3", 4000},
		{"net/rpc codec", "net/rpc codec", 0},
	} {
		if addr, port := serverAddress(tc.target); addr != tc.addr || port != tc.port {
			t.Errorf("serverAddress(%q) = %q, %d; want %q, %d", tc.target, addr, port, tc.addr, tc.port)
		}
	}
}

func TestServerFault(t *testing.T) {
	for code, want := range map[kiev.Code]bool{
		kiev.CodeOK: false, kiev.CodeApplication: true, kiev.CodeNotFound: true, kiev.CodeShutdown: true,
		kiev.CodeDeadlineExceeded: true, kiev.CodeCanceled: false, kiev.CodeBadRequest: false,
		kiev.CodeInternal: true, kiev.CodeOverloaded: true, kiev.CodeTooLarge: true,
		kiev.CodeUnauthenticated: false, 100: true, 400: false, 404: false, 499: false, 500: true, 503: true,
	} {
		if got := serverFault(code); got != want {
			t.Errorf("serverFault(%v) = %v; want %v", code, got, want)
		}
	}
}

// The client's own throttle refuses with both sentinels, as a server's
// limited answer matches both: the method's limit is named.
func TestShedOutcome(t *testing.T) {
	for err, want := range map[error]string{
		nil:                "",
		errors.New("boom"): "",
		fmt.Errorf("call: %w", kiev.ErrOverloaded):                         ShedOverloaded,
		fmt.Errorf("%w: refused: %w", kiev.ErrOverloaded, kiev.ErrLimited): ShedLimited,
		&kiev.ServerError{Code: kiev.CodeOverloaded}:                       ShedOverloaded,
		&kiev.ServerError{Code: kiev.CodeDeadlineExceeded}:                 "",
	} {
		if got := shedOutcome(err); got != want {
			t.Errorf("shedOutcome(%v) = %q; want %q", err, got, want)
		}
	}
}
