package payload

//go:generate go run github.com/tinylib/msgp@v1.6.5 -file types.go -o types_gen.go -tests=false

// Small is the small-struct payload: an int64, an 8-byte string, four
// int64s.
type Small struct {
	ID   int64
	Name string
	Tags []int64
}

// Message is rpcx-benchmark's BenchmarkMessage as a Go struct;
// echopb.BenchmarkMessage is the same for protobuf. Filled by NewMessage,
// it is 581 bytes in protobuf.
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

// Blob is the bulk payload.
type Blob struct {
	Data []byte
}
