// Package payload holds the payloads every benchmark of this module echoes
// or encodes, defined once: the small struct, rpcx-benchmark's 581-byte
// BenchmarkMessage and the bulk blobs, by name (Names), with their
// protobuf twins in echopb. bench/compare, bench/codecbench and the peers'
// module (bench/peers) use them.
//
// The types carry the methods tinylib/msgp generates for them
// (types_gen.go, made by go generate from types.go), for the codec
// benchmark's generated-code baseline. A benchmark that must measure a
// codec on a plain struct, as a code-first user writes it, declares a
// defined type over it (type small payload.Small), which has no methods.
package payload
