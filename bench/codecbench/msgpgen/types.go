// Package msgpgen holds the payloads of the codec micro-benchmark with the
// methods tinylib/msgp generates for them (types_gen.go, made by go
// generate from this file).
package msgpgen

//go:generate go run github.com/tinylib/msgp@v1.6.5 -file types.go -o types_gen.go -tests=false

import "strings"

// Small is bench/compare's small-struct payload.
type Small struct {
	ID   int64
	Name string
	Tags []int64
}

// Message is rpcx-benchmark's BenchmarkMessage as a Go struct, as in
// bench/compare.
type Message struct {
	Field1   string
	Field9   string
	Field18  string
	Field80  bool
	Field81  bool
	Field2   int32
	Field3   int32
	Field280 int32
	Field6   int32
	Field22  int64
	Field4   string
	Field5   []uint64
	Field59  bool
	Field7   string
	Field16  int32
	Field130 int32
	Field12  bool
	Field17  bool
	Field13  bool
	Field14  bool
	Field104 int32
	Field100 int32
	Field101 int32
	Field102 string
	Field103 string
	Field29  int32
	Field30  bool
	Field60  int32
	Field271 int32
	Field272 int32
	Field150 int32
	Field23  int32
	Field24  bool
	Field25  int32
	Field78  bool
	Field67  int32
	Field68  int32
	Field128 int32
	Field129 string
	Field131 int32
}

// messageText is the text of every string field: 54 bytes of UTF-8.
var messageText = strings.Repeat("消息", 9)

// NewMessage fills a Message as rpcx-benchmark does: every integer 100000,
// every bool true, every string the same text.
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

// NewSmall is bench/compare's small struct.
func NewSmall() *Small { return &Small{ID: 42, Name: "push-ack", Tags: []int64{1, 2, 3, 4}} }
