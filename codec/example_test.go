package codec_test

import (
	"bytes"
	"encoding/json"
	"fmt"

	"github.com/kievrpc/kiev/codec"
)

// jsonCodec is a user codec: three methods make a codec.Codec.
type jsonCodec struct{}

func (jsonCodec) Name() string { return "json" }

func (jsonCodec) Marshal(dst []byte, v any) ([]byte, error) {
	buf := bytes.NewBuffer(dst)           // writes after dst's contents
	err := json.NewEncoder(buf).Encode(v) // adds a newline
	return buf.Bytes(), err
}

func (jsonCodec) Unmarshal(data []byte, v any) error {
	// encoding/json copies strings and byte slices out of data.
	return json.Unmarshal(data, v)
}

var _ codec.Codec = jsonCodec{}

// This example writes a JSON codec. Register it on a server with
// kiev.WithCodecs and select it on a client with kiev.WithCodec; check it
// with codectest.Run.
func Example_customCodec() {
	type point struct{ X, Y int }
	var c codec.Codec = jsonCodec{}

	b, err := c.Marshal([]byte("header:"), point{1, 2})
	if err != nil {
		panic(err)
	}
	fmt.Printf("%s", b)

	var p point
	if err := c.Unmarshal(b[len("header:"):], &p); err != nil {
		panic(err)
	}
	fmt.Printf("%s decoded %+v\n", c.Name(), p)
	// Output:
	// header:{"X":1,"Y":2}
	// json decoded {X:1 Y:2}
}

// This example shows the built-in codecs, which are constants.
func ExampleBuiltin() {
	b, err := codec.Msgpack.Marshal(nil, map[string]int{"answer": 42})
	if err != nil {
		panic(err)
	}
	var m map[string]int
	if err := codec.Msgpack.Unmarshal(b, &m); err != nil {
		panic(err)
	}
	fmt.Println(codec.Msgpack, len(b), "bytes:", m)
	// Output: msgpack 9 bytes: map[answer:42]
}
