// Package codectest is a conformance suite for implementations of
// [codec.Codec]. A codec's own tests call [Run]:
//
//	func TestMyCodec(t *testing.T) {
//		codectest.Run(t, mycodec.Codec{}, &Point{X: 1, Y: 2, Label: "a"},
//			func() any { return new(Point) })
//	}
//
// The suite must pass under go test -race: it calls the codec from many
// goroutines at once.
package codectest

import (
	"bytes"
	"fmt"
	"math/rand/v2"
	"reflect"
	"sync"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"
	"google.golang.org/protobuf/testing/protocmp"

	"github.com/kievrpc/kiev/codec"
)

// Run checks that c honours the [codec.Codec] contract, as subtests of t:
//
//   - Name is 1 to 32 bytes of printable ASCII and does not change.
//   - Marshal appends to dst, keeps the bytes already in it and does not
//     keep dst after returning.
//   - Unmarshal of what Marshal produced gives a value equal to sample.
//   - Unmarshal copies what it keeps: overwriting the input afterwards
//     does not change the decoded value.
//   - Unmarshal into nil, a typed nil pointer or a non-pointer returns an
//     error.
//   - Unmarshal of truncated, corrupted or random bytes never panics, and
//     the codec works normally afterwards. Which of those inputs must fail
//     depends on the format, so the suite does not require errors for
//     them; test that in the codec's own tests.
//   - Many goroutines may marshal and unmarshal at once (run with -race).
//
// sample is the value to encode: a non-nil pointer, of the same type that
// newValue returns, whose fields are all set to non-zero values so that a
// lost field shows. newValue returns a new, empty value to decode into.
// Values are compared with go-cmp, with protocmp.Transform for protobuf
// messages, treating nil and empty slices and maps as equal and comparing
// unexported fields too.
//
// Run does not call t.Parallel; the caller may.
func Run(t *testing.T, c codec.Codec, sample any, newValue func() any) {
	t.Helper()
	st := reflect.TypeOf(sample)
	if st == nil || st.Kind() != reflect.Pointer || reflect.ValueOf(sample).IsNil() {
		t.Fatalf("codectest: sample must be a non-nil pointer, got %T", sample)
	}
	if nt := reflect.TypeOf(newValue()); nt != st {
		t.Fatalf("codectest: newValue returns %v, want the type of sample, %v", nt, st)
	}
	s := &suite{c: c, sample: sample, newValue: newValue}
	enc, err := c.Marshal(nil, sample)
	if err != nil {
		t.Fatalf("Marshal(nil, sample): %v", err)
	}
	s.enc = enc

	t.Run("Name", s.name)
	t.Run("RoundTrip", s.roundTrip)
	t.Run("Appends", s.appends)
	t.Run("DoesNotKeepDst", s.doesNotKeepDst)
	t.Run("DoesNotKeepInput", s.doesNotKeepInput)
	t.Run("BadTarget", s.badTarget)
	t.Run("Truncated", s.truncated)
	t.Run("Garbage", s.garbage)
	t.Run("Concurrent", s.concurrent)
}

type suite struct {
	c        codec.Codec
	sample   any
	newValue func() any
	enc      []byte // c.Marshal(nil, sample)
}

func (s *suite) name(t *testing.T) {
	name := s.c.Name()
	if len(name) < 1 || len(name) > 32 {
		t.Errorf("Name() = %q: %d bytes, want 1 to 32", name, len(name))
	}
	for i := 0; i < len(name); i++ {
		if name[i] < 0x20 || name[i] > 0x7e {
			t.Errorf("Name() = %q: byte %d is 0x%02x, want printable ASCII", name, i, name[i])
		}
	}
	if again := s.c.Name(); again != name {
		t.Errorf("Name() = %q, then %q; want a constant", name, again)
	}
}

func (s *suite) roundTrip(t *testing.T) {
	got, err := s.decode(s.enc)
	if err != nil {
		t.Fatalf("Unmarshal(Marshal(sample)): %v", err)
	}
	if d := diff(s.sample, got); d != "" {
		t.Errorf("Unmarshal(Marshal(sample)) differs from sample (-want +got):\n%s", d)
	}
}

func (s *suite) appends(t *testing.T) {
	prefix := []byte("kiev-codectest-prefix")
	for _, spare := range []int{0, 1, len(s.enc), 4096} {
		dst := append(make([]byte, 0, len(prefix)+spare), prefix...)
		out, err := s.c.Marshal(dst, s.sample)
		if err != nil {
			t.Fatalf("Marshal(dst with %d spare bytes): %v", spare, err)
		}
		if !bytes.HasPrefix(out, prefix) {
			t.Fatalf("Marshal(dst with %d spare bytes) changed the bytes already in dst: got %q, want prefix %q", spare, out[:min(len(out), len(prefix))], prefix)
		}
		got, err := s.decode(out[len(prefix):])
		if err != nil {
			t.Fatalf("Unmarshal of what Marshal appended: %v", err)
		}
		if d := diff(s.sample, got); d != "" {
			t.Errorf("Unmarshal of what Marshal appended differs from sample (-want +got):\n%s", d)
		}
	}
}

// doesNotKeepDst checks that later calls do not write into an earlier dst.
func (s *suite) doesNotKeepDst(t *testing.T) {
	out, err := s.c.Marshal(make([]byte, 0, 4096), s.sample)
	if err != nil {
		t.Fatalf("Marshal: %v", err)
	}
	saved := bytes.Clone(out)
	for range 10 {
		b, err := s.c.Marshal(nil, s.sample)
		if err != nil {
			t.Fatalf("Marshal: %v", err)
		}
		if _, err := s.decode(b); err != nil {
			t.Fatalf("Unmarshal: %v", err)
		}
	}
	if !bytes.Equal(out, saved) {
		t.Errorf("the output of an earlier Marshal changed during later calls: Marshal keeps dst")
	}
}

