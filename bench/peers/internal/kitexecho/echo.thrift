// The structs and the service of the comparison benchmark (bench/compare)
// for kitex, in thrift, kitex's default IDL: the same fields, and field
// ids, as bench/internal/echopb/echo.proto. doc.go beside this file says
// how to generate the Go code from it.
namespace go kitexecho

// Small is the small-struct payload: an int64, a short string, a short list.
struct Small {
  1: i64 ID
  2: string Name
  3: list<i64> Tags
}

// BenchmarkMessage is rpcx-benchmark's message (thrift has no unsigned
// integers: Field5 is a list<i64>).
struct BenchmarkMessage {
  1: string Field1
  9: string Field9
  18: string Field18
  80: bool Field80
  81: bool Field81
  2: i32 Field2
  3: i32 Field3
  280: i32 Field280
  6: i32 Field6
  22: i64 Field22
  4: string Field4
  5: list<i64> Field5
  59: bool Field59
  7: string Field7
  16: i32 Field16
  130: i32 Field130
  12: bool Field12
  17: bool Field17
  13: bool Field13
  14: bool Field14
  104: i32 Field104
  100: i32 Field100
  101: i32 Field101
  102: string Field102
  103: string Field103
  29: i32 Field29
  30: bool Field30
  60: i32 Field60
  271: i32 Field271
  272: i32 Field272
  150: i32 Field150
  23: i32 Field23
  24: bool Field24
  25: i32 Field25
  78: bool Field78
  67: i32 Field67
  68: i32 Field68
  128: i32 Field128
  129: string Field129
  131: i32 Field131
}

// Blob is the bulk payload.
struct Blob {
  1: binary Data
}

service Echo {
  Small EchoSmall(1: Small req)
  BenchmarkMessage EchoMessage(1: BenchmarkMessage req)
  Blob EchoBlob(1: Blob req)
}
