package main

import (
	"log"
	"os"

	"github.com/cloudwego/kitex/pkg/klog"
	arpclog "github.com/lesismal/arpc/log"
	rpcxlog "github.com/smallnest/rpcx/log"
)

// quietLogs keeps the peers' logs off stdout, which carries the processes'
// protocol (rpcx and arpc log to it by default), and keeps errors only;
// arpc logs none, since it logs a client's own Stop as an error. A call
// that fails is counted, and its error reported, by the load generator.
func quietLogs() {
	rpcxlog.SetLogger(rpcxlog.NewDefaultLogger(os.Stderr, "rpcx: ", log.LstdFlags, rpcxlog.LvError))
	arpclog.Output = os.Stderr
	arpclog.SetLevel(arpclog.LevelNone)
	klog.SetOutput(os.Stderr)
	klog.SetLevel(klog.LevelError)
}
