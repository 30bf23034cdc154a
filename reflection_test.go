package kiev_test

import (
	"context"
	"errors"
	"net"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/kievrpc/kiev"
	"github.com/kievrpc/kiev/codec"
	"github.com/kievrpc/kiev/reflection"
)

// ReflShop is a service whose types exercise every kind of TypeShape.
type ReflShop struct{}

type ReflOrder struct {
	ID     int64             `json:"id"`
	Items  []ReflItem        `json:"items"`
	Notes  map[string]string `json:"notes,omitempty"`
	Ship   *ReflAddress
	At     time.Time
	Blob   []byte
	Extra  any
	Skip   string `json:"-"`
	hidden int
	ReflMeta
	Wire  string `msgpack:"w" json:"j"`
	Grid  [2][3]float64
	Tags  map[uint16][]string
	IP    net.IP
	Took  time.Duration
	Ready bool
}

type ReflItem struct {
	SKU string `json:"sku"`
	Qty uint   `json:"qty"`
}

type ReflAddress struct{ City string }

// ReflMeta is embedded in ReflOrder: its fields join ReflOrder's.
type ReflMeta struct {
	Trace string `json:"trace"`
}

type ReflReceipt struct {
	Total float64
}

// ReflNode refers to itself.
type ReflNode struct {
	Name     string
	Children []*ReflNode
	Next     *ReflNode
}

// ReflDeep nests deeper than a description goes.
type ReflDeep [][][][][][][][][][][][][][][][][][][][]int

func (ReflShop) Place(ctx context.Context, o *ReflOrder, r *ReflReceipt) error { return nil }

func (ReflShop) Tree(n ReflNode, r *ReflNode) error { return nil }

func (ReflShop) Deep(d ReflDeep, r *int) error { return nil }

func reflectionClient(t *testing.T) *kiev.Client {
	t.Helper()
	srv := kiev.NewServer()
	if err := srv.Register(ReflShop{}); err != nil {
		t.Fatal(err)
	}
	if err := srv.Register(&Arith{}); err != nil {
		t.Fatal(err)
	}
	return dial(t, startServer(t, srv))
}

func scalar(typ, kind string) reflection.TypeShape {
	return reflection.TypeShape{Type: typ, Kind: kind}
}

func field(name string, s reflection.TypeShape) reflection.FieldShape {
	return reflection.FieldShape{Name: name, Shape: s}
}

func ref(s reflection.TypeShape) *reflection.TypeShape { return &s }

func TestReflectionDescribe(t *testing.T) {
	c := reflectionClient(t)
	var info reflection.ServiceInfo
	if err := c.Call(context.Background(), "kiev.Reflection.Describe", "ReflShop", &info); err != nil {
		t.Fatal(err)
	}
	node := reflection.TypeShape{Type: "kiev_test.ReflNode", Kind: "struct", Fields: []reflection.FieldShape{
		field("Name", scalar("string", "string")),
		field("Children", reflection.TypeShape{Type: "[]*kiev_test.ReflNode", Kind: "slice", Elem: ref(scalar("kiev_test.ReflNode", "recursive"))}),
		field("Next", scalar("kiev_test.ReflNode", "recursive")),
	}}
	order := reflection.TypeShape{Type: "kiev_test.ReflOrder", Kind: "struct", Fields: []reflection.FieldShape{
		field("id", scalar("int64", "int")),
		field("items", reflection.TypeShape{Type: "[]kiev_test.ReflItem", Kind: "slice", Elem: &reflection.TypeShape{
			Type: "kiev_test.ReflItem", Kind: "struct", Fields: []reflection.FieldShape{
				field("sku", scalar("string", "string")),
				field("qty", scalar("uint", "uint")),
			}}}),
		field("notes", reflection.TypeShape{Type: "map[string]string", Kind: "map", Key: ref(scalar("string", "string")), Elem: ref(scalar("string", "string"))}),
		field("Ship", reflection.TypeShape{Type: "kiev_test.ReflAddress", Kind: "struct", Fields: []reflection.FieldShape{field("City", scalar("string", "string"))}}),
		field("At", scalar("time.Time", "time")),
		field("Blob", scalar("[]uint8", "bytes")),
		field("Extra", scalar("interface {}", "any")),
		field("trace", scalar("string", "string")),
		field("w", scalar("string", "string")),
		field("Grid", reflection.TypeShape{Type: "[2][3]float64", Kind: "array", Len: 2, Elem: &reflection.TypeShape{
			Type: "[3]float64", Kind: "array", Len: 3, Elem: ref(scalar("float64", "float"))}}),
		field("Tags", reflection.TypeShape{Type: "map[uint16][]string", Kind: "map", Key: ref(scalar("uint16", "uint")),
			Elem: &reflection.TypeShape{Type: "[]string", Kind: "slice", Elem: ref(scalar("string", "string"))}}),
		field("IP", scalar("net.IP", "string")),
		field("Took", scalar("time.Duration", "int")),
		field("Ready", scalar("bool", "bool")),
	}}
	deep := info.Methods[0].Args
	for range 17 {
		if deep.Kind != "slice" || deep.Elem == nil {
			t.Fatalf("Deep's shape ends early, at %+v", deep)
		}
		deep = *deep.Elem
	}
	if deep.Kind != "truncated" {
		t.Errorf("Deep's shape 17 levels down is %+v; want kind truncated", deep)
	}
	info.Methods[0].Args = reflection.TypeShape{}
	want := reflection.ServiceInfo{Name: "ReflShop", Methods: []reflection.MethodInfo{
		{Name: "Deep", Reply: scalar("int", "int")},
		{Name: "Place", Args: order, Reply: reflection.TypeShape{Type: "kiev_test.ReflReceipt", Kind: "struct",
			Fields: []reflection.FieldShape{field("Total", scalar("float64", "float"))}}},
		{Name: "Tree", Args: node, Reply: node},
	}}
	if diff := cmp.Diff(want, info); diff != "" {
		t.Errorf("Describe(ReflShop) differs (-want +got):\n%s", diff)
	}
}

