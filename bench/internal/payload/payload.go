package payload

import (
	"fmt"
	"math/rand/v2"
	"slices"
	"strings"

	"github.com/kievrpc/kiev/bench/internal/echopb"
)

// The payloads' names, as the benchmarks' flags and reports give them.
const (
	NameSmall   = "small" // Small
	NameMessage = "581B"  // Message, rpcx-benchmark's BenchmarkMessage
	Name1K      = "1KiB"  // a Blob of 1,024 bytes
	Name16K     = "16KiB" // a Blob of 16,384 bytes, incompressible
	// Name16KJSON is a Blob of 16,384 bytes of repetitive JSON, as
	// compressible as the lists of records services send each other.
	Name16KJSON = "16KiB-json"
)

// Names lists every payload, in the order the reports give them.
var Names = []string{NameSmall, NameMessage, Name1K, Name16K, Name16KJSON}

// Check returns an error naming the payloads if name is none of them.
func Check(name string) error {
	if slices.Contains(Names, name) {
		return nil
	}
	return fmt.Errorf("unknown payload %q; the payloads are %s", name, strings.Join(Names, ", "))
}

// NewSmall returns the small struct every system echoes.
func NewSmall() *Small { return &Small{ID: 42, Name: "push-ack", Tags: []int64{1, 2, 3, 4}} }

// NewSmallPB is NewSmall as a protobuf message.
func NewSmallPB() *echopb.Small {
	return &echopb.Small{Id: 42, Name: "push-ack", Tags: []int64{1, 2, 3, 4}}
}

// messageText is the text of every string field: 54 bytes of UTF-8, as long
// as rpcx-benchmark's, so that the protobuf message is 581 bytes.
var messageText = strings.Repeat("消息", 9)

// NewMessage fills a Message as rpcx-benchmark fills its BenchmarkMessage:
// every integer 100000, every bool true, every string the same text.
func NewMessage() *Message {
	const i = 100000
	s := messageText
	return &Message{
		Field1: s, Field9: s, Field18: s, Field80: true, Field81: true,
		Field2: i, Field3: i, Field280: i, Field6: i, Field22: i, Field4: s,
		Field59: true, Field7: s, Field16: i, Field130: i, Field12: true,
		Field17: true, Field13: true, Field14: true, Field104: i, Field100: i,
		Field101: i, Field102: s, Field103: s, Field29: i, Field30: true,
		Field60: i, Field271: i, Field272: i, Field150: i, Field23: i,
		Field24: true, Field25: i, Field78: true, Field67: i, Field68: i,
		Field128: i, Field129: s, Field131: i,
	}
}

// NewMessagePB is NewMessage as a protobuf message.
func NewMessagePB() *echopb.BenchmarkMessage {
	m := new(echopb.BenchmarkMessage)
	CopyMessagePB(m, MessageToPB(NewMessage()))
	return m
}

// MessageToPB returns m as a protobuf message.
func MessageToPB(m *Message) *echopb.BenchmarkMessage {
	return &echopb.BenchmarkMessage{
		Field1: m.Field1, Field9: m.Field9, Field18: m.Field18, Field80: m.Field80, Field81: m.Field81,
		Field2: m.Field2, Field3: m.Field3, Field280: m.Field280, Field6: m.Field6, Field22: m.Field22,
		Field4: m.Field4, Field5: m.Field5, Field59: m.Field59, Field7: m.Field7, Field16: m.Field16,
		Field130: m.Field130, Field12: m.Field12, Field17: m.Field17, Field13: m.Field13, Field14: m.Field14,
		Field104: m.Field104, Field100: m.Field100, Field101: m.Field101, Field102: m.Field102,
		Field103: m.Field103, Field29: m.Field29, Field30: m.Field30, Field60: m.Field60,
		Field271: m.Field271, Field272: m.Field272, Field150: m.Field150, Field23: m.Field23,
		Field24: m.Field24, Field25: m.Field25, Field78: m.Field78, Field67: m.Field67,
		Field68: m.Field68, Field128: m.Field128, Field129: m.Field129, Field131: m.Field131,
	}
}

// CopyMessagePB copies every field of in to out: the echo handler's work,
// the same as `*out = *in` for the Go struct (a generated message must not
// be copied by value).
func CopyMessagePB(out, in *echopb.BenchmarkMessage) {
	out.Field1, out.Field9, out.Field18, out.Field80, out.Field81 = in.Field1, in.Field9, in.Field18, in.Field80, in.Field81
	out.Field2, out.Field3, out.Field280, out.Field6, out.Field22 = in.Field2, in.Field3, in.Field280, in.Field6, in.Field22
	out.Field4, out.Field5, out.Field59, out.Field7, out.Field16 = in.Field4, in.Field5, in.Field59, in.Field7, in.Field16
	out.Field130, out.Field12, out.Field17, out.Field13, out.Field14 = in.Field130, in.Field12, in.Field17, in.Field13, in.Field14
	out.Field104, out.Field100, out.Field101, out.Field102 = in.Field104, in.Field100, in.Field101, in.Field102
	out.Field103, out.Field29, out.Field30, out.Field60 = in.Field103, in.Field29, in.Field30, in.Field60
	out.Field271, out.Field272, out.Field150, out.Field23 = in.Field271, in.Field272, in.Field150, in.Field23
	out.Field24, out.Field25, out.Field78, out.Field67 = in.Field24, in.Field25, in.Field78, in.Field67
	out.Field68, out.Field128, out.Field129, out.Field131 = in.Field68, in.Field128, in.Field129, in.Field131
}

// BlobSize is the size of a bulk payload, or 0 for the structs.
func BlobSize(name string) int {
	switch name {
	case Name1K:
		return 1 << 10
	case Name16K, Name16KJSON:
		return 16 << 10
	}
	return 0
}

// BlobData returns the bytes of a bulk payload.
func BlobData(name string) []byte {
	if name == Name16KJSON {
		return jsonText(BlobSize(name))
	}
	return newBlob(BlobSize(name))
}

// newBlob returns n bytes that no compressor shrinks: pseudo-random, the
// same on every run.
func newBlob(n int) []byte {
	b := make([]byte, n)
	_, _ = rand.NewChaCha8([32]byte{'k', 'i', 'e', 'v'}).Read(b)
	return b
}

// jsonText returns n bytes of JSON records, alike but for their numbers.
func jsonText(n int) []byte {
	var b []byte
	for i := 0; len(b) < n; i++ {
		b = fmt.Appendf(b, `{"id":%d,"name":"user-%d","email":"user%d@example.com","active":true,"roles":["reader","writer"]},`, i, i, i)
	}
	return b[:n]
}
