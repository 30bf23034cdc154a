package main

// The server process (`streams -serve`): every system on a 127.0.0.1:0
// listener of its own, in one process, and a control HTTP listener outside
// the systems under test, through which the client process reads the
// server's CPU time, heap, goroutines and its record of its streams. It
// prints one JSON line of serverAddrs and exits when stdin ends.

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"runtime"
	"strconv"
	"syscall"
	"time"
)

// serverAddrs is where each system listens.
type serverAddrs struct {
	Kiev       string `json:",omitempty"` // empty in a build without kiev streams
	KievBudget string `json:",omitempty"` // kiev with kievBigBudget
	GRPC       string
	Raw        string
	Control    string
}

// serverStats is what the control listener's /stats answers.
type serverStats struct {
	CPU        time.Duration // user and system CPU time of the process so far
	HeapInuse  uint64        // after runtime.GC, if asked with ?gc=1
	Goroutines int
	Watching   int64 // server-stream handlers running
	Chatting   int64 // bidirectional handlers running
}

func readStats(gc bool) serverStats {
	var st serverStats
	if gc {
		runtime.GC()
		var ms runtime.MemStats
		runtime.ReadMemStats(&ms)
		st.HeapInuse = ms.HeapInuse
	}
	st.CPU = cpuTime()
	st.Goroutines = runtime.NumGoroutine()
	st.Watching, st.Chatting = watching.Load(), chatting.Load()
	return st
}

// cpuTime is this process's user and system CPU time so far.
func cpuTime() time.Duration {
	var ru syscall.Rusage
	_ = syscall.Getrusage(syscall.RUSAGE_SELF, &ru)
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// serveMain is the server process.
func serveMain(stdin io.Reader, stdout io.Writer) error {
	var stops []func()
	defer func() {
		for _, s := range stops {
			s()
		}
	}()
	listen := func() (net.Listener, string, error) {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			return nil, "", err
		}
		return l, l.Addr().String(), nil
	}
	var addrs serverAddrs
	if startKiev != nil {
		for _, k := range []struct {
			addr   *string
			budget int
		}{{&addrs.Kiev, 0}, {&addrs.KievBudget, kievBigBudget}} {
			l, addr, err := listen()
			if err != nil {
				return err
			}
			stop, err := startKiev(l, k.budget)
			if err != nil {
				return err
			}
			stops, *k.addr = append(stops, stop), addr
		}
	}
	l, addr, err := listen()
	if err != nil {
		return err
	}
	stops, addrs.GRPC = append(stops, serveGRPC(l)), addr
	if l, addr, err = listen(); err != nil {
		return err
	}
	stops, addrs.Raw = append(stops, serveRaw(l)), addr
	if l, addr, err = listen(); err != nil {
		return err
	}
	hs := &http.Server{Handler: controlMux()}
	go hs.Serve(l)
	stops, addrs.Control = append(stops, func() { hs.Close() }), addr

	if err := json.NewEncoder(stdout).Encode(addrs); err != nil {
		return err
	}
	_, err = io.Copy(io.Discard, stdin) // until the coordinator is gone
	return err
}

func controlMux() *http.ServeMux {
	mux := http.NewServeMux()
	reply := func(w http.ResponseWriter, v any) {
		w.Header().Set("Content-Type", "application/json")
		json.NewEncoder(w).Encode(v)
	}
	span := func(r *http.Request) (int64, int64, error) {
		from, err1 := strconv.ParseInt(r.FormValue("from"), 10, 64)
		to, err2 := strconv.ParseInt(r.FormValue("to"), 10, 64)
		if err1 != nil || err2 != nil {
			return 0, 0, fmt.Errorf("want from and to: %v %v", err1, err2)
		}
		return from, to, nil
	}
	mux.HandleFunc("GET /stats", func(w http.ResponseWriter, r *http.Request) {
		reply(w, readStats(r.FormValue("gc") == "1"))
	})
	mux.HandleFunc("GET /sent", func(w http.ResponseWriter, r *http.Request) {
		from, to, err := span(r)
		if err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		reply(w, sentBetween(from, to))
	})
	mux.HandleFunc("GET /cancels", func(w http.ResponseWriter, r *http.Request) {
		from, to, err := span(r)
		if err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		reply(w, takeCancels(from, to))
	})
	return mux
}

// control is the client process's view of the server's control listener.
type control struct {
	addr string
	hc   *http.Client
}

func (c *control) get(ctx context.Context, path string, v any) error {
	req, err := http.NewRequestWithContext(ctx, "GET", "http://"+c.addr+path, nil)
	if err != nil {
		return err
	}
	resp, err := c.hc.Do(req)
	if err != nil {
		return fmt.Errorf("the server's control listener: %w", err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("the server's control listener: %s", resp.Status)
	}
	return json.NewDecoder(resp.Body).Decode(v)
}

func (c *control) stats(ctx context.Context, gc bool) (serverStats, error) {
	var st serverStats
	path := "/stats"
	if gc {
		path += "?gc=1"
	}
	return st, c.get(ctx, path, &st)
}

func (c *control) sent(ctx context.Context, from, to int64) (int64, error) {
	var n int64
	return n, c.get(ctx, fmt.Sprintf("/sent?from=%d&to=%d", from, to), &n)
}

func (c *control) cancels(ctx context.Context, from, to int64) (map[int64]int64, error) {
	var m map[int64]int64
	return m, c.get(ctx, fmt.Sprintf("/cancels?from=%d&to=%d", from, to), &m)
}
