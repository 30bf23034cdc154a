package main

import (
	"runtime/metrics"
	"syscall"
	"time"
)

// procStats are a process's cumulative counters: what a measured window
// costs is the difference of two of them.
type procStats struct {
	Allocs uint64        // heap objects allocated
	Bytes  uint64        // heap bytes allocated
	CPU    time.Duration // user and system CPU time
}

var procSamples = []metrics.Sample{
	{Name: "/gc/heap/allocs:objects"},
	{Name: "/gc/heap/allocs:bytes"},
}

// readProcStats reads the counters of this process. runtime/metrics flushes
// every P's allocation counts, without stopping the world.
func readProcStats() procStats {
	s := make([]metrics.Sample, len(procSamples))
	copy(s, procSamples)
	metrics.Read(s)
	var ru syscall.Rusage
	_ = syscall.Getrusage(syscall.RUSAGE_SELF, &ru)
	return procStats{
		Allocs: s[0].Value.Uint64(),
		Bytes:  s[1].Value.Uint64(),
		CPU:    time.Duration(ru.Utime.Nano() + ru.Stime.Nano()),
	}
}

func (a procStats) sub(b procStats) procStats {
	return procStats{Allocs: a.Allocs - b.Allocs, Bytes: a.Bytes - b.Bytes, CPU: a.CPU - b.CPU}
}
