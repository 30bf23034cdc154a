package mongo_test

import (
	"context"
	"errors"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	"go.mongodb.org/mongo-driver/v2/bson"
	driver "go.mongodb.org/mongo-driver/v2/mongo"

	"github.com/kievrpc/kiev/clients/mongo"
)

// recorder is a slog.Handler that keeps the records, with a value of
// their contexts.
type recorder struct {
	mu   sync.Mutex
	recs []record
}

type record struct {
	slog.Record
	attrs map[string]string
	ctxID any // the context's ctxKey value
}

type ctxKey struct{}

func (r *recorder) Enabled(context.Context, slog.Level) bool { return true }
func (r *recorder) WithAttrs([]slog.Attr) slog.Handler       { return r }
func (r *recorder) WithGroup(string) slog.Handler            { return r }

func (r *recorder) Handle(ctx context.Context, rec slog.Record) error {
	attrs := map[string]string{}
	rec.Attrs(func(a slog.Attr) bool {
		attrs[a.Key] = a.Value.String()
		return true
	})
	r.mu.Lock()
	defer r.mu.Unlock()
	r.recs = append(r.recs, record{rec.Clone(), attrs, ctx.Value(ctxKey{})})
	return nil
}

// find returns the records with message msg whose attributes hold the
// pairs of kv.
func (r *recorder) find(msg string, kv ...string) []record {
	r.mu.Lock()
	defer r.mu.Unlock()
	var out []record
records:
	for _, rec := range r.recs {
		if rec.Message != msg {
			continue
		}
		for i := 0; i+1 < len(kv); i += 2 {
			if rec.attrs[kv[i]] != kv[i+1] {
				continue records
			}
		}
		out = append(out, rec)
	}
	return out
}

// all returns every record's message and attributes, one a line.
func (r *recorder) all() string {
	r.mu.Lock()
	defer r.mu.Unlock()
	var b strings.Builder
	for _, rec := range r.recs {
		b.WriteString(rec.Message)
		for k, v := range rec.attrs {
			b.WriteString(" " + k + "=" + v)
		}
		b.WriteByte('\n')
	}
	return b.String()
}

// TestSlowLog makes every command slow, with a 1 ns threshold, and reads
// the log line of an insert: its command, cut, and the operation's
// context, which kiev.NewContextHandler reads the call's attributes from.
func TestSlowLog(t *testing.T) {
	rec := &recorder{}
	c, _, _ := newClient(t, mongo.Options{Name: "slowlog", SlowThreshold: time.Nanosecond, Logger: slog.New(rec)})
	ctx := context.WithValue(t.Context(), ctxKey{}, "call-42")
	doc := d("_id", "big", "note", strings.Repeat("n", 10_000))
	if _, err := c.DB().Collection("slowcoll").InsertOne(ctx, doc); err != nil {
		t.Fatal(err)
	}
	recs := rec.find("kiev/clients/mongo: slow command", "command", "insert", "collection", "slowcoll", "client", "slowlog")
	if len(recs) != 1 {
		t.Fatalf("%d slow-command lines for the insert; the log:\n%s", len(recs), rec.all())
	}
	r := recs[0]
	if r.Level != slog.LevelWarn {
		t.Errorf("level %v, want WARN", r.Level)
	}
	cmd := r.attrs["cmd"]
	if !strings.HasPrefix(cmd, `{"insert":"slowcoll"`) || len(cmd) > mongo.MaxLoggedCommand || !strings.HasSuffix(cmd, "…") {
		t.Errorf("cmd = %s (%d bytes); want the insert's relaxed JSON cut to %d bytes", cmd, len(cmd), mongo.MaxLoggedCommand)
	}
	if strings.Contains(cmd, "lsid") {
		t.Errorf("cmd shows the session: %s", cmd)
	}
	if d, err := time.ParseDuration(r.attrs["took"]); err != nil || d <= 0 {
		t.Errorf("took = %q", r.attrs["took"])
	}
	if r.ctxID != "call-42" {
		t.Errorf("the line was logged with context value %v, want the operation's, call-42", r.ctxID)
	}
	if st := c.Stats(); st.Slow == 0 {
		t.Errorf("Stats.Slow = 0 after a slow command")
	}
}

// TestNotSlow shows commands under the threshold not logged.
func TestNotSlow(t *testing.T) {
	rec := &recorder{}
	c, _, _ := newClient(t, mongo.Options{SlowThreshold: time.Minute, Logger: slog.New(rec)})
	if _, err := c.DB().Collection("fast").InsertOne(t.Context(), d("a", 1)); err != nil {
		t.Fatal(err)
	}
	if recs := rec.find("kiev/clients/mongo: slow command"); len(recs) != 0 {
		t.Errorf("commands under a 1-minute threshold logged as slow:\n%s", rec.all())
	}
}

// TestFailedLog reads the line of a command the server refuses.
func TestFailedLog(t *testing.T) {
	rec := &recorder{}
	c, _, _ := newClient(t, mongo.Options{Logger: slog.New(rec)})
	coll := c.DB().Collection("things")
	if _, err := coll.InsertOne(t.Context(), d("a", 1)); err != nil {
		t.Fatal(err)
	}
	// FerretDB refuses $where once it has a document to match.
	err := coll.FindOne(t.Context(), d("$where", "this.a > 1")).Err()
	if err == nil || errors.Is(err, driver.ErrNoDocuments) {
		t.Fatalf("a find with $where: %v; want FerretDB to refuse it", err)
	}
	recs := rec.find("kiev/clients/mongo: command failed", "command", "find", "collection", "things")
	if len(recs) != 1 {
		t.Fatalf("%d command-failed lines for the find; the log:\n%s", len(recs), rec.all())
	}
	r := recs[0]
	if r.Level != slog.LevelWarn || r.attrs["err"] != err.Error() || !strings.Contains(r.attrs["cmd"], `"$where":"this.a > 1"`) {
		t.Errorf("the line: level %v, attributes %v; want WARN, the error %q and the command", r.Level, r.attrs, err)
	}
}

// TestCredentialsNotLogged runs createUser with a password, every command
// logged as slow, and looks for the password in the log.
func TestCredentialsNotLogged(t *testing.T) {
	const password = "hunter2-do-not-log"
	rec := &recorder{}
	c, _, text := newClient(t, mongo.Options{SlowThreshold: time.Nanosecond, Logger: slog.New(rec)})
	err := c.DB().RunCommand(t.Context(), d("createUser", "kievtest", "pwd", password, "roles", bson.A{})).Err()
	t.Logf("createUser: %v", err) // FerretDB may not support it; either way it must not be logged
	if err == nil {
		t.Cleanup(func() {
			c.DB().RunCommand(context.Background(), d("dropUser", "kievtest"))
		})
	}
	all := rec.all() + text.All()
	if strings.Contains(all, password) || strings.Contains(all, "hunter2") {
		t.Fatalf("the password is in the log:\n%s", all)
	}
	recs := rec.find("kiev/clients/mongo: slow command", "command", "createUser")
	recs = append(recs, rec.find("kiev/clients/mongo: command failed", "command", "createUser")...)
	if len(recs) != 1 || recs[0].attrs["cmd"] != "[redacted]" {
		t.Errorf("want one line for createUser, with cmd=[redacted]; the log:\n%s", rec.all())
	}
}
