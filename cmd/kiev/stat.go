package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"text/tabwriter"
	"time"

	"github.com/kievrpc/kiev"
	"github.com/kievrpc/kiev/admin"
	"github.com/kievrpc/kiev/internal/figure"
)

var statCommand = &command{
	name:     "stat",
	synopsis: "[flags] <addr>",
	summary:  "show a server's live status: calls, latencies, scheduler, clients, health",
	help: `
Stat reads the status of a kiev server and shows it, refreshed every
--interval until interrupted. On a terminal each view replaces the last;
otherwise views follow one another. Rates are per second over the last
minute, or over the time since the server started if that is shorter
(OVER S).

<addr> is the server's RPC address, where clients dial it (host:port or
a target such as tcp://host:port), whose admin service (kiev.Admin)
answers with the status; or its admin address (host:port, or a URL if
the page is elsewhere), whose status page has a JSON form,
/debug/kiev?format=json. For host:port, stat tries the admin page first,
then the RPC service.

Examples:
  kiev stat 127.0.0.1:7000
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
	if err := wantArgs("stat", args, 1, 1, "<addr>"); err != nil {
		return err
	}
	if c.interval <= 0 {
		return usagef("stat", "--interval %v is not positive; use a duration such as 1s", c.interval)
	}
	fetch, st, err := c.source(ctx, cl, args[0])
	if err != nil {
		if ctx.Err() != nil {
			return errInterrupted
		}
		return err
	}
	defer fetch.close()
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
		if next, err = fetch.status(ctx); err == nil {
			st = next
		} else if ctx.Err() != nil {
			return nil
		}
	}
}

// statusSource reads a server's status, over HTTP or RPC.
type statusSource interface {
	status(ctx context.Context) (admin.Status, error)
	close()
}

// source finds where addr serves its status and reads it once: at an
// http(s) URL, over HTTP; at a target that is not host:port, over RPC;
// at host:port, over HTTP if an HTTP server answers there, else over
// RPC. (HTTP goes first: a kiev server closes a connection that does
// not speak kiev at once, while an HTTP server would keep a kiev
// handshake waiting.)
func (c *statCmd) source(ctx context.Context, cl *cli, addr string) (statusSource, admin.Status, error) {
	timeout := max(c.interval, 5*time.Second)
	hostPort := !strings.Contains(addr, "://")
	if hostPort || strings.HasPrefix(addr, "http://") || strings.HasPrefix(addr, "https://") {
		u, err := statusURL(addr)
		if err != nil {
			return nil, admin.Status{}, usagef("stat", "%v", err)
		}
		src := httpStatus{&http.Client{Timeout: timeout}, u}
		st, err := src.status(ctx)
		if err == nil || !hostPort || !notHTTP(err) || ctx.Err() != nil {
			return src, st, err
		}
		// No HTTP server there: perhaps the RPC address.
	}
	return rpcSource(ctx, cl, addr, timeout)
}

// rpcSource dials target and reads its status once.
func rpcSource(ctx context.Context, cl *cli, target string, timeout time.Duration) (statusSource, admin.Status, error) {
	client, err := cl.dial("stat", target, timeout)
	if err != nil {
		return nil, admin.Status{}, err
	}
	src := rpcStatus{client, target, timeout}
	st, err := src.status(ctx)
	if err != nil {
		client.Close()
		return nil, st, err
	}
	return src, st, nil
}

// httpStatus reads the status page's JSON form.
type httpStatus struct {
	client *http.Client
	url    string
}

func (h httpStatus) status(ctx context.Context) (admin.Status, error) {
	return fetchStatus(ctx, h.client, h.url)
}

func (h httpStatus) close() {}

// rpcStatus calls the server's admin service.
type rpcStatus struct {
	client  *kiev.Client
	target  string
	timeout time.Duration
}

func (r rpcStatus) status(ctx context.Context) (admin.Status, error) {
	ctx, cancel := context.WithTimeout(ctx, r.timeout)
	defer cancel()
	var st admin.Status
	method := admin.ServiceName + ".Status"
	err := r.client.Call(kiev.WithPriority(ctx, kiev.MaxPriority), method, struct{}{}, &st)
	if err == nil {
		return st, nil
	}
	var se *kiev.ServerError
	if errors.As(err, &se) && se.Code == kiev.CodeNotFound {
		return st, fmt.Errorf("%s has no admin service (%s); its kiev is too old: give stat its admin address", r.target, admin.ServiceName)
	}
	if errors.As(err, &se) {
		return st, fmt.Errorf("%s: %s", r.target, strings.TrimPrefix(se.Message, "kiev: "))
	}
	return st, callFailed(ctx, r.target, method, r.timeout, err)
}

func (r rpcStatus) close() { r.client.Close() }

// errNotHTTP marks an answer that is not HTTP's.
var errNotHTTP = errors.New("no HTTP server answers there")

// notHTTP reports whether err says the address answered, but not with
// HTTP, as a kiev server's RPC address does.
func notHTTP(err error) bool { return errors.Is(err, errNotHTTP) }

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
		if !errors.Is(err, syscall.ECONNREFUSED) && !errors.Is(err, context.Canceled) {
			// Connected, but the answer was not HTTP (EOF, a malformed
			// response, or none in time).
			err = fmt.Errorf("%w: %w", errNotHTTP, err)
		}
		return st, fmt.Errorf("cannot read the status page: %w; is the address right?", err)
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

// renderStreams writes a table of the stream methods of services, if
// they have any.
func renderStreams(b *bytes.Buffer, services []admin.ServiceStatus) {
	tw := tabwriter.NewWriter(b, 0, 8, 2, ' ', 0)
	n := 0
	for _, s := range services {
		for _, m := range s.Methods {
			st := m.Streams
			if st == nil {
				continue
			}
			if n++; n == 1 {
				b.WriteString("\n")
				fmt.Fprintln(tw, "STREAM\tKIND\tOPEN\tOPENED\tMSGS IN\tMSGS OUT\tIN/S\tOUT/S\tBYTES IN/S\tBYTES OUT/S")
			}
			fmt.Fprintf(tw, "%s.%s\t%s\t%d\t%d\t%d\t%d\t%s\t%s\t%s\t%s\n", s.Name, m.Name, st.Kind, st.Open, st.Opened, st.MsgsIn, st.MsgsOut,
				figure.Format(st.MsgInRate), figure.Format(st.MsgOutRate), figure.Format(st.ByteInRate), figure.Format(st.ByteOutRate))
		}
	}
	tw.Flush()
}

// renderStatus writes a compact view of st; fetchErr, if not nil, is why
// st is not fresh.
func renderStatus(w io.Writer, st admin.Status, fetchErr error) error {
	var b bytes.Buffer
	at := st.Time.Local().Format("15:04:05")
	fmt.Fprintf(&b, "kiev status at %s   up %s   connections %d   in flight %d",
		at, (time.Duration(st.UptimeSec) * time.Second).String(), st.Connections, st.InFlight)
	if st.AdminAddr != "" {
		fmt.Fprintf(&b, "   admin http://%s", st.AdminAddr)
	}
	b.WriteString("\n")
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
	renderStreams(&b, st.Services)

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
			var streams string
			if cs := c.Streams; cs != nil {
				streams = fmt.Sprintf(", streams %d open of %d, %d leaked", cs.Open, cs.Opened, cs.Leaked)
			}
			if e := c.ConnEnded; e.Unsent > 0 || e.Failed > 0 {
				streams += fmt.Sprintf(", at connection ends %d unsent, %d failed", e.Unsent, e.Failed)
			}
			fmt.Fprintf(tw, "%s\t\t\t\t%d\t%d\tretries %d, budget %s%s\n", c.Target, c.Calls, c.Errors, c.Retries, figure.Format(c.Budget), streams)
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