// The field names a description gives must be the keys the msgpack codec
// writes.
func TestReflectionFieldNamesMatchCodec(t *testing.T) {
	c := reflectionClient(t)
	var info reflection.ServiceInfo
	if err := c.Call(context.Background(), "kiev.Reflection.Describe", "ReflShop", &info); err != nil {
		t.Fatal(err)
	}
	var shape reflection.TypeShape
	for _, m := range info.Methods {
		if m.Name == "Place" {
			shape = m.Args
		}
	}
	b, err := codec.Msgpack.Marshal(nil, ReflOrder{Notes: map[string]string{"k": "v"}}) // not omitted
	if err != nil {
		t.Fatal(err)
	}
	var wire map[string]any
	if err := codec.Msgpack.Unmarshal(b, &wire); err != nil {
		t.Fatal(err)
	}
	var got, want []string
	for _, f := range shape.Fields {
		got = append(got, f.Name)
	}
	for k := range wire {
		want = append(want, k)
	}
	slices.Sort(got)
	slices.Sort(want)
	if !slices.Equal(got, want) {
		t.Errorf("described fields %v; the codec writes %v", got, want)
	}
}

func TestReflectionList(t *testing.T) {
	c := reflectionClient(t)
	var infos []reflection.ServiceInfo
	if err := c.Call(context.Background(), "kiev.Reflection.List", struct{}{}, &infos); err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, in := range infos {
		names = append(names, in.Name)
	}
	if !slices.Equal(names, []string{"Arith", "ReflShop"}) {
		t.Fatalf("List names %v; want [Arith ReflShop], sorted, without %s", names, reflection.ServiceName)
	}
	var methods []string
	for _, m := range infos[0].Methods {
		methods = append(methods, m.Name)
	}
	if !slices.IsSorted(methods) || !slices.Contains(methods, "Add") || !slices.Contains(methods, "Mul") || methods[0] != "Add" {
		t.Errorf("Arith's methods are %v; want them sorted, Add first", methods)
	}
	add := infos[0].Methods[0]
	wantAdd := reflection.MethodInfo{Name: "Add",
		Args:  reflection.TypeShape{Type: "kiev_test.Args", Kind: "struct", Fields: []reflection.FieldShape{field("A", scalar("int", "int")), field("B", scalar("int", "int"))}},
		Reply: reflection.TypeShape{Type: "kiev_test.Reply", Kind: "struct", Fields: []reflection.FieldShape{field("C", scalar("int", "int"))}},
	}
	if diff := cmp.Diff(wantAdd, add); diff != "" {
		t.Errorf("Arith.Add differs (-want +got):\n%s", diff)
	}

	// A nil argument decodes as the empty struct.
	if err := c.Call(context.Background(), "kiev.Reflection.List", nil, &infos); err != nil || len(infos) != 2 {
		t.Errorf("List(nil) = %d services, %v; want 2, nil", len(infos), err)
	}
}

