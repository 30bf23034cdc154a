package main

import (
	"bytes"
	"encoding/json"
	"math"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/kievrpc/kiev/reflection"
)

func TestCall(t *testing.T) {
	addr := serve(t)
	stdout, stderr := wantRun(t, exitOK, nil, nil, "call", addr, "Shop.Place",
		`{"id": 42, "customer": {"Name": "Ada", "Address": {"city": "Kyiv"}},
		  "items": [{"sku": "a", "qty": 2, "price": 1.5}, {"sku": "b", "qty": 1, "price": 10}],
		  "discount": 1}`)
	if stderr != "" {
		t.Errorf("stderr: %s", stderr)
	}
	var got map[string]any
	if err := json.Unmarshal([]byte(stdout), &got); err != nil {
		t.Fatalf("stdout is not JSON: %v\n%s", err, stdout)
	}
	want := map[string]any{"order_id": 42.0, "total": 12.0, "city": "Kyiv", "meta": nil, "priority": 5.0}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("reply differs (-want +got):\n%s", diff)
	}
	if !strings.HasPrefix(stdout, "{\n  \"") {
		t.Errorf("reply is not indented JSON:\n%s", stdout)
	}
}

func TestCallMetaAndPriority(t *testing.T) {
	addr := serve(t)
	// Flags before and after the positional arguments.
	stdout, _ := wantRun(t, exitOK, nil, nil, "call", "--meta", "trace-id=abc", "--priority", "9", addr,
		"Shop.Place", `{"id": 1}`, "--meta", "user=a=b", "--timeout=5s")
	var got struct {
		Meta     map[string]string `json:"meta"`
		Priority int               `json:"priority"`
	}
	if err := json.Unmarshal([]byte(stdout), &got); err != nil {
		t.Fatal(err)
	}
	if got.Meta["trace-id"] != "abc" || got.Meta["user"] != "a=b" || got.Priority != 9 {
		t.Errorf("handler saw metadata %v and priority %d; want trace-id=abc, user=a=b and 9", got.Meta, got.Priority)
	}
}

func TestCallTimeout(t *testing.T) {
	addr := serve(t)
	start := time.Now()
	wantRun(t, exitFailed, nil, []string{"kiev call: Shop.Wait: no reply within the deadline of 100ms; raise --timeout"},
		"call", "--timeout", "100ms", addr, "Shop.Wait")
	if took := time.Since(start); took > 5*time.Second {
		t.Errorf("call with --timeout 100ms took %v", took)
	}
}

func TestCallErrors(t *testing.T) {
	addr := serve(t)
	for _, tc := range []struct {
		code int
		args []string
		want []string
	}{
		{exitFailed, []string{"call", addr, "Shop.Nope", "{}"}, []string{`kiev call: Shop.Nope: NotFound: service "Shop" has no method "Nope"`}},
		{exitFailed, []string{"call", addr, "Nope.Place", "{}"}, []string{`NotFound: unknown service "Nope"`}},
		{exitFailed, []string{"call", addr, "Shop.Place", "{}"}, []string{"kiev call: Shop.Place: code 100: order has no id"}},
		{exitFailed, []string{"call", addr, "Shop.Place", `{"id": "x"}`}, []string{"Shop.Place: BadRequest:"}},
		{exitUsage, []string{"call", addr, "Shop.Place", `{"id": 1,}`}, []string{"not valid JSON", "line 1, column 10", `{"id": 1,}`, "         ^"}},
		{exitUsage, []string{"call", addr, "Shop.Place", "{\"id\": 1,\n \"items\": [}"}, []string{"line 2, column 12"}},
		{exitUsage, []string{"call", addr, "Shop.Place", `{"id": 1`}, []string{"end too soon", "line 1"}},
		{exitUsage, []string{"call", addr, "Shop.Place", `{} {}`}, []string{"more than one value; wrap them", "line 1, column 4"}},
		{exitUsage, []string{"call", addr, "Shop.Place", ``}, []string{"empty; pass null"}},
		{exitFailed, []string{"call", "127.0.0.1:1", "Shop.Place", "{}"}, []string{"kiev call: cannot connect to 127.0.0.1:1", "is the server running there?"}},
	} {
		wantRun(t, tc.code, nil, tc.want, tc.args...)
	}
}

func TestParseJSONArgs(t *testing.T) {
	v, err := parseJSONArgs([]byte(`{"i": 7, "neg": -3, "f": 1.5, "e": 1e3, "big": 18446744073709551615, "nested": [{"x": 2.0}], "s": "7"}`))
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]any{"i": int64(7), "neg": int64(-3), "f": 1.5, "e": int64(1000), "big": uint64(math.MaxUint64),
		"nested": []any{map[string]any{"x": int64(2)}}, "s": "7"}
	if diff := cmp.Diff(want, v); diff != "" {
		t.Errorf("parseJSONArgs differs (-want +got):\n%s", diff)
	}
}

func TestJSONable(t *testing.T) {
	got := jsonable(map[string]any{"m": map[any]any{int64(1): "a"}, "nan": math.NaN(), "l": []any{math.Inf(1)}})
	b, err := json.Marshal(got)
	if err != nil {
		t.Fatal(err)
	}
	if want := `{"l":["+Inf"],"m":{"1":"a"},"nan":"NaN"}`; string(b) != want {
		t.Errorf("jsonable gives %s; want %s", b, want)
	}
}

