package kiev

import (
	"context"
	"errors"
	"reflect"
	"strings"
	"testing"
)

type DirectArgs struct {
	A, B int
	Name string
}

type DirectReply struct {
	Sum  int
	Text string
	Ctx  string
}

type ctxKey struct{}

// directPtr has pointer-receiver methods of every shape.
type directPtr struct{ base int }

func (s *directPtr) Add(ctx context.Context, a *DirectArgs, r *DirectReply) error {
	r.Sum = s.base + a.A + a.B
	r.Text = a.Name
	r.Ctx, _ = ctx.Value(ctxKey{}).(string)
	s.base++ // state kept across calls through a pointer receiver
	return nil
}

func (s *directPtr) NoCtx(a *DirectArgs, r *DirectReply) error {
	r.Sum = a.A * a.B
	return nil
}

func (s *directPtr) ByValue(ctx context.Context, a DirectArgs, r *int) error {
	*r = a.A - a.B
	return nil
}

func (s *directPtr) Fail(ctx context.Context, a *DirectArgs, r *DirectReply) error {
	return errors.New("failed: " + a.Name)
}

func (s *directPtr) Panic(ctx context.Context, a *DirectArgs, r *DirectReply) error {
	panic("boom " + a.Name)
}

// directValue has value-receiver methods with a large receiver: reflection
// copies it on every call, so changes do not last.
type directValue struct {
	pad  [64]byte
	base int
}

func (s directValue) Add(ctx context.Context, a *DirectArgs, r *DirectReply) error {
	s.base += 1000 // lost after the call, as with reflection
	r.Sum = s.base + a.A + a.B + int(s.pad[3])
	return nil
}

// directEmbedded gets Add by promotion from an embedded pointer.
type directEmbedded struct {
	*directPtr
}

// directGeneric is a generic service type.
type directGeneric[T any] struct{ last T }

func (s *directGeneric[T]) Add(ctx context.Context, a *DirectArgs, r *DirectReply) error {
	r.Sum = a.A + a.B + 7
	return nil
}

// TestDirectCallMatchesReflection calls every method shape twice, once
// directly and once through reflect.Value.Call, and requires the same
// reply, error, panic and receiver state.
func TestDirectCallMatchesReflection(t *testing.T) {
	ctx := context.WithValue(context.Background(), ctxKey{}, "seen")
	type result struct {
		reply any
		err   string
		panic string
		state any
	}
	run := func(t *testing.T, rcvr func() any, method string, direct bool) []result {
		r := rcvr()
		methods, _, err := buildService("S", r, true)
		if err != nil {
			t.Fatal(err)
		}
		m := methods[method]
		if m == nil {
			t.Fatalf("no method %s", method)
		}
		if !direct {
			m.direct = directCall{} // the reflection path
		}
		if m.direct.ok != direct && !(direct && !m.argIsPtr) {
			t.Fatalf("%s: direct path used = %v, want %v", method, m.direct.ok, direct)
		}
		var out []result
		for i := range 3 {
			argp := m.newArg()
			a := argp.Interface()
			switch a := a.(type) {
			case *DirectArgs:
				*a = DirectArgs{A: i, B: 10, Name: "n"}
			}
			replyp := m.newReply()
			var res result
			func() {
				defer func() {
					if p := recover(); p != nil {
						res.panic = p.(string)
					}
				}()
				if err := m.call(ctx, argp, replyp); err != nil {
					res.err = err.Error()
				}
			}()
			res.reply = replyp.Elem().Interface()
			res.state = m.rcvr.Interface()
			if p, ok := res.state.(*directPtr); ok {
				res.state = *p
			}
			if e, ok := res.state.(*directEmbedded); ok {
				res.state = *e.directPtr
			}
			out = append(out, res)
		}
		return out
	}
	cases := []struct {
		name   string
		rcvr   func() any
		method string
	}{
		{"pointer receiver with ctx", func() any { return &directPtr{base: 5} }, "Add"},
		{"pointer receiver without ctx", func() any { return &directPtr{} }, "NoCtx"},
		{"args by value (reflection)", func() any { return &directPtr{} }, "ByValue"},
		{"error", func() any { return &directPtr{} }, "Fail"},
		{"panic", func() any { return &directPtr{} }, "Panic"},
		{"value receiver", func() any { return directValue{pad: [64]byte{3: 9}, base: 1} }, "Add"},
		{"value receiver by pointer", func() any { return &directValue{base: 2} }, "Add"},
		{"promoted from embedded pointer", func() any { return &directEmbedded{&directPtr{base: 3}} }, "Add"},
		{"generic type", func() any { return &directGeneric[string]{} }, "Add"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			want := run(t, tc.rcvr, tc.method, false)
			got := run(t, tc.rcvr, tc.method, true)
			if !reflect.DeepEqual(got, want) {
				t.Errorf("direct call:\n%+v\nreflection:\n%+v", got, want)
			}
			if tc.method == "Add" && strings.Contains(tc.name, "ctx") && want[0].reply.(DirectReply).Ctx != "seen" {
				t.Errorf("the handler did not see the caller's context: %+v", want[0])
			}
		})
	}
}
