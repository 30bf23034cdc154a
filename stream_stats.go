package kiev

import (
	"context"
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
	// flow counts a stream method's last minute of messages, for its
	// rates; nil on a Client and for a unary method.
	flow *callstats.Flow
}

func (t *streamStats) opened() { t.open.Add(1); t.opens.Add(1) }
func (t *streamStats) closed() { t.open.Add(-1) }

func (t *streamStats) sent(n int) {
	t.msgsOut.Add(1)
	t.bytesOut.Add(int64(n))
	if t.flow != nil {
		t.flow.Record(time.Now(), true, n)
	}
}

func (t *streamStats) received(n int) {
	t.msgsIn.Add(1)
	t.bytesIn.Add(int64(n))
	if t.flow != nil {
		t.flow.Record(time.Now(), false, n)
	}
}

// metrics returns the counts as the collectors export them.
func (t *streamStats) metrics() metrics.Streams {
	return metrics.Streams{Open: t.open.Load(), Opened: t.opens.Load(),
		MsgsIn: t.msgsIn.Load(), MsgsOut: t.msgsOut.Load(), BytesIn: t.bytesIn.Load(), BytesOut: t.bytesOut.Load()}
}

// streamStatus returns a stream method's streams as the status page shows
// them, with the rates of the window since start.
func (m *method) streamStatus(now, start time.Time) *admin.StreamStatus {
	t := &m.streams
	st := &admin.StreamStatus{Kind: m.kind.String(), Open: t.open.Load(), Opened: t.opens.Load(),
		MsgsIn: t.msgsIn.Load(), MsgsOut: t.msgsOut.Load(), BytesIn: t.bytesIn.Load(), BytesOut: t.bytesOut.Load()}
	if t.flow != nil {
		w := t.flow.Summary(now, start)
		st.MsgInRate, st.MsgOutRate, st.ByteInRate, st.ByteOutRate = w.MsgInRate, w.MsgOutRate, w.ByteInRate, w.ByteOutRate
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
	switch {
	case cs.final != nil && cs.final.Code == CodeOK, cs.err == io.EOF:
		return nil
	case cs.err == errStreamClosed:
		return errClosedFirst
	}
	return cs.err
}

// errClosedFirst is the end of a stream Close ended, for OnEnd.
var errClosedFirst = fmt.Errorf("%w: %w", context.Canceled, errStreamClosed)