// TestCallKeysIgnoreCase checks that JSON keys find their fields as with
// encoding/json: exactly, or else without regard to case. The keys went
// to the server as they were, and a key in another case filled nothing.
func TestCallKeysIgnoreCase(t *testing.T) {
	addr := serve(t)
	stdout, stderr := wantRun(t, exitOK, nil, nil, "call", addr, "Shop.Place",
		`{"ID": 42, "Customer": {"name": "Ada", "address": {"City": "Kyiv"}},
		  "ITEMS": [{"Sku": "a", "Qty": 2, "PRICE": 1.5}], "notes": {"Gift": "yes"}}`)
	if stderr != "" {
		t.Errorf("stderr: %s", stderr)
	}
	var got map[string]any
	if err := json.Unmarshal([]byte(stdout), &got); err != nil {
		t.Fatalf("stdout is not JSON: %v\n%s", err, stdout)
	}
	if got["order_id"] != 42.0 || got["total"] != 3.0 || got["city"] != "Kyiv" {
		t.Errorf("reply %v; want order_id 42, total 3, city Kyiv", got)
	}

	stdout, _ = wantRun(t, exitOK, nil, nil, "call", addr, "Shop.Tree", `{"name": "a", "KIDS": [{"NAME": "b"}]}`)
	if want := `{"Name":"a","kids":[{"Name":"b"}]}`; compact(t, stdout) != want {
		t.Errorf("Shop.Tree replied %s; want %s", compact(t, stdout), want)
	}
}

// TestCallUnknownKeys checks that a key that names no field is an error
// that lists the fields; it was dropped without a word.
func TestCallUnknownKeys(t *testing.T) {
	addr := serve(t)
	for _, tc := range []struct {
		json string
		want string
	}{
		{`{"id": 1, "nmae": "x"}`, `kiev call: Shop.Place: the JSON arguments have a key "nmae", which is no field of the arguments (Order); its fields are id, customer, items, Notes, discount`},
		{`{"id": 1, "customer": {"Nmae": "x"}}`, `key "Nmae", which is no field of customer (Customer); its fields are Name, Address`},
		{`{"id": 1, "items": [{"sku": "a"}, {"skus": "b"}]}`, `key "skus", which is no field of items[1] (Item); its fields are sku, qty, price`},
		{`{"id": 1, "ID": 2}`, `the JSON arguments fill field id twice, with "ID" and "id"; keep one`},
	} {
		wantRun(t, exitUsage, nil, []string{tc.want}, "call", addr, "Shop.Place", tc.json)
	}
	wantRun(t, exitUsage, nil, []string{`key "nam", which is no field of kids[0].kids[0] (Node); its fields are Name, kids`},
		"call", addr, "Shop.Tree", `{"Name": "a", "kids": [{"kids": [{"nam": "c"}]}]}`)
	wantRun(t, exitUsage, nil, []string{`key "x", but the arguments (struct) has no fields; pass {}`}, "call", addr, "Shop.Wait", `{"x": 1}`)
}

func TestFitArgs(t *testing.T) {
	str := reflection.TypeShape{Type: "string", Kind: "string"}
	shape := reflection.TypeShape{Type: "main.T", Kind: "struct", Fields: []reflection.FieldShape{
		{Name: "ID", Shape: reflection.TypeShape{Type: "int", Kind: "int"}},
		{Name: "Id", Shape: str}, // encoding/json gives a key "id" to the first
		{Name: "Any", Shape: reflection.TypeShape{Type: "interface {}", Kind: "any"}},
		{Name: "Deep", Shape: reflection.TypeShape{Type: "main.D", Kind: "truncated"}},
		{Name: "ByKey", Shape: reflection.TypeShape{Type: "map[string]main.T", Kind: "map", Key: &str,
			Elem: &reflection.TypeShape{Type: "main.T", Kind: "recursive"}}},
	}}
	for _, tc := range []struct {
		in, want string
	}{
		{`{"ID": 1, "Id": "a"}`, `{"ID": 1, "Id": "a"}`},
		{`{"id": 1}`, `{"ID": 1}`},
		{`{"any": {"whatever": 1}, "DEEP": {"as": "is"}}`, `{"Any": {"whatever": 1}, "Deep": {"as": "is"}}`},
		{`{"bykey": {"K": {"id": 2}}}`, `{"ByKey": {"K": {"ID": 2}}}`},
		{`null`, `null`},
		{`[1, 2]`, `[1, 2]`}, // the server says what is wrong
	} {
		in, err := parseJSONArgs([]byte(tc.in))
		if err != nil {
			t.Fatal(err)
		}
		got, err := fitArgs(in, shape)
		if err != nil {
			t.Errorf("fitArgs(%s): %v", tc.in, err)
			continue
		}
		want, _ := parseJSONArgs([]byte(tc.want))
		if diff := cmp.Diff(want, got); diff != "" {
			t.Errorf("fitArgs(%s) differs (-want +got):\n%s", tc.in, diff)
		}
	}
}

// compact returns the JSON text s without its spaces.
func compact(t *testing.T, s string) string {
	t.Helper()
	var b bytes.Buffer
	if err := json.Compact(&b, []byte(s)); err != nil {
		t.Fatalf("not JSON: %v\n%s", err, s)
	}
	return b.String()
}
