package transport

// Pending is a client transport's table of the calls awaiting their
// answers, by id: those of one TCP connection, or of one UDP socket. It
// holds the rules both share: a call is added unless the transport has
// failed or retires; an answer takes its call out once, so a call
// completes once whether its answer, its caller's deadline or the
// transport's failure comes first; a retiring transport fails once its
// last call is taken; a failing one takes every call out, to fail them.
//
// Pending has no lock of its own: its owner guards it with the mutex that
// guards the rest of its state, which the same decisions read (REQUIRES
// the owner's mutex, for every method). The zero value is empty and open.
type Pending[C any] struct {
	calls    map[uint64]C
	err      error // why the transport failed; no call is added once set
	retiring error // why the transport retires: it fails with it once idle
}

// Add adds call c of id, unless the transport failed or retires, which
// it returns.
func (p *Pending[C]) Add(id uint64, c C) error {
	switch {
	case p.err != nil:
		return p.err
	case p.retiring != nil:
		return p.retiring
	}
	if p.calls == nil {
		p.calls = make(map[uint64]C)
	}
	p.calls[id] = c
	return nil
}

// Take takes the call of id out, if it is there. retired, if not nil, is
// the error to fail the transport with, now that the last call of a
// retiring transport is out.
func (p *Pending[C]) Take(id uint64) (c C, ok bool, retired error) {
	c, ok = p.calls[id]
	delete(p.calls, id)
	if len(p.calls) == 0 && p.err == nil {
		retired = p.retiring
	}
	return c, ok, retired
}

// Has reports whether the call of id awaits its answer.
func (p *Pending[C]) Has(id uint64) bool {
	_, ok := p.calls[id]
	return ok
}

// Len is the number of calls awaiting their answers.
func (p *Pending[C]) Len() int { return len(p.calls) }

// Retire makes the transport take no new call, failing them with err,
// and fail with err once its calls are out; idle says none is in now, so
// the owner fails it at once.
func (p *Pending[C]) Retire(err error) (idle bool) {
	if p.retiring == nil {
		p.retiring = err
	}
	return len(p.calls) == 0
}

// Fail marks the transport failed with err, and takes out the calls
// pending, for the owner to fail. first is false if it had failed
// already: the calls were taken by the first Fail.
func (p *Pending[C]) Fail(err error) (calls map[uint64]C, first bool) {
	if p.err != nil {
		return nil, false
	}
	p.err = err
	calls, p.calls = p.calls, nil
	return calls, true
}

// Closed is why no call may be added: the transport's failure, or why it
// retires; nil while it takes calls.
func (p *Pending[C]) Closed() error {
	if p.err != nil {
		return p.err
	}
	return p.retiring
}

// Err is why the transport failed, or nil.
func (p *Pending[C]) Err() error { return p.err }
