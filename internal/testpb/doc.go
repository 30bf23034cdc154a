// Package testpb holds small protobuf messages used by kiev's tests and
// benchmarks. It is internal: nothing outside this module may import it.
//
// testpb.pb.go is generated from testpb.proto and committed. To regenerate
// it, install protoc and protoc-gen-go v1.36.12
// (go install google.golang.org/protobuf/cmd/protoc-gen-go@v1.36.12) and
// run go generate in this directory.
package testpb

//go:generate protoc --go_out=. --go_opt=paths=source_relative testpb.proto
