package loadgen

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"runtime/metrics"
	"syscall"
	"time"
)

// Stats are a process's cumulative counters: what a measured window
// costs is the difference of two of them.
type Stats struct {
	Allocs uint64        // heap objects allocated
	Bytes  uint64        // heap bytes allocated
	CPU    time.Duration // user and system CPU time
}

var procSamples = []metrics.Sample{
	{Name: "/gc/heap/allocs:objects"},
	{Name: "/gc/heap/allocs:bytes"},
}

// ReadStats reads the counters of this process. runtime/metrics flushes
// every P's allocation counts, without stopping the world.
func ReadStats() Stats {
	s := make([]metrics.Sample, len(procSamples))
	copy(s, procSamples)
	metrics.Read(s)
	var ru syscall.Rusage
	_ = syscall.Getrusage(syscall.RUSAGE_SELF, &ru)
	return Stats{
		Allocs: s[0].Value.Uint64(),
		Bytes:  s[1].Value.Uint64(),
		CPU:    time.Duration(ru.Utime.Nano() + ru.Stime.Nano()),
	}
}

// Sub returns a less b.
func (a Stats) Sub(b Stats) Stats {
	return Stats{Allocs: a.Allocs - b.Allocs, Bytes: a.Bytes - b.Bytes, CPU: a.CPU - b.CPU}
}

// StatsHandler serves a process's Stats as JSON on GET /stats, for the
// server process's control listener.
func StatsHandler() http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("GET /stats", func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		json.NewEncoder(w).Encode(ReadStats())
	})
	return mux
}

// FetchStats reads a server process's counters from its control address.
func FetchStats(ctx context.Context, c *http.Client, addr string) (Stats, error) {
	var st Stats
	req, err := http.NewRequestWithContext(ctx, "GET", "http://"+addr+"/stats", nil)
	if err != nil {
		return st, err
	}
	resp, err := c.Do(req)
	if err != nil {
		return st, fmt.Errorf("reading the server's counters: %w", err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return st, errors.New("reading the server's counters: " + resp.Status)
	}
	return st, json.NewDecoder(resp.Body).Decode(&st)
}
