package main

import (
	"encoding/json"
	"testing"

	"github.com/kievrpc/kiev"
)

func TestDescribe(t *testing.T) {
	addr := serve(t)
	want := `Shop.Place(Order{id int64, customer Customer{Name string, Address Address{city string}}, items []Item{sku string, qty int, price float64}, Notes map[string]string, discount float64}) Receipt{order_id int64, total float64, city string, meta map[string]string, priority int}
Shop.Tree(Node{Name string, kids []Node}) Node{Name string, kids []Node}
Shop.Wait(struct{}) int
`
	for _, args := range [][]string{{"describe", addr}, {"describe", addr, "Shop"}} {
		stdout, stderr, code := kievRun(t, args...)
		if code != exitOK || stdout != want || stderr != "" {
			t.Errorf("kiev %q: exit %d\nstdout:\n%s\nwant:\n%s\nstderr: %s", args, code, stdout, want, stderr)
		}
	}

	stdout, _ := wantRun(t, exitOK, nil, nil, "describe", "--json", addr)
	var infos []kiev.ServiceInfo
	if err := json.Unmarshal([]byte(stdout), &infos); err != nil {
		t.Fatalf("--json printed no []kiev.ServiceInfo: %v\n%s", err, stdout)
	}
	if len(infos) != 1 || infos[0].Name != "Shop" || len(infos[0].Methods) != 3 ||
		infos[0].Methods[1].Args.Fields[1].Shape.Elem.Kind != "recursive" {
		t.Errorf("--json printed %+v; want Shop with 3 methods, Tree's kids recursive", infos)
	}

	wantRun(t, exitFailed, nil, []string{`kiev describe: ` + addr + `: unknown service "Nope"; the server has Shop`}, "describe", addr, "Nope")
	wantRun(t, exitOK, []string{"kiev.Reflection.List(struct{}) []ServiceInfo{name string, methods []MethodInfo{"}, nil, "describe", addr, kiev.ReflectionService)
}

func TestShapeString(t *testing.T) {
	str := kiev.TypeShape{Type: "string", Kind: "string"}
	for _, tc := range []struct {
		shape kiev.TypeShape
		want  string
	}{
		{kiev.TypeShape{Type: "map[int32][4]main.Ok", Kind: "map", Key: &kiev.TypeShape{Type: "int32", Kind: "int"},
			Elem: &kiev.TypeShape{Type: "[4]main.Ok", Kind: "array", Len: 4, Elem: &kiev.TypeShape{Type: "main.Ok", Kind: "bool"}}},
			"map[int32][4]bool"},
		{kiev.TypeShape{Type: "[16]uint8", Kind: "bytes", Len: 16}, "[16]byte"},
		{kiev.TypeShape{Type: "[]uint8", Kind: "bytes"}, "[]byte"},
		{kiev.TypeShape{Type: "time.Time", Kind: "time"}, "time.Time"},
		{kiev.TypeShape{Type: "time.Duration", Kind: "int"}, "int"},
		{kiev.TypeShape{Type: "net.IP", Kind: "string"}, "string"},
		{kiev.TypeShape{Type: "interface {}", Kind: "any"}, "any"},
		{kiev.TypeShape{Type: "pkg.Money", Kind: "custom"}, "Money"},
		{kiev.TypeShape{Type: "main.Deep", Kind: "truncated"}, "Deep{…}"},
		{kiev.TypeShape{Type: "struct { A string }", Kind: "struct", Fields: []kiev.FieldShape{{Name: "A", Shape: str}}}, "struct{A string}"},
		{kiev.TypeShape{Type: "main.G[main.T]", Kind: "struct"}, "G[T]{}"},
		{kiev.TypeShape{Type: "chan int", Kind: "unsupported"}, "chan int"},
		{kiev.TypeShape{Type: "[]int", Kind: "slice"}, "[]?"},
	} {
		if got := shapeString(tc.shape); got != tc.want {
			t.Errorf("shapeString(%+v) = %q; want %q", tc.shape, got, tc.want)
		}
	}
}
