package reflection_test

import (
	"context"
	"errors"
	"reflect"
	"testing"

	"github.com/kievrpc/kiev/reflection"
)

type args struct {
	A    int `msgpack:"a"`
	Skip int `msgpack:"-"`
}

// fakeServer has one service, Calc, with one method.
type fakeServer struct{}

func (fakeServer) Services() []string { return []string{"Calc"} }

func (fakeServer) Methods(name string) ([]reflection.Method, bool) {
	if name != "Calc" {
		return nil, false
	}
	return []reflection.Method{
		{Name: "Sub", Args: reflect.TypeFor[args](), Reply: reflect.TypeFor[*int]()},
		{Name: "Add", Args: reflect.TypeFor[args](), Reply: reflect.TypeFor[*int]()},
	}, true
}

var errNope = errors.New("no such service")

func (fakeServer) NotFound(string) error { return errNope }

// The service describes what its Server reports, methods sorted by name,
// with the fields' wire names; and answers NotFound's error for a service
// the server lacks.
func TestServiceDescribesItsServer(t *testing.T) {
	svc := reflection.NewService(fakeServer{})
	var infos []reflection.ServiceInfo
	if err := svc.List(context.Background(), struct{}{}, &infos); err != nil {
		t.Fatal(err)
	}
	if len(infos) != 1 || infos[0].Name != "Calc" || len(infos[0].Methods) != 2 || infos[0].Methods[0].Name != "Add" {
		t.Fatalf("List = %+v; want Calc with Add, Sub", infos)
	}
	add := infos[0].Methods[0]
	if f := add.Args.Fields; add.Args.Kind != "struct" || len(f) != 1 || f[0].Name != "a" || add.Reply.Kind != "int" {
		t.Errorf("Add = %+v; want args {a int}, reply int", add)
	}
	var info reflection.ServiceInfo
	if err := svc.Describe(context.Background(), "Nope", &info); !errors.Is(err, errNope) {
		t.Errorf("Describe(Nope) = %v; want the server's NotFound error", err)
	}
}

// Fits tells a client's shape that the codec decodes into the server's
// from one it cannot, and says where they part.
func TestFits(t *testing.T) {
	type mine struct{ A int64 }
	type theirs struct{ A string }
	here := reflection.ShapeOf(reflect.TypeFor[mine]())
	if _, _, _, ok := reflection.Fits(here, reflection.ShapeOf(reflect.TypeFor[struct{ A uint8 }]()), "argument"); !ok {
		t.Error("an int64 field does not fit a uint8 one; want it to, as the codec decodes it")
	}
	where, from, to, ok := reflection.Fits(here, reflection.ShapeOf(reflect.TypeFor[theirs]()), "argument")
	if ok || where != "argument field A" || from.Kind != "int" || to.Kind != "string" {
		t.Errorf("Fits = %q, %v, %v, %v; want a misfit at argument field A, int against string", where, from, to, ok)
	}
}
