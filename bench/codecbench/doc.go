// Package codecbench measures kiev's msgpack and protobuf codecs beside
// vmihailenco/msgpack, tinylib/msgp's generated code and proto.Marshal, on
// the payloads of bench/compare: the small struct and rpcx-benchmark's
// 581-byte message (BenchmarkMessage; 581 bytes in protobuf).
//
// It lives in the bench module, beside the peers, so that tinylib/msgp
// stays out of kiev's go.mod. Run it from this directory:
//
//	go test -run '^$' -bench . -benchmem -count 10
//
// Each benchmark is named Benchmark<Op>/<payload>/<system>, with Op
// Encode or Decode. Encoding appends to a reused buffer, as kiev does;
// decoding goes into a value reused from call to call, zeroed first, so
// that allocations count what a decoded value must own (its strings and
// slices).
package codecbench
