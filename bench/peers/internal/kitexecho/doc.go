// Package kitexecho holds the thrift structs and, in echo/, the kitex
// service of the comparison benchmark, for the kitex peer of bench/peers.
//
// The Go code is generated from echo.thrift by kitex's tool, v0.16.3, and
// committed. To regenerate it, build the tool in a scratch module that
// requires github.com/cloudwego/kitex v0.16.3 (go install with @v0.16.3
// asks the module proxy for kitex's version list, which a proxy that
// serves only exact versions refuses):
//
//	go install github.com/cloudwego/kitex/tool/cmd/kitex
//
// then run, in bench/peers, in a copy of it whose go.mod holds only its
// module line (the tool checks the module's dependencies otherwise):
//
//	cp internal/kitexecho/echo.thrift . && kitex -module github.com/kievrpc/kiev/bench/peers -gen-path internal -no-dependency-check echo.thrift
package kitexecho
