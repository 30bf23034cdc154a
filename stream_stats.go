package kiev

import (
	"context"
	"errors"
	"fmt"
	"io"
	"sync/atomic"
	"time"

	"github.com/kievrpc/kiev/admin"
	"github.com/kievrpc/kiev/internal/callstats"
	"github.com/kievrpc/kiev/internal/metrics"
)

// streamStats counts a stream method's streams and messages, or a
// Client's, for the metrics and the status page. In is what this side
// received, out what it sent.
type streamStats struct {
	open              atomic.Int64
	opens             atomic.Int64
	msgsIn, msgsOut   atomic.Int64
	bytesIn, bytesOut atomic.Int64
	// readings are a stream method's message counts of the last minute,
	// as the server's history sampler read them, for the status page's
	// rates; nil on a Client and for a unary method.
	readings *callstats.Readings
}

func (t *streamStats) opened()        { t.open.Add(1); t.opens.Add(1) }
func (t *streamStats) closed()        { t.open.Add(-1) }
func (t *streamStats) sent(n int)     { t.msgsOut.Add(1); t.bytesOut.Add(int64(n)) }
func (t *streamStats) received(n int) { t.msgsIn.Add(1); t.bytesIn.Add(int64(n)) }

// flow reads the message counts: in and out, then their bytes.
func (t *streamStats) flow() [4]int64 {
	return [4]int64{t.msgsIn.Load(), t.msgsOut.Load(), t.bytesIn.Load(), t.bytesOut.Load()}
}

// read records the message counts at now, for the rates; the history
// sampler calls it every admin.HistoryEvery.
func (t *streamStats) read(now time.Time) {
	if t.readings != nil {
		t.readings.Add(now, t.flow())
	}
}

// metrics returns the counts as the collectors export them.
func (t *streamStats) metrics() metrics.Streams {
	f := t.flow()
	return metrics.Streams{Open: t.open.Load(), Opened: t.opens.Load(), MsgsIn: f[0], MsgsOut: f[1], BytesIn: f[2], BytesOut: f[3]}
}

// streamStatus returns a stream method's streams as the status page
// shows them, with their rates over the last minute, or since start.
func (m *method) streamStatus(now, start time.Time) *admin.StreamStatus {
	t := &m.streams
	f := t.flow()
	st := &admin.StreamStatus{Kind: m.kind.String(), Open: t.open.Load(), Opened: t.opens.Load(),
		MsgsIn: f[0], MsgsOut: f[1], BytesIn: f[2], BytesOut: f[3]}
	if t.readings != nil {
		r, span := t.readings.Rates(now, start, f)
		st.MsgInRate, st.MsgOutRate, st.ByteInRate, st.ByteOutRate = r[0], r[1], r[2], r[3]
		st.WindowSec = span.Seconds()
	}
	return st
}

// streamStatus returns the client's streams as the status page shows
// them; nil for a client that never opened one.
func (c *Client) streamStatus() *admin.ClientStreamStatus {
	t := &c.streamStats
	leaked := c.streamsLeaked.Load()
	if t.opens.Load() == 0 && leaked == 0 {
		return nil
	}
	return &admin.ClientStreamStatus{Open: t.open.Load(), Opened: t.opens.Load(), Leaked: leaked,
		MsgsIn: t.msgsIn.Load(), MsgsOut: t.msgsOut.Load(), BytesIn: t.bytesIn.Load(), BytesOut: t.bytesOut.Load()}
}

// outcome is the stream's end as StreamDesc.OnEnd reports it.
func (cs *clientStream) outcome() error {
	cs.mu.Lock()
	defer cs.mu.Unlock()
	closed := cs.err == errStreamClosed || errors.Is(cs.err, context.Canceled) || errors.Is(cs.err, context.DeadlineExceeded)
	switch {
	case cs.err == io.EOF:
		return nil
	case closed && cs.final != nil && cs.final.Code == CodeOK:
		return nil // closed once the server had ended it well
	case cs.err == errStreamClosed:
		return errClosedFirst
	}
	return cs.err
}

// errClosedFirst is the end of a stream Close ended, for OnEnd.
var errClosedFirst = fmt.Errorf("%w: %w", context.Canceled, errStreamClosed)
