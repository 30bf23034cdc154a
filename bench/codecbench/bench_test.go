package codecbench

import (
	"bytes"
	"testing"

	"github.com/vmihailenco/msgpack/v5"
	"google.golang.org/protobuf/proto"

	"github.com/kievrpc/kiev/bench/internal/echopb"
	"github.com/kievrpc/kiev/bench/internal/payload"
	"github.com/kievrpc/kiev/codec"
)

// kievSmall and kievMessage are the payloads without msgp's generated
// methods, so that kiev's codec encodes them with its own plans.
type (
	kievSmall   payload.Small
	kievMessage payload.Message
)

// A system encodes and decodes one payload.
type system struct {
	name   string
	encode func(dst []byte) ([]byte, error)
	// decode decodes data into the value the system reuses.
	decode func(data []byte) error
}

// systems returns the systems that run on the payload, in the order they
// alternate.
func systems(name string) []system {
	var out []system
	switch name {
	case payload.NameSmall:
		var k kievSmall
		in := (*kievSmall)(payload.NewSmall())
		out = append(out, system{"kiev-msgpack",
			func(dst []byte) ([]byte, error) { return codec.Msgpack.Marshal(dst, in) },
			func(data []byte) error { k = kievSmall{}; return codec.Msgpack.Unmarshal(data, &k) }})
		var g payload.Small
		gin := payload.NewSmall()
		out = append(out, system{"msgp-generated",
			gin.MarshalMsg,
			func(data []byte) error { g = payload.Small{}; _, err := g.UnmarshalMsg(data); return err }})
		out = append(out, vmihailenco(in, func() any { k = kievSmall{}; return &k }))
		var p echopb.Small
		pin := &echopb.Small{Id: 42, Name: "push-ack", Tags: []int64{1, 2, 3, 4}}
		out = append(out, protoSystems(pin, &p)...)
	case payload.NameMessage:
		var k kievMessage
		in := (*kievMessage)(payload.NewMessage())
		out = append(out, system{"kiev-msgpack",
			func(dst []byte) ([]byte, error) { return codec.Msgpack.Marshal(dst, in) },
			func(data []byte) error { k = kievMessage{}; return codec.Msgpack.Unmarshal(data, &k) }})
		var g payload.Message
		gin := payload.NewMessage()
		out = append(out, system{"msgp-generated",
			gin.MarshalMsg,
			func(data []byte) error { g = payload.Message{}; _, err := g.UnmarshalMsg(data); return err }})
		out = append(out, vmihailenco(in, func() any { k = kievMessage{}; return &k }))
		var p echopb.BenchmarkMessage
		out = append(out, protoSystems(payload.MessageToPB(gin), &p)...)
	}
	return out
}

// vmihailenco encodes in with msgpack v5 into a reused buffer and decodes
// into the value reset returns, each with a reused encoder or decoder.
func vmihailenco(in any, reset func() any) system {
	var buf bytes.Buffer
	enc := msgpack.NewEncoder(&buf)
	enc.UseCompactInts(true)
	dec := msgpack.NewDecoder(nil)
	var r bytes.Reader
	return system{"vmihailenco",
		func(dst []byte) ([]byte, error) {
			buf.Reset()
			err := enc.Encode(in)
			return append(dst, buf.Bytes()...), err
		},
		func(data []byte) error {
			r.Reset(data)
			dec.Reset(&r)
			return dec.Decode(reset())
		}}
}

// protoSystems are kiev's protobuf codec and proto.Marshal itself, both
// decoding into out, reset first (kiev's codec keeps a string equal to
// the one its field holds, so into a message left full it would copy
// none).
func protoSystems(in, out proto.Message) []system {
	return []system{
		{"kiev-proto",
			func(dst []byte) ([]byte, error) { return codec.Protobuf.Marshal(dst, in) },
			func(data []byte) error { proto.Reset(out); return codec.Protobuf.Unmarshal(data, out) }},
		{"proto",
			func(dst []byte) ([]byte, error) { return proto.MarshalOptions{}.MarshalAppend(dst, in) },
			func(data []byte) error { proto.Reset(out); return proto.Unmarshal(data, out) }},
	}
}

var payloads = []string{payload.NameSmall, payload.NameMessage}

// The systems of a payload run one after the other within each of -count
// rounds, so that with -count above 1 they alternate.

func BenchmarkEncode(b *testing.B) {
	for _, name := range payloads {
		for _, s := range systems(name) {
			b.Run(name+"/"+s.name, func(b *testing.B) {
				b.ReportAllocs()
				buf, err := s.encode(nil)
				if err != nil {
					b.Fatal(err)
				}
				b.SetBytes(int64(len(buf)))
				for b.Loop() {
					if buf, err = s.encode(buf[:0]); err != nil {
						b.Fatal(err)
					}
				}
			})
		}
	}
}

func BenchmarkDecode(b *testing.B) {
	for _, name := range payloads {
		for _, s := range systems(name) {
			b.Run(name+"/"+s.name, func(b *testing.B) {
				data, err := s.encode(nil)
				if err != nil {
					b.Fatal(err)
				}
				b.ReportAllocs()
				b.SetBytes(int64(len(data)))
				for b.Loop() {
					if err := s.decode(data); err != nil {
						b.Fatal(err)
					}
				}
			})
		}
	}
}

// TestSystemsAgree checks that every system decodes what kiev's codec of
// the same format encodes into the same value, so that the benchmark
// compares like with like.
func TestSystemsAgree(t *testing.T) {
	for _, name := range payloads {
		ss := systems(name)
		kiev, err := ss[0].encode(nil)
		if err != nil {
			t.Fatal(err)
		}
		// msgp's generated code cannot decode a nil slice (Field5), so
		// only vmihailenco decodes kiev's bytes.
		if err := ss[2].decode(kiev); err != nil {
			t.Errorf("%s: %s cannot decode kiev's msgpack: %v", name, ss[2].name, err)
		}
		for _, s := range ss {
			data, err := s.encode(nil)
			if err != nil {
				t.Fatalf("%s: %s: %v", name, s.name, err)
			}
			if err := s.decode(data); err != nil {
				t.Errorf("%s: %s cannot decode its own bytes: %v", name, s.name, err)
			}
			if name == payload.NameMessage && s.name == "proto" && len(data) != 581 {
				t.Errorf("the protobuf message is %d bytes, want 581", len(data))
			}
		}
	}
}
