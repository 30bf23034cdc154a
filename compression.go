package kiev

import (
	"context"
	"fmt"

	"github.com/kievrpc/kiev/internal/transport"
)

// Compression of call bodies on TCP and Unix connections.
//
// Each side lists the algorithms it accepts and uses (WithCompression).
// Right after the preface, a side with a list sends it in a Settings
// frame; peers that do not know Settings skip it, and send none. A side
// compresses a body (a Request's args or a Response's reply, as its codec
// encoded them) only with an algorithm the other side announced, its own
// first choice among them, and only from WithCompressionThreshold bytes
// up; each compressed frame says so in its Compression field. So a peer
// that announced nothing, an older one among them, never sees a
// compressed body. WithCallCompression overrides the choice for a call.
// See PROTOCOL.md, "Compression".

// Compression is an algorithm that compresses the bodies of calls: their
// args and replies as their codec encoded them. Its value is the
// algorithm's number on the wire. See WithCompression.
type Compression uint8

// The compression algorithms, both from github.com/klauspost/compress.
const (
	// NoCompression sends bodies as they are: with WithCallCompression,
	// it turns compression off for the calls of a context.
	NoCompression = Compression(transport.NoCompression)
	// Zstd is Zstandard at its fastest level: the smaller output (a
	// sixth to a twentieth of repetitive JSON), at about 3 to 4 times the
	// CPU time of S2.
	Zstd = Compression(transport.Zstd)
	// S2 is S2, an extension of Snappy: about a third of Zstd's CPU
	// time, for an output 2 to 4 times larger than Zstd's.
	S2 = Compression(transport.S2)
)

// String returns the algorithm's name: "none", "zstd" or "s2".
func (c Compression) String() string { return transport.AlgName(uint8(c)) }

func (c Compression) known() bool { return transport.KnownAlg(uint8(c)) }

// DefaultCompressionThreshold is the default of WithCompressionThreshold.
const DefaultCompressionThreshold = 1 << 10

type callCompressionKey struct{}

// WithCallCompression returns a context whose calls are compressed with
// c both ways, whatever their size and the client's WithCompression: the
// Request's args if the server accepts c, and the reply if the server
// uses c (lists it in its WithCompression). With NoCompression, neither
// is compressed. Over UDP, and with a server that does not accept c, the
// calls go as they would without it. A handler's ctx does not pass it on
// to the calls the handler makes. It panics on an algorithm kiev does not
// know.
func WithCallCompression(ctx context.Context, c Compression) context.Context {
	if c != NoCompression && !c.known() {
		panic(fmt.Sprintf("kiev: WithCallCompression: unknown algorithm %v; use kiev.NoCompression, kiev.Zstd or kiev.S2", c))
	}
	return context.WithValue(ctx, callCompressionKey{}, c)
}

// callCompression returns the compression WithCallCompression set on
// ctx, if any.
func callCompression(ctx context.Context) (Compression, bool) {
	c, ok := ctx.Value(callCompressionKey{}).(Compression)
	return c, ok
}

// compressOptions are a side's compression settings (WithCompression,
// WithCompressionThreshold); the transport compresses and decompresses.
type compressOptions struct {
	algs      []Compression // preferred first; empty: compression off
	threshold int
	c         *transport.Compressor
	settings  []byte  // the Settings frame a client sends; nil: none
	accept    []uint8 // algs, as the Settings carry them
}

func (o *compressOptions) fill(maxFrame int) {
	if o.threshold <= 0 {
		o.threshold = DefaultCompressionThreshold
	}
	algs := make([]uint8, len(o.algs))
	for i, c := range o.algs {
		algs[i] = uint8(c)
	}
	o.c = transport.NewCompressor(algs, o.threshold, maxFrame)
	o.accept = algs
	o.settings = transport.SettingsFrame(algs, 0, maxFrame)
}

// replyAsks holds the values of a ReplyCompression field, so that a
// Request carries one without an allocation.
var replyAsks = []byte{byte(NoCompression), byte(Zstd), byte(S2)}
