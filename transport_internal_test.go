package kiev

import (
	"testing"

	"github.com/kievrpc/kiev/internal/transport"
)

// TestTransportCodes pins the codes the transport fronts answer with
// themselves to Code's.
func TestTransportCodes(t *testing.T) {
	for _, tc := range []struct {
		got  uint32
		want Code
	}{
		{transport.CodeNotFound, CodeNotFound},
		{transport.CodeShutdown, CodeShutdown},
		{transport.CodeBadRequest, CodeBadRequest},
		{transport.CodeOverloaded, CodeOverloaded},
		{transport.CodeTooLarge, CodeTooLarge},
		{transport.CodeUnauthenticated, CodeUnauthenticated},
	} {
		if Code(tc.got) != tc.want {
			t.Errorf("transport's code %d, want %d (%v)", tc.got, tc.want, tc.want)
		}
	}
}
