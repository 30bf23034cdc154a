package kiev_test

import (
	"context"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"regexp"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/kievrpc/kiev"
)

// TestStatusChartsInBrowser loads the status page in headless Chromium,
// with scripts off and on, and finds every chart of the last 15 minutes
// drawn with the points of a running server's history.
func TestStatusChartsInBrowser(t *testing.T) {
	chromium := os.Getenv("KIEV_CHROMIUM")
	if chromium == "" {
		t.Skip("KIEV_CHROMIUM is not set; run scripts/services.sh up and eval \"$(scripts/services.sh env)\" to test the status page in headless Chromium")
	}
	srv := kiev.NewServer(kiev.WithLogger(slog.New(slog.NewTextHandler(io.Discard, nil))))
	srv.Register(&Arith{})
	c := dial(t, startServer(t, srv))
	const samples = 4
	for i := range samples {
		for j := range 5 {
			if err := c.Call(context.Background(), "Arith.Add", Args{i, j}, &Reply{}); err != nil {
				t.Fatal(err)
			}
		}
		kiev.SampleHistory(srv)
	}
	var pages atomic.Int32
	adminPages := srv.AdminHandler()
	for _, tc := range []struct {
		name    string
		scripts bool
	}{
		{"scripts off", false},
		{"scripts on", true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			// Chromium's own switch for scripts also stops --dump-dom,
			// so the page's Content-Security-Policy turns them off.
			hs := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				if r.URL.Path == "/debug/kiev" {
					pages.Add(1)
				}
				if !tc.scripts {
					w.Header().Set("Content-Security-Policy", "script-src 'none'")
				}
				adminPages.ServeHTTP(w, r)
			}))
			defer hs.Close()
			before := pages.Load()
			dom := dumpDOM(t, chromium, hs.URL+"/debug/kiev", "--virtual-time-budget=5000")
			if ran := strings.Contains(dom, `<span id="refresh">· refreshed every 2 s</span>`); ran != tc.scripts {
				t.Fatalf("the page's script ran: %v; want %v", ran, tc.scripts)
			}
			if fetched := pages.Load() - before; tc.scripts && fetched < 2 {
				t.Errorf("the page was fetched %d times; want a refresh too", fetched)
			}
			for _, id := range []string{"server-rate", "server-latency", "server-drops", "server-drops-priority",
				"method-rate", "method-latency", "method-limit"} {
				checkChart(t, dom, id, samples-1)
			}
			if !strings.Contains(dom, `data-chart="method-rate" data-method="Arith.Add"`) {
				t.Errorf("no chart of Arith.Add's calls")
			}
		})
	}
}

var (
	chartRE    = regexp.MustCompile(`(?s)<figure class="chart" data-chart="([a-z-]+)"[^>]*data-points="(\d+)">.*?</figure>`)
	polylineRE = regexp.MustCompile(`<polyline class="s\d" data-series="[^"]*" points="([^"]*)"`)
)

// checkChart checks that every chart id in dom draws each of its lines
// with at least n points, and that the calls chart rises above zero.
func checkChart(t *testing.T, dom, id string, n int) {
	t.Helper()
	found := 0
	for _, m := range chartRE.FindAllStringSubmatch(dom, -1) {
		if m[1] != id {
			continue
		}
		found++
		if p, _ := strconv.Atoi(m[2]); p < n {
			t.Errorf("chart %s has %d points; want %d", id, p, n)
		}
		lines := polylineRE.FindAllStringSubmatch(m[0], -1)
		if len(lines) < 2 {
			t.Errorf("chart %s draws %d lines; want 2 or more:\n%s", id, len(lines), m[0])
		}
		for _, l := range lines {
			if pts := strings.Fields(l[1]); len(pts) < n {
				t.Errorf("a line of chart %s has points %q; want %d", id, l[1], n)
			}
		}
		if id == "server-rate" && !strings.Contains(lines[0][1], ",") || id == "server-rate" && allAtZero(lines[0][1]) {
			t.Errorf("chart %s shows no calls: %q", id, lines[0][1])
		}
	}
	if found == 0 {
		t.Errorf("the page has no chart %s", id)
	}
}

// allAtZero reports whether every point of an SVG polyline lies on the
// charts' x axis (y = 80).
func allAtZero(points string) bool {
	for _, p := range strings.Fields(points) {
		if !strings.HasSuffix(p, ",80.0") {
			return false
		}
	}
	return true
}

// dumpDOM loads url in headless Chromium and returns the DOM it ends
// with.
func dumpDOM(t *testing.T, chromium, url string, flags ...string) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	args := append([]string{"--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
		"--disable-background-networking", "--disable-component-update", "--disable-sync", "--disable-dev-shm-usage",
		"--user-data-dir=" + t.TempDir()}, flags...)
	out, err := exec.CommandContext(ctx, chromium, append(args, "--dump-dom", url)...).Output()
	if err != nil {
		t.Fatalf("chromium: %v", err)
	}
	return string(out)
}
