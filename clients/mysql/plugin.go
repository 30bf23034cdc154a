package mysql

import (
	"context"
	"errors"
	"log/slog"
	"strings"
	"time"
	"unicode/utf8"

	"gorm.io/gorm"

	"github.com/kievrpc/kiev/shed"
)

// maxLoggedSQL is how many bytes of a statement the log shows.
const maxLoggedSQL = 300

// plugin is the gorm plugin through which a DB sees every statement: its
// callbacks run first and last in each of gorm's six processors, and
// count, time and log the operation between them.
type plugin struct{ db *DB }

var _ gorm.Plugin = plugin{}

func (plugin) Name() string { return "kiev:mysql" }

// startKey keys the start of an operation in its Statement's Settings.
type startKey struct{}

func (p plugin) Initialize(g *gorm.DB) error {
	cb := g.Callback()
	for _, r := range []struct {
		op            string
		before, after func(string, func(*gorm.DB)) error
	}{
		{"create", cb.Create().Before("*").Register, cb.Create().After("*").Register},
		{"query", cb.Query().Before("*").Register, cb.Query().After("*").Register},
		{"update", cb.Update().Before("*").Register, cb.Update().After("*").Register},
		{"delete", cb.Delete().Before("*").Register, cb.Delete().After("*").Register},
		{"row", cb.Row().Before("*").Register, cb.Row().After("*").Register},
		{"raw", cb.Raw().Before("*").Register, cb.Raw().After("*").Register},
	} {
		if err := r.before("kiev:before_"+r.op, p.before); err != nil {
			return err
		}
		if err := r.after("kiev:after_"+r.op, p.after(r.op)); err != nil {
			return err
		}
	}
	return nil
}

// releaseKey keys the function that gives back an operation's slot of
// the DB's Resource.
type releaseKey struct{}

// before starts an operation: it takes a slot of the DB's Resource, or
// fails the operation with ctx's error or shed.ErrResourceBusy.
func (p plugin) before(tx *gorm.DB) {
	tx.Statement.Settings.Store(startKey{}, time.Now())
	if tx.DryRun || tx.Error != nil {
		return
	}
	ctx := tx.Statement.Context
	if ctx == nil {
		ctx = context.Background()
	}
	slot, err := p.db.res.Acquire(ctx)
	if err != nil {
		tx.AddError(err)
		return
	}
	tx.Statement.Settings.Store(releaseKey{}, slot)
}

// after returns the callback that ends an operation of gorm's processor
// op.
func (p plugin) after(op string) func(*gorm.DB) {
	return func(tx *gorm.DB) {
		if r, ok := tx.Statement.Settings.LoadAndDelete(releaseKey{}); ok {
			r.(shed.Slot).Release()
		}
		v, ok := tx.Statement.Settings.LoadAndDelete(startKey{})
		if !ok || tx.DryRun {
			return
		}
		p.db.finish(tx, op, time.Since(v.(time.Time)))
	}
}

// finish records an operation that took d.
func (db *DB) finish(tx *gorm.DB, op string, d time.Duration) {
	st := tx.Statement
	ctx := st.Context
	m := db.metrics.get(st.Table, op)
	m.duration.Observe(d.Seconds())
	db.queries.Add(1)
	err := tx.Error
	if err != nil && !errors.Is(err, gorm.ErrRecordNotFound) {
		m.failed.Inc()
		db.errors.Add(1)
		level := slog.LevelWarn
		if errors.Is(err, context.Canceled) {
			level = slog.LevelDebug // the caller's choice
		}
		if db.log.Enabled(ctx, level) {
			db.log.LogAttrs(ctx, level, "mysql: statement failed",
				slog.String("client", db.name), slog.Any("err", err), slog.String("sql", trimSQL(st.SQL.String())),
				slog.String("table", st.Table), slog.String("op", op), slog.Duration("took", d))
		}
	} else {
		m.ok.Inc()
	}
	if d >= db.slow {
		db.slowCount.Add(1)
		attrs := []slog.Attr{
			slog.String("client", db.name), slog.String("sql", trimSQL(st.SQL.String())),
			slog.String("table", st.Table), slog.String("op", op),
		}
		if tx.RowsAffected >= 0 { // not known for Row and Rows
			attrs = append(attrs, slog.Int64("rows", tx.RowsAffected))
		}
		db.log.LogAttrs(ctx, slog.LevelWarn, "mysql: slow statement", append(attrs, slog.Duration("took", d))...)
	}
}

// trimSQL returns sql for the log: its runs of white space made one
// space, cut to maxLoggedSQL bytes. gorm's SQL holds placeholders, "?",
// where the parameters go; they are not inlined.
func trimSQL(sql string) string {
	if len(sql) > 4*maxLoggedSQL {
		sql = sql[:4*maxLoggedSQL] // enough for maxLoggedSQL once spaces are squeezed, mostly
	}
	s := strings.Join(strings.Fields(sql), " ")
	if len(s) <= maxLoggedSQL {
		return s
	}
	n := maxLoggedSQL
	for n > 0 && !utf8.RuneStart(s[n]) {
		n--
	}
	return s[:n] + "…"
}
