module github.com/kievrpc/kiev/codec/internal/codecbench

go 1.26.0

require (
	github.com/kievrpc/kiev v0.1.0
	github.com/tinylib/msgp v1.6.5
	github.com/vmihailenco/msgpack/v5 v5.4.1
	google.golang.org/protobuf v1.36.12
)

require (
	github.com/philhofer/fwd v1.2.0 // indirect
	github.com/vmihailenco/tagparser/v2 v2.0.0 // indirect
)

