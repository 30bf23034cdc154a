package main

import (
	"encoding/json"
	"testing"

	"github.com/kievrpc/kiev/reflection"
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
	var infos []reflection.ServiceInfo
	if err := json.Unmarshal([]byte(stdout), &infos); err != nil {
		t.Fatalf("--json printed no []reflection.ServiceInfo: %v\n%s", err, stdout)
	}
	if len(infos) != 1 || infos[0].Name != "Shop" || len(infos[0].Methods) != 3 ||
		infos[0].Methods[1].Args.Fields[1].Shape.Elem.Kind != "recursive" {
		t.Errorf("--json printed %+v; want Shop with 3 methods, Tree's kids recursive", infos)
	}

	wantRun(t, exitFailed, nil, []string{`kiev describe: ` + addr + `: unknown service "Nope"; the server has Shop`}, "describe", addr, "Nope")
	wantRun(t, exitOK, []string{"kiev.Reflection.List(struct{}) []ServiceInfo{name string, methods []MethodInfo{"}, nil, "describe", addr, reflection.ServiceName)
}

func TestShapeString(t *testing.T) {
	str := reflection.TypeShape{Type: "string", Kind: "string"}
	for _, tc := range []struct {
		shape reflection.TypeShape
		want  string
	}{
		{reflection.TypeShape{Type: "map[int32][4]main.Ok", Kind: "map", Key: &reflection.TypeShape{Type: "int32", Kind: "int"},
			Elem: &reflection.TypeShape{Type: "[4]main.Ok", Kind: "array", Len: 4, Elem: &reflection.TypeShape{Type: "main.Ok", Kind: "bool"}}},
			"map[int32][4]bool"},
		{reflection.TypeShape{Type: "[16]uint8", Kind: "bytes", Len: 16}, "[16]byte"},
		{reflection.TypeShape{Type: "[]uint8", Kind: "bytes"}, "[]byte"},
		{reflection.TypeShape{Type: "time.Time", Kind: "time"}, "time.Time"},
		{reflection.TypeShape{Type: "time.Duration", Kind: "int"}, "int"},
		{reflection.TypeShape{Type: "net.IP", Kind: "string"}, "string"},
		{reflection.TypeShape{Type: "interface {}", Kind: "any"}, "any"},
		{reflection.TypeShape{Type: "pkg.Money", Kind: "custom"}, "Money"},
		{reflection.TypeShape{Type: "main.Deep", Kind: "truncated"}, "Deep{…}"},
		{reflection.TypeShape{Type: "struct { A string }", Kind: "struct", Fields: []reflection.FieldShape{{Name: "A", Shape: str}}}, "struct{A string}"},
		{reflection.TypeShape{Type: "main.G[main.T]", Kind: "struct"}, "G[T]{}"},
		{reflection.TypeShape{Type: "chan int", Kind: "unsupported"}, "chan int"},
		{reflection.TypeShape{Type: "[]int", Kind: "slice"}, "[]?"},
	} {
		if got := shapeString(tc.shape); got != tc.want {
			t.Errorf("shapeString(%+v) = %q; want %q", tc.shape, got, tc.want)
		}
	}
}