func TestReflectionDescribeUnknown(t *testing.T) {
	c := reflectionClient(t)
	err := c.Call(context.Background(), "kiev.Reflection.Describe", "Nope", &reflection.ServiceInfo{})
	if !errors.Is(err, kiev.ErrNotFound) || !strings.Contains(err.Error(), `"Nope"`) || !strings.Contains(err.Error(), "Arith, ReflShop") {
		t.Errorf("Describe(Nope) = %v; want ErrNotFound naming Nope and the services Arith, ReflShop", err)
	}
	err = c.Call(context.Background(), "kiev.Reflection.Nope", nil, nil)
	if !errors.Is(err, kiev.ErrNotFound) || !strings.Contains(err.Error(), `no method "Nope"`) {
		t.Errorf("kiev.Reflection.Nope = %v; want ErrNotFound saying there is no such method", err)
	}
}

// The reflection service describes itself, and a server with nothing
// registered still has it.
func TestReflectionDescribesItself(t *testing.T) {
	c := dial(t, startServer(t, kiev.NewServer()))
	var info reflection.ServiceInfo
	if err := c.Call(context.Background(), "kiev.Reflection.Describe", reflection.ServiceName, &info); err != nil {
		t.Fatal(err)
	}
	if len(info.Methods) != 2 || info.Methods[0].Name != "Describe" || info.Methods[1].Name != "List" ||
		info.Methods[1].Reply.Kind != "slice" || info.Methods[1].Reply.Elem.Type != "reflection.ServiceInfo" {
		t.Errorf("Describe(%s) = %+v; want Describe and List, List returning []reflection.ServiceInfo", reflection.ServiceName, info)
	}
	var infos []reflection.ServiceInfo
	if err := c.Call(context.Background(), "kiev.Reflection.List", struct{}{}, &infos); err != nil || len(infos) != 0 {
		t.Errorf("List on an empty server = %v, %v; want none", infos, err)
	}
	err := c.Call(context.Background(), "kiev.Reflection.Describe", "Arith", &info)
	if !errors.Is(err, kiev.ErrNotFound) || !strings.Contains(err.Error(), "no services") {
		t.Errorf("Describe(Arith) on an empty server = %v; want ErrNotFound saying it has no services", err)
	}
}

func TestReflectionDescribesStreamsAsStreams(t *testing.T) {
	_, c := startFeed(t, &Feed{})
	var info reflection.ServiceInfo
	if err := c.Call(context.Background(), "kiev.Reflection.Describe", "Feed", &info); err != nil {
		t.Fatal(err)
	}
	query := reflection.TypeShape{Type: "kiev_test.Query", Kind: "struct", Fields: []reflection.FieldShape{field("From", scalar("int", "int")), field("To", scalar("int", "int"))}}
	event := reflection.TypeShape{Type: "kiev_test.Event", Kind: "struct", Fields: []reflection.FieldShape{field("N", scalar("int", "int")), field("Text", scalar("string", "string"))}}
	chunk := reflection.TypeShape{Type: "kiev_test.Chunk", Kind: "struct", Fields: []reflection.FieldShape{field("Data", scalar("[]uint8", "bytes"))}}
	sum := reflection.TypeShape{Type: "kiev_test.Sum", Kind: "struct", Fields: []reflection.FieldShape{field("Chunks", scalar("int", "int")), field("Bytes", scalar("int", "int"))}}
	want := []reflection.MethodInfo{
		{Name: "Chat", Args: event, Reply: event, ClientStreaming: true, ServerStreaming: true},
		{Name: "Fail", Args: query, Reply: event, ServerStreaming: true},
		{Name: "Upload", Args: chunk, Reply: sum, ClientStreaming: true},
		{Name: "Watch", Args: query, Reply: event, ServerStreaming: true},
		{Name: "WatchPtr", Args: query, Reply: event, ServerStreaming: true}, // args by pointer
	}
	if diff := cmp.Diff(want, info.Methods); diff != "" {
		t.Errorf("Feed's methods differ (-want +got):\n%s", diff)
	}
	if _, err := kiev.NewMethod[Query, Event](context.Background(), c, "Feed.Watch"); err == nil || !strings.Contains(err.Error(), "Feed.Watch is a stream method; open it with Client.Stream") {
		t.Errorf("NewMethod of a stream method: %v; want an error that says to open it with Client.Stream", err)
	}
}
