package codec_test

import (
	"bytes"
	"strings"
	"testing"

	"google.golang.org/protobuf/proto"

	"github.com/kievrpc/kiev/codec"
	"github.com/kievrpc/kiev/internal/testpb"
)

// msgpGenerated has the methods tinylib/msgp generates, written by hand
// so that the test needs no generator: it encodes its ID as a bare
// integer, which the plan for its fields would never send, and counts the
// calls.
type msgpGenerated struct {
	ID                int64
	marshals, decodes int
}

func (m *msgpGenerated) MarshalMsg(b []byte) ([]byte, error) {
	m.marshals++
	return append(b, 0xd3, byte(m.ID>>56), byte(m.ID>>48), byte(m.ID>>40), byte(m.ID>>32), byte(m.ID>>24), byte(m.ID>>16), byte(m.ID>>8), byte(m.ID)), nil
}

func (m *msgpGenerated) UnmarshalMsg(b []byte) ([]byte, error) {
	m.decodes++
	if len(b) < 9 || b[0] != 0xd3 {
		return b, errorf("want an int64")
	}
	m.ID = 0
	for _, c := range b[1:9] {
		m.ID = m.ID<<8 | int64(c)
	}
	return b[9:], nil
}

type errorf string

func (e errorf) Error() string { return string(e) }

func TestMsgpackUsesGeneratedMethods(t *testing.T) {
	in := &msgpGenerated{ID: -5}
	b, err := codec.Msgpack.Marshal([]byte("prefix"), in)
	if err != nil {
		t.Fatal(err)
	}
	if in.marshals != 1 || !bytes.HasPrefix(b, []byte("prefix\xd3")) {
		t.Fatalf("Marshal gave %x after %d MarshalMsg calls; want MarshalMsg's bytes after the prefix", b, in.marshals)
	}
	var out msgpGenerated
	if err := codec.Msgpack.Unmarshal(b[len("prefix"):], &out); err != nil || out.ID != -5 || out.decodes != 1 {
		t.Fatalf("Unmarshal: %+v, %v; want ID -5 through one UnmarshalMsg call", out, err)
	}
	if b, err := codec.Msgpack.Marshal(nil, (*msgpGenerated)(nil)); err != nil || !bytes.Equal(b, []byte{0xc0}) {
		t.Errorf("a nil pointer marshals to %x, %v; want nil (c0)", b, err)
	}
}

func TestMsgpackGeneratedInputIsChecked(t *testing.T) {
	for name, data := range map[string][]byte{
		"trailing bytes":      {0xd3, 0, 0, 0, 0, 0, 0, 0, 1, 0x01},
		"huge declared array": {0xdd, 0x7f, 0xff, 0xff, 0xff, 0x01},
		"empty":               {},
	} {
		var out msgpGenerated
		err := codec.Msgpack.Unmarshal(data, &out)
		if err == nil || !strings.HasPrefix(err.Error(), "kiev/codec: ") {
			t.Errorf("%s: Unmarshal(%x) = %v; want a kiev/codec error", name, data, err)
		}
		if name != "trailing bytes" && out.decodes != 0 {
			t.Errorf("%s: UnmarshalMsg ran on input the check refuses", name)
		}
	}
}

// vtSmall has the methods vtprotobuf generates, written by hand over the
// library and counting their calls.
type vtSmall struct {
	testpb.Small
	sizes, marshals, decodes int
}

func (m *vtSmall) SizeVT() int { m.sizes++; return proto.Size(&m.Small) }

func (m *vtSmall) MarshalToSizedBufferVT(dst []byte) (int, error) {
	m.marshals++
	b, err := proto.Marshal(&m.Small)
	return copy(dst[len(dst)-len(b):], b), err
}

func (m *vtSmall) UnmarshalVT(data []byte) error {
	m.decodes++
	return proto.UnmarshalOptions{Merge: true}.Unmarshal(data, &m.Small)
}

func TestProtobufUsesVTMethods(t *testing.T) {
	in := &vtSmall{}
	in.Id, in.Name, in.Tags = 42, "kiev", []int64{1, 2}
	b, err := codec.Protobuf.Marshal([]byte("x"), in)
	if err != nil {
		t.Fatal(err)
	}
	want, _ := proto.Marshal(&in.Small)
	if in.sizes != 1 || in.marshals != 1 || !bytes.Equal(b, append([]byte("x"), want...)) {
		t.Fatalf("Marshal gave %x after %d SizeVT and %d MarshalToSizedBufferVT calls; want %x from one each", b, in.sizes, in.marshals, want)
	}
	out := &vtSmall{}
	out.Name, out.Tags = "old", []int64{9} // UnmarshalVT merges: the codec resets first
	if err := codec.Protobuf.Unmarshal(b[1:], out); err != nil || out.decodes != 1 {
		t.Fatalf("Unmarshal: %v after %d UnmarshalVT calls; want one", err, out.decodes)
	}
	if !proto.Equal(&in.Small, &out.Small) {
		t.Errorf("decoded %v, want %v", &out.Small, &in.Small)
	}
}
