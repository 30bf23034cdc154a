package xversion

import (
	"fmt"
	"os"
	"slices"
	"strings"
	"testing"

	"go.uber.org/goleak"
)

func TestMain(m *testing.M) {
	dir, err := os.MkdirTemp("", "kiev-xversion-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	binDir = dir
	goleak.VerifyTestMain(m, goleak.Cleanup(func(int) { os.RemoveAll(dir) }))
}

// scenarioNames are the peer's scenarios, in the order it runs them.
var scenarioNames = []string{
	"call", "meta", "deadline", "deadline-expired", "priority", "cancel",
	"error-code", "not-found", "big-reply", "drain", "drain-load",
}

// baseline is each scenario's class between two builds of the current
// tree, which every pair of builds must give unless expect documents
// otherwise. deadline-expired and cancel also check that the handler's
// ctx ended the same way (the peer reports "wrong" if not).
var baseline = map[string]string{
	"call":             "ok",
	"meta":             "ok",
	"deadline":         "ok",
	"deadline-expired": "DeadlineExceeded",
	"priority":         "ok",
	"cancel":           "Canceled",
	"error-code":       "code 451",
	"not-found":        "ErrNotFound",
	"big-reply":        "ok",
	"drain":            "ok",
	"drain-load":       "ok",
}

// expect returns the classes a scenario may end with between client and
// server over network: the baseline, or where one build lacks a feature,
// the error that its documentation promises.
func expect(scenario, network string, client, server build) []string {
	switch {
	case scenario == "big-reply" && network == "udp" && client.lacks.ticket && !server.lacks.ticket:
		// A server with tickets holds a reply over 3 times its request
		// for an address not yet shown to receive, and sends a Retry:
		// "A client that does not know tickets sees a held Response as
		// ErrCode 8" (PROTOCOL.md, Datagrams; Packet.MaxAmplification).
		return []string{"ErrOverloaded"}
	case scenario == "drain-load" && network == "tcp" && server.lacks.lastID:
		// "Without that GoAway (an older server ...), such a call's
		// outcome is unknown" (PROTOCOL.md, GoAway): a call the server
		// ran may be reported as ErrShutdown.
		return []string{baseline[scenario], "unknown outcome"}
	}
	return []string{baseline[scenario]}
}

// pair is one row of the matrix: a client build calling a server build.
type pair struct {
	client, server build
	network, codec string
}

func (p pair) String() string {
	return fmt.Sprintf("%s_to_%s/%s/%s", p.client.name, p.server.name, p.network, p.codec)
}

// pairs are the rows of client calling server: every network and codec.
func pairs(client, server build) []pair {
	var ps []pair
	for _, network := range []string{"tcp", "udp"} {
		for _, codec := range []string{"msgpack", "protobuf"} {
			ps = append(ps, pair{client, server, network, codec})
		}
	}
	return ps
}

// TestCrossVersion runs the peer of each pinned commit against the
// current tree's, both ways, over TCP and UDP, with msgpack and protobuf:
// every scenario must end as between two current builds, or with the
// error documented where the older build lacks a feature. The current
// tree against itself is the control. It logs the matrix as a Markdown
// table (RELIABILITY.md, "Cross-version compatibility").
func TestCrossVersion(t *testing.T) {
	bs := allBuilds(t)
	servers := make(map[string]Addrs)
	for _, b := range bs {
		servers[b.name] = startServer(t, b)
	}
	cur := bs[0]
	rows := pairs(cur, cur)
	for _, old := range bs[1:] {
		rows = append(rows, pairs(old, cur)...)
		rows = append(rows, pairs(cur, old)...)
	}

	var table strings.Builder
	fmt.Fprintf(&table, "| client → server | net | codec | %s |\n", strings.Join(scenarioNames, " | "))
	fmt.Fprintf(&table, "|---|---|---|%s\n", strings.Repeat("---|", len(scenarioNames)))
	var notes, drains []string
	for _, p := range rows {
		cells := make([]string, len(scenarioNames))
		for i := range cells {
			cells[i] = "not run"
		}
		t.Run(p.String(), func(t *testing.T) {
			results := runClient(t, p.client, servers[p.server.name], p.network, p.codec)
			seen := make(map[string]bool)
			for _, r := range results {
				i := slices.Index(scenarioNames, r.Scenario)
				if i < 0 {
					t.Errorf("the peer ran a scenario the test does not know: %+v", r)
					continue
				}
				seen[r.Scenario] = true
				want := expect(r.Scenario, p.network, p.client, p.server)
				cells[i] = cell(r, want)
				if r.Scenario == "drain-load" {
					drains = append(drains, fmt.Sprintf("%s: %s", p, r.Detail))
				}
				if !slices.Contains(want, r.Class) {
					t.Errorf("%s: %s (%s); want %s", r.Scenario, r.Class, r.Detail, strings.Join(want, " or "))
				} else if r.Class != baseline[r.Scenario] {
					notes = append(notes, fmt.Sprintf("%s %s: %s (%s)", p, r.Scenario, r.Class, r.Detail))
				}
			}
			for _, s := range scenarioNames {
				if !seen[s] {
					t.Errorf("%s: no result", s)
				}
			}
		})
		fmt.Fprintf(&table, "| %s → %s | %s | %s | %s |\n", p.client.name, p.server.name, p.network, p.codec, strings.Join(cells, " | "))
	}
	t.Logf("cross-version matrix (ok: as between two current builds):\n%s", table.String())
	t.Logf("drain-load, the calls of 8 callers while their server drained:\n%s", strings.Join(drains, "\n"))
	if len(notes) > 0 {
		t.Logf("documented differences:\n%s", strings.Join(notes, "\n"))
	}
}
