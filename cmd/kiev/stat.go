package main

import (
	"bytes"
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"slices"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/kievrpc/kiev/admin"
	"github.com/kievrpc/kiev/internal/figure"
)

var statCommand = &command{
	name:     "stat",
	synopsis: "[flags] <admin-addr>",
	summary:  "show a server's live status: calls, latencies, scheduler, clients, health",
	help: `
Stat reads the status page of a kiev server (its JSON form,
/debug/kiev?format=json, served by the server's admin handler) and shows
it, refreshed every --interval until interrupted. On a terminal each view
replaces the last; otherwise views follow one another. <admin-addr> is
host:port, or a URL if the page is elsewhere.

Examples:
  kiev stat 127.0.0.1:7001
  kiev stat --once http://10.0.0.7:7001/debug/kiev`,
	newRunner: func() runner { return &statCmd{} },
}

type statCmd struct {
	interval time.Duration
	once     bool
}

func (c *statCmd) flags(fs *flag.FlagSet) {
	fs.DurationVar(&c.interval, "interval", time.Second, "refresh every `duration`")
	fs.BoolVar(&c.once, "once", false, "print one view and exit")
}

func (c *statCmd) run(ctx context.Context, cl *cli, args []string) error {
	if err := wantArgs("stat", args, 1, 1, "<admin-addr>"); err != nil {
		return err
	}
	if c.interval <= 0 {
		return usagef("stat", "--interval %v is not positive; use a duration such as 1s", c.interval)
	}
	u, err := statusURL(args[0])
	if err != nil {
		return usagef("stat", "%v", err)
	}
	client := &http.Client{Timeout: max(c.interval, 5*time.Second)}
	st, err := fetchStatus(ctx, client, u)
	if err != nil {
		if ctx.Err() != nil {
			return errInterrupted
		}
		return err
	}
	if c.once {
		return renderStatus(cl.stdout, st, nil)
	}
	clear := isTerminal(cl.stdout)
	t := time.NewTicker(c.interval)
	defer t.Stop()
	for {
		var buf bytes.Buffer // one write per view, so the screen does not flicker
		if clear {
			buf.WriteString("\x1b[H\x1b[2J")
		}
		renderStatus(&buf, st, err)
		if !clear {
			buf.WriteString("\n")
		}
		if _, err := cl.stdout.Write(buf.Bytes()); err != nil {
			return err
		}
		select {
		case <-ctx.Done():
			return nil // interrupted: the way to leave
		case <-t.C:
		}
		var next admin.Status
		if next, err = fetchStatus(ctx, client, u); err == nil {
			st = next
		} else if ctx.Err() != nil {
			return nil
		}
	}
}

// statusURL turns an admin address into the URL of the status JSON.
func statusURL(addr string) (string, error) {
	if !strings.Contains(addr, "://") {
		addr = "http://" + addr
	}
	u, err := url.Parse(addr)
	if err != nil || u.Host == "" || (u.Scheme != "http" && u.Scheme != "https") {
		return "", fmt.Errorf("admin address %q is neither host:port nor an http(s) URL", addr)
	}
	if u.Path == "" || u.Path == "/" {
		u.Path = "/debug/kiev"
	}
	q := u.Query()
	q.Set("format", "json")
	u.RawQuery = q.Encode()
	return u.String(), nil
}

