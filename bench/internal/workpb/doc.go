// Package workpb holds the protobuf messages and the grpc-go service of
// the overload benchmark's Work method.
//
// work.pb.go and work_grpc.pb.go are generated from work.proto and
// committed. To regenerate them, install protoc, protoc-gen-go v1.36.12
// and protoc-gen-go-grpc v1.6.2:
//
//	go install google.golang.org/protobuf/cmd/protoc-gen-go@v1.36.12
//	go install google.golang.org/grpc/cmd/protoc-gen-go-grpc@v1.6.2
//
// and run go generate in this directory.
package workpb

//go:generate protoc --go_out=. --go_opt=paths=source_relative --go-grpc_out=. --go-grpc_opt=paths=source_relative work.proto
