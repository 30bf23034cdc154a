package transport

import (
	"context"
	"errors"

	"github.com/kievrpc/kiev/internal/wire"
)

// NewStream makes a stream of priority prio on cc, not yet open, whose
// receiver grants the server's messages up to window bytes, as the
// connection's budget allows; it returns the grant, which the Request
// that opens the stream carries (Request.StreamCredit).
func (cc *ClientConn[C]) NewStream(prio uint8, window int) (*Stream, uint64) {
	s := newStream(&cc.streams, cc.NextID(), prio)
	s.mu.Lock()
	s.grantInitial(window)
	g := s.granted
	s.mu.Unlock()
	return s, g
}

// OpenStream opens s and sends frame, its Request: from now on the
// server's frames for it reach it. It fails, s not opened, with
// ErrDraining once the server has sent GoAway, or with why the
// connection takes no stream.
func (cc *ClientConn[C]) OpenStream(s *Stream, frame []byte) error {
	if cc.draining.Load() {
		s.release()
		return ErrDraining
	}
	if err := cc.streams.add(s); err != nil {
		s.release()
		return err
	}
	if err := cc.link.Send(frame); err != nil {
		s.fail(err, false)
		return err
	}
	return nil
}

// StreamsReady waits, within ctx, until cc knows whether the server
// serves streams, and returns ErrStreamsUnsupported if it does not. The
// server sends its Settings first; a server from before streams may send
// none, so a Ping's Pong settles it.
func (cc *ClientConn[C]) StreamsReady(ctx context.Context) error {
	select {
	case <-cc.settled:
	default:
		var tmp [wire.HeaderSize]byte
		b := wire.BeginFrame(tmp[:0], wire.TypePing, 0)
		_ = wire.EndFrame(b, 0, cc.maxFrame)
		if err := cc.link.Send(b); err != nil {
			return err
		}
		select {
		case <-cc.settled:
		case <-ctx.Done():
			return ctx.Err()
		case <-cc.link.Done():
			if err := cc.Err(); err != nil {
				return err
			}
			return errors.New("kiev: the connection closed before the server's Settings came")
		}
	}
	if !cc.streamsOK.Load() {
		return ErrStreamsUnsupported
	}
	return nil
}

// CancelStream ends s on this side with err, and tells the server to
// cancel it, unless it has ended already.
func (cc *ClientConn[C]) CancelStream(s *Stream, err error) {
	if open, _ := cc.streams.get(s.ID); open != s {
		s.Abort(err)
		return
	}
	s.Abort(err)
	var tmp [wire.HeaderSize]byte
	b := wire.BeginFrame(tmp[:0], wire.TypeCancel, s.ID)
	_ = wire.EndFrame(b, 0, cc.maxFrame)
	_ = cc.link.Send(b)
}

// Streams is how many streams cc has open.
func (cc *ClientConn[C]) Streams() int { return cc.streams.count() }