func (s *suite) doesNotKeepInput(t *testing.T) {
	in := bytes.Clone(s.enc)
	got, err := s.decode(in)
	if err != nil {
		t.Fatalf("Unmarshal: %v", err)
	}
	for i := range in {
		in[i] = 0xFF
	}
	if d := diff(s.sample, got); d != "" {
		t.Errorf("overwriting the input after Unmarshal changed the decoded value: Unmarshal must copy what it keeps (-want +got):\n%s", d)
	}
}

func (s *suite) badTarget(t *testing.T) {
	typedNil := reflect.Zero(reflect.TypeOf(s.sample)).Interface()
	nonPointer := reflect.ValueOf(s.newValue()).Elem().Interface()
	for _, c := range []struct {
		name string
		v    any
	}{{"nil", nil}, {"typed nil pointer", typedNil}, {"non-pointer", nonPointer}} {
		err, panicked := s.unmarshal(s.enc, c.v)
		if panicked != nil {
			t.Errorf("Unmarshal into %s (%T) panicked: %v", c.name, c.v, panicked)
		} else if err == nil {
			t.Errorf("Unmarshal into %s (%T) returned no error", c.name, c.v)
		}
	}
}

// truncated decodes every proper prefix of the encoding. Whether a prefix
// is an error depends on the format (a protobuf message cut between two
// fields is valid; JSON without its trailing newline is the same value), so
// only panics fail; a codec's own tests should check its errors.
func (s *suite) truncated(t *testing.T) {
	for n := range len(s.enc) {
		if _, panicked := s.unmarshal(bytes.Clone(s.enc[:n]), s.newValue()); panicked != nil {
			t.Fatalf("Unmarshal of the first %d of %d bytes panicked: %v\ninput: %x", n, len(s.enc), panicked, s.enc[:n])
		}
	}
}

// garbage feeds corrupted and random inputs; Unmarshal may accept some
// of them but must never panic, and must work normally afterwards.
func (s *suite) garbage(t *testing.T) {
	for _, in := range garbageInputs(s.enc) {
		if _, panicked := s.unmarshal(in, s.newValue()); panicked != nil {
			t.Fatalf("Unmarshal panicked: %v\ninput: %x", panicked, in)
		}
	}
	s.roundTrip(t)
}

func (s *suite) concurrent(t *testing.T) {
	const goroutines, iterations = 8, 50
	garbage := garbageInputs(s.enc)
	var wg sync.WaitGroup
	for g := range goroutines {
		wg.Go(func() {
			var buf []byte
			for i := range iterations {
				var err error
				if buf, err = s.c.Marshal(buf[:0], s.sample); err != nil {
					t.Errorf("Marshal: %v", err)
					return
				}
				got, err := s.decode(buf)
				if err != nil {
					t.Errorf("Unmarshal: %v", err)
					return
				}
				if d := diff(s.sample, got); d != "" {
					t.Errorf("concurrent round trip differs from sample (-want +got):\n%s", d)
					return
				}
				in := garbage[(g*iterations+i)%len(garbage)]
				if _, panicked := s.unmarshal(in, s.newValue()); panicked != nil {
					t.Errorf("Unmarshal panicked: %v\ninput: %x", panicked, in)
					return
				}
			}
		})
	}
	wg.Wait()
}

// decode unmarshals data into a new value, turning a panic into an error.
func (s *suite) decode(data []byte) (any, error) {
	v := s.newValue()
	err, panicked := s.unmarshal(data, v)
	if panicked != nil {
		return nil, fmt.Errorf("panic: %v", panicked)
	}
	return v, err
}

// unmarshal calls c.Unmarshal and recovers a panic, returning its value.
func (s *suite) unmarshal(data []byte, v any) (err error, panicked any) {
	defer func() {
		if p := recover(); p != nil {
			panicked = p
		}
	}()
	return s.c.Unmarshal(data, v), nil
}

// garbageInputs returns inputs derived from a valid encoding enc: every
// byte flipped in turn, bytes cut out, runs of 0xFF and 0x00, and random
// bytes from a fixed seed, so failures reproduce.
func garbageInputs(enc []byte) [][]byte {
	var ins [][]byte
	for i := range enc {
		for _, mask := range []byte{0x01, 0x80, 0xFF} {
			b := bytes.Clone(enc)
			b[i] ^= mask
			ins = append(ins, b)
		}
		ins = append(ins, append(bytes.Clone(enc[:i]), enc[i+1:]...))
	}
	ins = append(ins, append(bytes.Clone(enc), 0x00), append(bytes.Clone(enc), enc...))
	for _, n := range []int{1, 2, 8, 64} {
		ins = append(ins, bytes.Repeat([]byte{0xFF}, n), bytes.Repeat([]byte{0x00}, n))
	}
	r := rand.New(rand.NewPCG(1, 2))
	for range 200 {
		b := make([]byte, r.IntN(256))
		for i := range b {
			b[i] = byte(r.Uint32())
		}
		ins = append(ins, b)
	}
	return ins
}

// diff returns a human-readable difference between want and got, or "" if
// they are equal.
func diff(want, got any) string {
	return cmp.Diff(want, got,
		protocmp.Transform(),
		cmpopts.EquateEmpty(),
		cmp.Exporter(func(reflect.Type) bool { return true }))
}
