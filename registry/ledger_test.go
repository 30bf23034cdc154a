package registry

import (
	"context"
	"errors"
	"testing"

	"github.com/google/go-cmp/cmp"
	"go.uber.org/goleak"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

const (
	ledgerPrefix = "kiev/registry/test"
	ledgerKey    = "/kiev/Arith/providers/tcp-10.0.0.7:7000"
	ledgerID     = "Arith/tcp-10.0.0.7:7000"
)

// goSet runs l.Set in a goroutine and returns where its result goes.
func goSet(ctx context.Context, l *Ledger, data []byte, want bool) <-chan error {
	res := make(chan error, 1)
	go func() { res <- l.Set(ctx, ledgerKey, ledgerID, data, want) }()
	return res
}

// awaitPending waits for the keeper's wake-up and returns the one entry
// pending.
func awaitPending(t *testing.T, l *Ledger) Entry {
	t.Helper()
	<-l.Woken()
	es := l.Entries(false)
	if len(es) != 1 {
		t.Fatalf("Entries(false) = %+v; want one entry", es)
	}
	return es[0]
}

// register sets the key and confirms it, as a keeper would.
func register(t *testing.T, l *Ledger, data string) {
	t.Helper()
	res := goSet(context.Background(), l, []byte(data), true)
	e := awaitPending(t, l)
	l.Confirm(e.Key, e.Gen, nil)
	if err := <-res; err != nil {
		t.Fatalf("Set: %v", err)
	}
}

func TestLedgerSetWaitsForConfirm(t *testing.T) {
	l := NewLedger(ledgerPrefix)
	res := goSet(context.Background(), l, []byte("a"), true)
	e := awaitPending(t, l)
	if diff := cmp.Diff(Entry{Key: ledgerKey, Data: []byte("a"), Want: true, Gen: 1}, e); diff != "" {
		t.Fatalf("the pending entry (-want +got):\n%s", diff)
	}
	// A failed attempt wakes Set, which goes on waiting.
	l.Confirm(e.Key, e.Gen, errors.New("connection refused"))
	select {
	case err := <-res:
		t.Fatalf("Set returned %v after a failed attempt; want it to wait", err)
	default:
	}
	l.Confirm(e.Key, e.Gen, nil)
	if err := <-res; err != nil {
		t.Fatalf("Set = %v after Confirm; want nil", err)
	}
	if es := l.Entries(false); len(es) != 0 {
		t.Errorf("Entries(false) = %+v after Confirm; want none", es)
	}
	if es := l.Entries(true); len(es) != 1 || l.Wanted() != 1 {
		t.Errorf("Entries(true) = %+v, Wanted = %d; want the registration", es, l.Wanted())
	}

	// A confirmed withdrawal forgets the key.
	res = goSet(context.Background(), l, nil, false)
	e = awaitPending(t, l)
	if e.Want || e.Gen != 2 {
		t.Fatalf("the pending entry = %+v; want the withdrawal, gen 2", e)
	}
	l.Confirm(e.Key, e.Gen, nil)
	if err := <-res; err != nil {
		t.Fatalf("withdrawing: Set = %v; want nil", err)
	}
	if es := l.Entries(true); len(es) != 0 || l.Wanted() != 0 {
		t.Errorf("Entries(true) = %+v, Wanted = %d after the withdrawal; want none", es, l.Wanted())
	}
}

func TestLedgerSetCtxEnds(t *testing.T) {
	for _, tt := range []struct {
		name     string
		want     bool
		fail     func(l *Ledger, e Entry, err error) // nil: no attempt fails
		wantText string                              // "": ctx's error itself
	}{
		{name: "registration", want: true},
		{name: "withdrawal", want: false},
		{
			name: "registration failed", want: true,
			fail:     func(l *Ledger, e Entry, err error) { l.Confirm(e.Key, e.Gen, err) },
			wantText: "kiev/registry/test: registration of Arith/tcp-10.0.0.7:7000 not confirmed: context canceled (last error: connection refused)",
		},
		{
			name: "withdrawal failed", want: false,
			fail:     func(l *Ledger, e Entry, err error) { l.Confirm(e.Key, e.Gen, err) },
			wantText: "kiev/registry/test: withdrawal of Arith/tcp-10.0.0.7:7000 not confirmed: context canceled (last error: connection refused)",
		},
		{
			name: "registration failed all", want: true,
			fail:     func(l *Ledger, _ Entry, err error) { l.Fail(err) },
			wantText: "kiev/registry/test: registration of Arith/tcp-10.0.0.7:7000 not confirmed: context canceled (last error: connection refused)",
		},
	} {
		t.Run(tt.name, func(t *testing.T) {
			l := NewLedger(ledgerPrefix)
			if !tt.want {
				register(t, l, "a")
			}
			ctx, cancel := context.WithCancel(context.Background())
			res := goSet(ctx, l, nil, tt.want)
			e := awaitPending(t, l)
			if tt.fail != nil {
				tt.fail(l, e, errors.New("connection refused"))
			}
			cancel()
			err := <-res
			if !errors.Is(err, context.Canceled) {
				t.Fatalf("Set = %v; want it to wrap context.Canceled", err)
			}
			if tt.wantText == "" {
				if err != context.Canceled {
					t.Errorf("Set = %q; want ctx's error itself", err)
				}
				return
			}
			if err.Error() != tt.wantText {
				t.Errorf("Set = %q\nwant %q", err, tt.wantText)
			}
		})
	}
}

func TestLedgerClose(t *testing.T) {
	l := NewLedger(ledgerPrefix)
	res := goSet(context.Background(), l, []byte("a"), true)
	awaitPending(t, l)
	l.Close()
	if err := <-res; err != ErrClosed {
		t.Errorf("a waiting Set = %v after Close; want ErrClosed", err)
	}
	if err := l.Set(context.Background(), ledgerKey, ledgerID, []byte("b"), true); err != ErrClosed {
		t.Errorf("Set after Close = %v; want ErrClosed", err)
	}
	// The keeper still sees what to withdraw.
	if es := l.Entries(true); len(es) != 1 || string(es[0].Data) != "a" {
		t.Errorf("Entries(true) after Close = %+v; want the registration made before", es)
	}
}

func TestLedgerNewerSetSupersedes(t *testing.T) {
	for _, tt := range []struct {
		name      string
		want      bool
		wantAfter int // entries left once the newer Set is confirmed
	}{
		{name: "registration", want: true, wantAfter: 1},
		{name: "withdrawal", want: false, wantAfter: 0},
	} {
		t.Run(tt.name, func(t *testing.T) {
			l := NewLedger(ledgerPrefix)
			older := goSet(context.Background(), l, []byte("a"), true)
			awaitPending(t, l)
			newer := goSet(context.Background(), l, []byte("b"), tt.want)
			e := awaitPending(t, l)
			if tt.want && string(e.Data) != "b" || e.Want != tt.want || e.Gen != 2 {
				t.Fatalf("the pending entry = %+v; want the newer Set's, gen 2", e)
			}
			l.Confirm(e.Key, e.Gen, nil)
			if err := <-older; err != nil {
				t.Errorf("the older Set = %v; want nil", err)
			}
			if err := <-newer; err != nil {
				t.Errorf("the newer Set = %v; want nil", err)
			}
			if es := l.Entries(true); len(es) != tt.wantAfter {
				t.Errorf("Entries(true) = %+v; want %d", es, tt.wantAfter)
			}
		})
	}
}

func TestLedgerWithdrawNeverSet(t *testing.T) {
	l := NewLedger(ledgerPrefix)
	ctx, cancel := context.WithCancel(context.Background())
	cancel() // it must not wait, so an ended ctx does not matter
	if err := l.Set(ctx, ledgerKey, ledgerID, nil, false); err != nil {
		t.Errorf("withdrawing a key never set: Set = %v; want nil", err)
	}
	select {
	case <-l.Woken():
		t.Error("withdrawing a key never set woke the keeper")
	default:
	}
	if es := l.Entries(true); len(es) != 0 {
		t.Errorf("Entries(true) = %+v; want none", es)
	}
}

func TestLedgerStaleConfirmKeepsWithdrawal(t *testing.T) {
	// The keeper confirms a registration it wrote before a withdrawal
	// came: the withdrawal stays pending.
	l := NewLedger(ledgerPrefix)
	reg := goSet(context.Background(), l, []byte("a"), true)
	first := awaitPending(t, l)
	wd := goSet(context.Background(), l, nil, false)
	awaitPending(t, l)
	l.Confirm(first.Key, first.Gen, nil)
	if err := <-reg; err != nil {
		t.Errorf("the registration's Set = %v; want nil", err)
	}
	es := l.Entries(false)
	if len(es) != 1 || es[0].Want || es[0].Gen != 2 {
		t.Fatalf("Entries(false) = %+v; want the withdrawal pending", es)
	}
	l.Confirm(es[0].Key, es[0].Gen, nil)
	if err := <-wd; err != nil {
		t.Errorf("the withdrawal's Set = %v; want nil", err)
	}
}

func TestLedgerNewerSetForgetsLastError(t *testing.T) {
	// The error of an attempt at an older Set says nothing of the newer.
	l := NewLedger(ledgerPrefix)
	older := goSet(context.Background(), l, []byte("a"), true)
	e := awaitPending(t, l)
	l.Confirm(e.Key, e.Gen, errors.New("connection refused"))
	ctx, cancel := context.WithCancel(context.Background())
	newer := goSet(ctx, l, []byte("b"), true)
	awaitPending(t, l)
	cancel()
	if err := <-newer; err != context.Canceled {
		t.Errorf("the newer Set = %v; want ctx's error itself", err)
	}
	l.Close()
	if err := <-older; err != ErrClosed {
		t.Errorf("the older Set = %v after Close; want ErrClosed", err)
	}
}
