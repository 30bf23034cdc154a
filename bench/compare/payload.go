package main

import (
	"github.com/kievrpc/kiev/bench/internal/echopb"
	"github.com/kievrpc/kiev/bench/internal/payload"
)

// The payloads, each echoed by the same method on every system
// (bench/internal/payload defines them).
const (
	paySmall   = payload.NameSmall   // an int64, a short string, a short list
	payMessage = payload.NameMessage // rpcx-benchmark's BenchmarkMessage
	pay1K      = payload.Name1K      // 1,024 bytes
	pay16K     = payload.Name16K     // 16,384 bytes, incompressible
	// pay16KJSON is 16,384 bytes of repetitive JSON, as compressible as
	// the lists of records services send each other: what compression
	// (the kiev-zstd and kiev-s2 systems) is for.
	pay16KJSON = payload.Name16KJSON
)

var allPayloads = payload.Names

// Small, Message and Blob are the payload package's types without the
// methods tinylib/msgp generates for them, so that kiev's msgpack codec
// and gob encode them as any user's plain struct, whatever either learns
// to do with generated code.
type (
	// Small is the small-struct payload for kiev's msgpack codec and
	// net/rpc.
	Small payload.Small
	// Message is rpcx-benchmark's BenchmarkMessage as a Go struct, for
	// kiev's msgpack codec and net/rpc; echopb.BenchmarkMessage is the
	// same for protobuf.
	Message payload.Message
	// Blob is the bulk payload.
	Blob payload.Blob
)

func newSmall() *Small     { return (*Small)(payload.NewSmall()) }
func newMessage() *Message { return (*Message)(payload.NewMessage()) }

func newSmallPB() *echopb.Small              { return payload.NewSmallPB() }
func newMessagePB() *echopb.BenchmarkMessage { return payload.NewMessagePB() }

func messageToPB(m *Message) *echopb.BenchmarkMessage {
	return payload.MessageToPB((*payload.Message)(m))
}

func copyMessagePB(out, in *echopb.BenchmarkMessage) { payload.CopyMessagePB(out, in) }

func blobSize(name string) int    { return payload.BlobSize(name) }
func blobData(name string) []byte { return payload.BlobData(name) }
func checkPayload(p string) error { return payload.Check(p) }
