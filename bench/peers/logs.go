package main

import (
	"log"
	"os"

	"github.com/cloudwego/kitex/pkg/klog"
	arpclog "github.com/lesismal/arpc/log"
	rpcxlog "github.com/smallnest/rpcx/log"
)

// quietLogs keeps the peers' logs off stdout, which carries the processes'
// protocol (rpcx and arpc log to it by default), and keeps errors only.
func quietLogs() {
	rpcxlog.SetLogger(rpcxlog.NewDefaultLogger(os.Stderr, "rpcx: ", log.LstdFlags, rpcxlog.LvError))
	arpclog.Output = os.Stderr
	arpclog.SetLevel(arpclog.LevelError)
	klog.SetOutput(os.Stderr)
	klog.SetLevel(klog.LevelError)
}