// fetchStatus gets and decodes the status JSON at u.
func fetchStatus(ctx context.Context, client *http.Client, u string) (admin.Status, error) {
	var st admin.Status
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, u, nil)
	if err != nil {
		return st, err
	}
	req.Header.Set("Accept", "application/json")
	resp, err := client.Do(req)
	if err != nil {
		return st, fmt.Errorf("cannot read the status page: %v; is the admin address right?", err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(io.LimitReader(resp.Body, 32<<20))
	if err != nil {
		return st, fmt.Errorf("reading %s: %v", u, err)
	}
	if resp.StatusCode != http.StatusOK {
		return st, fmt.Errorf("GET %s: %s; is this the admin address of a kiev server?", u, resp.Status)
	}
	if err := json.Unmarshal(body, &st); err != nil {
		return st, fmt.Errorf("%s did not answer with the status JSON (%v); is this the admin address of a kiev server?", u, err)
	}
	return st, nil
}

// isTerminal reports whether w is a terminal.
func isTerminal(w io.Writer) bool {
	f, ok := w.(*os.File)
	if !ok {
		return false
	}
	fi, err := f.Stat()
	return err == nil && fi.Mode()&os.ModeCharDevice != 0
}

// renderStatus writes a compact view of st; fetchErr, if not nil, is why
// st is not fresh.
func renderStatus(w io.Writer, st admin.Status, fetchErr error) error {
	var b bytes.Buffer
	at := st.Time.Local().Format("15:04:05")
	fmt.Fprintf(&b, "kiev status at %s   up %s   connections %d   in flight %d\n",
		at, (time.Duration(st.UptimeSec) * time.Second).String(), st.Connections, st.InFlight)
	if fetchErr != nil {
		fmt.Fprintf(&b, "stale: %v\n", fetchErr)
	}

	b.WriteString("\n")
	tw := tabwriter.NewWriter(&b, 0, 8, 2, ' ', 0)
	fmt.Fprintln(tw, "METHOD\tCALLS\tERRORS\tRATE/S\tERRORS/S\tOVER S\tP50 MS\tP99 MS")
	n := 0
	for _, s := range st.Services {
		for _, m := range s.Methods {
			n++
			fmt.Fprintf(tw, "%s.%s\t%d\t%d\t%s\t%s\t%s\t%s\t%s\n", s.Name, m.Name, m.Calls, m.Errors,
				figure.Format(m.Rate), figure.Format(m.ErrRate), figure.Format(m.WindowSec), figure.Format(m.P50Ms), figure.Format(m.P99Ms))
		}
	}
	if n == 0 {
		fmt.Fprintln(tw, "(no services)")
	}
	tw.Flush()

	sc := st.Scheduler
	queued := make([]string, len(sc.Queued))
	for i, q := range sc.Queued {
		queued[i] = strconv.Itoa(q)
	}
	fmt.Fprintf(&b, "\nscheduler: workers %d   running %d   queued by priority [%s]   ran %d", sc.Workers, sc.Running, strings.Join(queued, " "), sc.Ran)
	if sc.Overloaded {
		b.WriteString("   OVERLOADED")
	}
	var dropped []string
	for _, reason := range sortedKeys(sc.Dropped) {
		if n := sc.Dropped[reason]; n > 0 {
			dropped = append(dropped, fmt.Sprintf("%s %d", reason, n))
		}
	}
	if len(dropped) > 0 {
		fmt.Fprintf(&b, "\n  dropped: %s", strings.Join(dropped, ", "))
	}
	b.WriteString("\n")

	if len(st.Clients) > 0 {
		b.WriteString("\n")
		tw = tabwriter.NewWriter(&b, 0, 8, 2, ' ', 0)
		fmt.Fprintln(tw, "CLIENT\tPROVIDER\tWEIGHT\tIN FLIGHT\tCALLS\tERRORS\tSTATE")
		for _, c := range st.Clients {
			fmt.Fprintf(tw, "%s\t\t\t\t%d\t%d\tretries %d, budget %s\n", c.Target, c.Calls, c.Errors, c.Retries, figure.Format(c.Budget))
			for _, p := range c.Providers {
				state := "ok"
				switch {
				case p.Ejected:
					state = "ejected until " + p.EjectedUntil.Local().Format("15:04:05")
				case p.Unlisted:
					state = "unlisted"
				}
				fmt.Fprintf(tw, "\t%s\t%d\t%d\t%d\t%d\t%s\n", p.ID, p.Weight, p.InFlight, p.Calls, p.Errors, state)
			}
		}
		tw.Flush()
	}

	if len(st.Health) > 0 {
		b.WriteString("\nhealth:")
		for _, h := range st.Health {
			if h.OK {
				fmt.Fprintf(&b, "  %s ok (%s ms)", h.Name, figure.Format(h.TookMs))
			} else {
				fmt.Fprintf(&b, "  %s FAILING: %s", h.Name, h.Error)
			}
		}
		b.WriteString("\n")
	}
	_, err := w.Write(b.Bytes())
	return err
}

func sortedKeys[V any](m map[string]V) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	return keys
}
