package main

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/kievrpc/kiev"
	"github.com/kievrpc/kiev/internal/testpb"
)

// The test service is registered twice, under one name per codec: with
// plain Go structs for msgpack, as most services are written, and with
// generated messages for protobuf.
const (
	msgpackService  = "XV"
	protobufService = "XVProto"
)

// Msg is the msgpack payload of the test service.
type Msg struct {
	ID   int64
	Name string
	Tags []int64
}

// The getters of Msg are those protoc generates for testpb.Small, so that
// one service serves both.
func (m *Msg) GetId() int64     { return m.ID }
func (m *Msg) GetName() string  { return m.Name }
func (m *Msg) GetTags() []int64 { return m.Tags }

type pbSmall = testpb.Small

// message is *Msg or *testpb.Small.
type message[M any] interface {
	*M
	GetId() int64
	GetName() string
	GetTags() []int64
}

// set fills a reply.
func set[M any, PM message[M]](r PM, id int64, name string, tags []int64) {
	switch r := any(r).(type) {
	case *Msg:
		r.ID, r.Name, r.Tags = id, name, tags
	case *pbSmall:
		r.Id, r.Name, r.Tags = id, name, tags
	}
}

// Metadata keys the meta scenario sends and the Meta method echoes.
const (
	metaTrace = "xv-trace"
	metaUser  = "xv-user"
)

// service is the test service.
type service[M any, PM message[M]] struct {
	ran *counter // Work calls completed
}

// Echo replies with its args.
func (s *service[M, PM]) Echo(ctx context.Context, a PM, r PM) error {
	set(r, a.GetId(), a.GetName(), a.GetTags())
	return nil
}

// Meta replies with the values of the metaTrace and metaUser metadata,
// joined by "|".
func (s *service[M, PM]) Meta(ctx context.Context, a PM, r PM) error {
	md := kiev.MetadataFrom(ctx)
	set(r, 0, md.Get(metaTrace)+"|"+md.Get(metaUser), nil)
	return nil
}

// Priority replies with the call's priority in ID.
func (s *service[M, PM]) Priority(ctx context.Context, a PM, r PM) error {
	set(r, int64(kiev.PriorityFrom(ctx)), "", nil)
	return nil
}

// packetKeyMetadata is kiev.PacketKeyMetadata, which older commits lack:
// the metadata key under which a handler finds the id of the key that
// signed its datagram.
const packetKeyMetadata = "kiev-packet-key"

// Signer replies with the id of the key that signed the call's datagram,
// in Name: "" if it was not signed, or the server did not check.
func (s *service[M, PM]) Signer(ctx context.Context, a PM, r PM) error {
	set(r, 0, kiev.MetadataFrom(ctx).Get(packetKeyMetadata), nil)
	return nil
}

// Deadline replies with the microseconds left until the handler's
// deadline in ID, or -1 if it has none.
func (s *service[M, PM]) Deadline(ctx context.Context, a PM, r PM) error {
	left := int64(-1)
	if d, ok := ctx.Deadline(); ok {
		left = time.Until(d).Microseconds()
	}
	set(r, left, "", nil)
	return nil
}

// Wait runs until Ctl.Release names its token (the args' Name) or its
// context ends, and records which for Ctl.Outcome.
func (s *service[M, PM]) Wait(ctx context.Context, a PM, r PM) error {
	tk := tokens.get(a.GetName())
	close(tk.started)
	var err error
	select {
	case <-tk.release:
	case <-ctx.Done():
		err = ctx.Err()
	}
	tk.outcome = "released"
	if err != nil {
		tk.outcome = err.Error()
	}
	close(tk.done)
	set(r, a.GetId(), a.GetName(), nil)
	return err
}

// Fail returns an error with the code in the args' ID and their Name as
// its text, followed by a space and Tags[0] x's if Tags is set; it
// counts its runs under the Name for Ctl.Runs.
func (s *service[M, PM]) Fail(ctx context.Context, a PM, r PM) error {
	tokens.get(a.GetName()).runs.Add(1)
	msg := a.GetName()
	if t := a.GetTags(); len(t) > 0 {
		msg += " " + strings.Repeat("x", int(min(max(t[0], 0), 60000)))
	}
	return kiev.Errorf(kiev.Code(a.GetId()), "%s", msg)
}

// Big replies with a Name of ID bytes (at most 60,000), and counts its
// runs under its args' Name for Ctl.Runs.
func (s *service[M, PM]) Big(ctx context.Context, a PM, r PM) error {
	tokens.get(a.GetName()).runs.Add(1)
	set(r, a.GetId(), strings.Repeat("x", int(min(max(a.GetId(), 0), 60000))), nil)
	return nil
}

// Work takes a millisecond and counts itself once done, for the drain
// scenarios: a call that ran is one Work counted.
func (s *service[M, PM]) Work(ctx context.Context, a PM, r PM) error {
	t := time.NewTimer(time.Millisecond)
	defer t.Stop()
	select {
	case <-t.C:
	case <-ctx.Done():
		return ctx.Err()
	}
	s.ran.add()
	set(r, a.GetId(), "", nil)
	return nil
}

// counter counts completed Work calls.
type counter struct{ n atomic.Int64 }

func (c *counter) add()         { c.n.Add(1) }
func (c *counter) value() int64 { return c.n.Load() }

