package kiev

import (
	"testing"

	"github.com/kievrpc/kiev/internal/transport"
)

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
