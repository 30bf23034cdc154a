// Package echopb holds the protobuf messages and the grpc-go service of the
// comparison benchmark, bench/compare.
//
// echo.pb.go and echo_grpc.pb.go are generated from echo.proto and
// committed. To regenerate them, install protoc (Debian package
// protobuf-compiler), protoc-gen-go v1.36.12 and protoc-gen-go-grpc v1.6.2:
//
//	go install google.golang.org/protobuf/cmd/protoc-gen-go@v1.36.12
//	go install google.golang.org/grpc/cmd/protoc-gen-go-grpc@v1.6.2
//
// and run go generate in this directory.
package echopb

//go:generate protoc --go_out=. --go_opt=paths=source_relative --go-grpc_out=. --go-grpc_opt=paths=source_relative echo.proto
