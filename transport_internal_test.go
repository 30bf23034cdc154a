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
		{transport.CodeOK, CodeOK},
		{transport.CodeNotFound, CodeNotFound},
		{transport.CodeDeadlineExceeded, CodeDeadlineExceeded},
		{transport.CodeCanceled, CodeCanceled},
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

// TestTransportHeaders pins the HTTP front's headers to the names package
// kiev documents.
func TestTransportHeaders(t *testing.T) {
	for _, tc := range [][2]string{
		{transport.HeaderPriority, HeaderPriority},
		{transport.HeaderTimeout, HeaderTimeout},
		{transport.HeaderMetaPrefix, HeaderMetaPrefix},
		{transport.HeaderCode, HeaderCode},
	} {
		if tc[0] != tc[1] {
			t.Errorf("the HTTP front reads %q, package kiev says %q", tc[0], tc[1])
		}
	}
}
