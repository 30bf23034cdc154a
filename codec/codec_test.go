package codec_test

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/kievrpc/kiev/codec"
	"github.com/kievrpc/kiev/codec/codectest"
	"github.com/kievrpc/kiev/internal/testpb"
)

// small is the plain Go twin of testpb.Small.
type small struct {
	ID   int64   `msgpack:"id"`
	Name string  `json:"name"`
	Tags []int64 `json:"tags"`
}

// rich exercises more of msgpack than small does.
type rich struct {
	Small  small
	Ptr    *small
	Data   []byte
	Attrs  map[string]string
	Any    any
	When   time.Time
	Ratio  float64
	OK     bool
	Counts [3]uint16
}

func newRich() *rich {
	return &rich{
		Small:  small{ID: 1, Name: "one", Tags: []int64{1, -1}},
		Ptr:    &small{ID: -2, Name: "two", Tags: []int64{1 << 40}},
		Data:   []byte{0, 1, 2, 0xFF},
		Attrs:  map[string]string{"k": "v", "": "empty key"},
		Any:    "text",
		When:   time.Date(2024, 2, 29, 12, 0, 0, 123, time.UTC),
		Ratio:  0.25,
		OK:     true,
		Counts: [3]uint16{1, 2, 65535},
	}
}

func TestMsgpackConformance(t *testing.T) {
	t.Parallel()
	codectest.Run(t, codec.Msgpack, newRich(), func() any { return new(rich) })
}

func TestMsgpackSmallConformance(t *testing.T) {
	t.Parallel()
	sample := &small{ID: 42, Name: "kiev", Tags: []int64{1, 2, 3}}
	codectest.Run(t, codec.Msgpack, sample, func() any { return new(small) })
}

func TestProtobufConformance(t *testing.T) {
	t.Parallel()
	sample := &testpb.Small{Id: 42, Name: "kiev", Tags: []int64{1, 2, 3}}
	codectest.Run(t, codec.Protobuf, sample, func() any { return new(testpb.Small) })
}

func TestBuiltinNames(t *testing.T) {
	for b, want := range map[codec.Builtin]string{
		codec.Msgpack:  "msgpack",
		codec.Protobuf: "proto",
		0:              "invalid",
	} {
		if got := b.Name(); got != want {
			t.Errorf("Builtin(%d).Name() = %q, want %q", uint8(b), got, want)
		}
	}
}

func TestInvalidBuiltin(t *testing.T) {
	var b codec.Builtin
	dst := []byte("x")
	if out, err := b.Marshal(dst, 1); err == nil || string(out) != "x" {
		t.Errorf("Builtin(0).Marshal = %q, %v; want dst unchanged and an error", out, err)
	}
	if err := b.Unmarshal([]byte{0}, new(int)); err == nil {
		t.Error("Builtin(0).Unmarshal returned no error")
	}
}

func TestErrNilPointer(t *testing.T) {
	var nilSmall *small
	var nilPB *testpb.Small
	for _, c := range []struct {
		codec codec.Codec
		v     any
	}{
		{codec.Msgpack, nil},
		{codec.Msgpack, nilSmall},
		{codec.Msgpack, small{}},
		{codec.Protobuf, nil},
		{codec.Protobuf, nilPB},
	} {
		if err := c.codec.Unmarshal([]byte{0x80}, c.v); !errors.Is(err, codec.ErrNilPointer) {
			t.Errorf("%v.Unmarshal(%T) = %v, want ErrNilPointer", c.codec, c.v, err)
		}
	}
}

func TestErrNotProto(t *testing.T) {
	if _, err := codec.Protobuf.Marshal(nil, &small{}); !errors.Is(err, codec.ErrNotProto) {
		t.Errorf("Protobuf.Marshal(*small) = %v, want ErrNotProto", err)
	}
	if err := codec.Protobuf.Unmarshal(nil, &small{}); !errors.Is(err, codec.ErrNotProto) {
		t.Errorf("Protobuf.Unmarshal(*small) = %v, want ErrNotProto", err)
	}
}

func TestProtobufDecodeError(t *testing.T) {
	err := codec.Protobuf.Unmarshal([]byte{0xFF}, new(testpb.Small))
	if err == nil {
		t.Fatal("Unmarshal(0xFF) returned no error")
	}
	t.Log(err)
}

func TestJSONExampleConformance(t *testing.T) {
	t.Parallel()
	codectest.Run(t, jsonCodec{}, newRich(), func() any { return new(rich) })
}

func TestJSONBuiltinConformance(t *testing.T) {
	t.Parallel()
	sample := &small{ID: 42, Name: "kiev", Tags: []int64{1, 2, 3}}
	codectest.Run(t, codec.JSON, sample, func() any { return new(small) })
}

func TestJSONErrorsNameTheField(t *testing.T) {
	var s small
	err := codec.JSON.Unmarshal([]byte(`{"ID": "forty-two"}`), &s)
	if err == nil || !strings.Contains(err.Error(), `field "ID"`) {
		t.Fatalf("wrong type: %v; want an error naming field ID", err)
	}
	if err := codec.JSON.Unmarshal([]byte(`{"ID": 1} {"ID": 2}`), &s); err == nil {
		t.Fatal("two values accepted")
	}
	if err := codec.JSON.Unmarshal([]byte(`{"ID": `), &s); err == nil {
		t.Fatal("truncated JSON accepted")
	}
	if b, err := codec.JSON.Marshal([]byte("x"), map[string]string{"a": "<b>"}); err != nil || string(b) != `x{"a":"<b>"}` {
		t.Fatalf("Marshal = %q, %v", b, err)
	}
}