// token follows one Wait call, or counts the runs of Big calls, by the
// name their caller gave it.
type token struct {
	started chan struct{} // closed when Wait starts
	release chan struct{} // closed by Ctl.Release
	done    chan struct{} // closed when Wait ends, after outcome is set
	outcome string        // "released" or the handler's ctx error
	once    sync.Once
	runs    atomic.Int64 // Big and Fail calls of this name that ran
}

// tokenSet holds the process's tokens.
type tokenSet struct {
	mu sync.Mutex // guards m
	m  map[string]*token
}

var tokens = &tokenSet{m: make(map[string]*token)}

func (ts *tokenSet) get(name string) *token {
	ts.mu.Lock()
	defer ts.mu.Unlock()
	tk := ts.m[name]
	if tk == nil {
		tk = &token{started: make(chan struct{}), release: make(chan struct{}), done: make(chan struct{})}
		ts.m[name] = tk
	}
	return tk
}

// Ctl lets a client see into and steer the server process: wait for a
// Wait call to start, release it, read how it ended, and start and drain
// servers of its own.
type Ctl struct {
	mu      sync.Mutex // guards servers and their shut
	servers map[int64]*spawned
}

// CtlMsg is the payload of every Ctl method.
type CtlMsg struct {
	ID    int64  // a spawned server
	Token string // a Wait call
	TCP   string // a spawned server's addresses
	UDP   string
	Ran   int64  // Work calls a drained server completed; Big and Fail calls of a token that ran
	Err   string // how a drain went, "" if well
}

// spawned is a server started by Ctl.Spawn.
type spawned struct {
	*server
	shut chan error // Shutdown's result, once
}

// Started returns once the Wait call of the token has started.
func (c *Ctl) Started(ctx context.Context, a CtlMsg, r *CtlMsg) error {
	select {
	case <-tokens.get(a.Token).started:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// Release lets the Wait call of the token return.
func (c *Ctl) Release(ctx context.Context, a CtlMsg, r *CtlMsg) error {
	tk := tokens.get(a.Token)
	tk.once.Do(func() { close(tk.release) })
	return nil
}

// Outcome waits for the Wait call of the token to end and replies with
// how: "released" or its ctx's error.
func (c *Ctl) Outcome(ctx context.Context, a CtlMsg, r *CtlMsg) error {
	tk := tokens.get(a.Token)
	select {
	case <-tk.done:
		r.Err = tk.outcome
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// Runs replies with the number of Big and Fail calls of the token that
// ran.
func (c *Ctl) Runs(ctx context.Context, a CtlMsg, r *CtlMsg) error {
	r.Ran = tokens.get(a.Token).runs.Load()
	return nil
}

// Spawn starts a server of the test services on new listeners, so that a
// scenario can drain it.
func (c *Ctl) Spawn(ctx context.Context, a CtlMsg, r *CtlMsg) error {
	s, addrs, err := start(false)
	if err != nil {
		return err
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.servers == nil {
		c.servers = make(map[int64]*spawned)
	}
	id := int64(len(c.servers) + 1)
	c.servers[id] = &spawned{server: s}
	r.ID, r.TCP, r.UDP = id, addrs.TCP, addrs.UDP
	return nil
}

// StartDrain starts the Shutdown of a spawned server and returns.
func (c *Ctl) StartDrain(ctx context.Context, a CtlMsg, r *CtlMsg) error {
	s, err := c.server(a.ID)
	if err != nil {
		return err
	}
	shut := make(chan error, 1)
	c.mu.Lock()
	draining := s.shut != nil
	if !draining {
		s.shut = shut
	}
	c.mu.Unlock()
	if draining {
		return errors.New("already draining")
	}
	go func() {
		sctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		shut <- s.srv.Shutdown(sctx)
	}()
	return nil
}

// AwaitDrain waits for the Shutdown StartDrain started, and replies with
// the Work calls the server completed and what went wrong, if anything:
// Shutdown's error, or Serve or ServePacket returning other than
// ErrServerClosed.
func (c *Ctl) AwaitDrain(ctx context.Context, a CtlMsg, r *CtlMsg) error {
	s, err := c.server(a.ID)
	if err != nil {
		return err
	}
	c.mu.Lock()
	shut := s.shut
	c.mu.Unlock()
	if shut == nil {
		return errors.New("not draining")
	}
	var bad []string
	select {
	case err := <-shut:
		if err != nil {
			bad = append(bad, "Shutdown: "+err.Error())
		}
	case <-ctx.Done():
		return ctx.Err()
	}
	for range 2 {
		select {
		case err := <-s.served:
			if !errors.Is(err, kiev.ErrServerClosed) {
				bad = append(bad, fmt.Sprintf("Serve: %v", err))
			}
		case <-ctx.Done():
			return ctx.Err()
		}
	}
	r.Ran, r.Err = s.ran.value(), strings.Join(bad, "; ")
	return nil
}

// Drain shuts a spawned server down and replies as AwaitDrain.
func (c *Ctl) Drain(ctx context.Context, a CtlMsg, r *CtlMsg) error {
	if err := c.StartDrain(ctx, a, r); err != nil {
		return err
	}
	return c.AwaitDrain(ctx, a, r)
}

func (c *Ctl) server(id int64) (*spawned, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	s := c.servers[id]
	if s == nil {
		return nil, fmt.Errorf("no spawned server %d", id)
	}
	return s, nil
}
