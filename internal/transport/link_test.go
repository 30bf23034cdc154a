package transport

import (
	"bytes"
	"crypto/tls"
	"errors"
	"io"
	"net"
	"testing"
	"time"
)

// tcpPair returns the two ends of a loopback TCP connection, with small
// socket buffers so that a large write cannot complete at once.
func tcpPair(t *testing.T) (local *net.TCPConn, peer net.Conn) {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	accepted := make(chan net.Conn, 1)
	go func() {
		c, _ := ln.Accept()
		accepted <- c
	}()
	c, err := net.Dial("tcp", ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	peer = <-accepted
	if peer == nil {
		t.Fatal("accept failed")
	}
	local = c.(*net.TCPConn)
	_ = local.SetWriteBuffer(32 << 10)
	_ = peer.(*net.TCPConn).SetReadBuffer(32 << 10)
	t.Cleanup(func() { local.Close(); peer.Close() })
	return local, peer
}

// testLink returns a link on nc with the default options; its writer is
// not started.
func testLink(nc net.Conn) *Link {
	return NewLink(nc, Config{
		HeartbeatInterval: time.Second, HeartbeatTimeout: 4 * time.Second, MaxFrame: 16 << 20,
		OnDead: func(error) {},
	})
}

var errClosed = errors.New("closed")

// startWriter starts l's writer and stops it when the test ends.
func startWriter(t *testing.T, l *Link) {
	go l.Run()
	t.Cleanup(func() { l.Stop(errClosed); <-l.done })
}

// queued returns how many bytes wait in l's queue.
func queued(l *Link) int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.queue.Len()
}

// readN reads n bytes from peer.
func readN(t *testing.T, peer net.Conn, n int) []byte {
	t.Helper()
	got := make([]byte, n)
	_ = peer.SetReadDeadline(time.Now().Add(10 * time.Second))
	if _, err := io.ReadFull(peer, got); err != nil {
		t.Fatal(err)
	}
	return got
}

// An inline write the socket takes only in part leaves the rest at the
// front of the queue, before the frames sent meanwhile: the peer reads
// every byte, in order.
func TestInlineWriteRestGoesFirst(t *testing.T) {
	local, peer := tcpPair(t)
	l := testLink(local)
	if l.raw == nil {
		t.Fatal("a TCP connection got no raw socket for inline writes")
	}
	big := bytes.Repeat([]byte("a"), 8<<20)
	if err := l.SendAlone(big, true); err != nil {
		t.Fatal(err)
	}
	if rest := queued(l); rest == 0 || rest == len(big) {
		t.Fatalf("after an inline write of %d bytes into a small socket buffer, %d are queued; want part of it", len(big), rest)
	}
	small := []byte("bbbb")
	if err := l.SendAlone(small, true); err != nil { // queued: the rest is not written yet
		t.Fatal(err)
	}
	if err := l.Send([]byte("cccc")); err != nil {
		t.Fatal(err)
	}
	startWriter(t, l)
	got := readN(t, peer, len(big)+8)
	want := append(append(big, small...), "cccc"...)
	if !bytes.Equal(got, want) {
		i := 0
		for i < len(got) && got[i] == want[i] {
			i++
		}
		t.Fatalf("peer read the frames out of order: first difference at byte %d of %d", i, len(want))
	}
}

// An inline write after the writer's write deadline has passed still
// goes out at once, without the writer.
func TestInlineWriteAfterWriteDeadline(t *testing.T) {
	local, peer := tcpPair(t)
	l := testLink(local)
	_ = local.SetWriteDeadline(time.Now().Add(-time.Second))
	if err := l.SendAlone([]byte("hello"), true); err != nil {
		t.Fatal(err)
	}
	if n := queued(l); n != 0 {
		t.Fatalf("%d bytes queued for the writer; want the frame written inline", n)
	}
	if got := readN(t, peer, 5); string(got) != "hello" {
		t.Fatalf("peer read %q", got)
	}
}

// Only a plain socket is written inline: a TLS connection must encrypt
// every byte, so its frames go through the writer.
func TestInlineWriteOnlyOnPlainSockets(t *testing.T) {
	local, _ := tcpPair(t)
	l := testLink(tls.Client(local, &tls.Config{InsecureSkipVerify: true}))
	if l.raw != nil {
		t.Fatal("a TLS connection would be written inline, bypassing encryption")
	}
	if err := l.SendAlone([]byte("x"), true); err != nil {
		t.Fatal(err)
	}
	if n := queued(l); n != 1 {
		t.Fatalf("%d bytes queued on a TLS link; want the frame left to the writer", n)
	}
}

// Frames queued while an inline write is under way go after what of it
// the socket did not take.
func TestInlineWriteRestGoesBeforeFramesQueuedMeanwhile(t *testing.T) {
	local, peer := tcpPair(t)
	l := testLink(local)
	big := bytes.Repeat([]byte("a"), 8<<20)
	// As sendAlone does, with a frame queued by another goroutine while
	// the inline write is under way.
	l.mu.Lock()
	l.writing = true
	l.backlog.Add(int64(len(big)))
	l.mu.Unlock()
	if err := l.Send([]byte("bbbb")); err != nil {
		t.Fatal(err)
	}
	l.writeInline(big)
	startWriter(t, l)
	got := readN(t, peer, len(big)+4)
	if want := append(big, "bbbb"...); !bytes.Equal(got, want) {
		t.Fatalf("peer read the frame queued meanwhile before the rest of the inline write (at byte %d)", bytes.IndexByte(got, 'b'))
	}
	drained := make(chan error, 1)
	go func() { drained <- l.WaitRoom(0, new(Held), 1) }()
	wait := time.NewTimer(5 * time.Second)
	defer wait.Stop()
	select {
	case err := <-drained:
		if err != nil {
			t.Fatal(err)
		}
	case <-wait.C:
		t.Fatalf("backlog still counts %d bytes after the peer read everything; want 0", l.backlog.Load())
	}
}

// Once a large batch is written, the link keeps at most maxFreeChunks of
// its chunks for the next frames, and gives them back to the pool at the
// first heartbeat tick with nothing written: a connection with nothing
// to send costs no buffer, however much it sent before.
func TestWrittenBatchLeavesNoBuffer(t *testing.T) {
	const frame = 256 << 10
	local, peer := tcpPair(t)
	l := testLink(local)
	l.cfg.HeartbeatInterval = 20 * time.Millisecond
	startWriter(t, l)
	if err := l.Send(make([]byte, frame)); err != nil {
		t.Fatal(err)
	}
	readN(t, peer, frame)
	if err := l.WaitRoom(0, new(Held), 1); err != nil { // the writer is done with the batch
		t.Fatal(err)
	}
	held := func() (queued, kept int) {
		l.mu.Lock()
		defer l.mu.Unlock()
		return l.queue.Chunks(), len(l.queue.free)
	}
	if queued, kept := held(); queued != 0 || kept > maxFreeChunks {
		t.Fatalf("after a %d KiB batch was written the link holds %d chunks queued and %d kept; want none queued, at most %d kept", frame>>10, queued, kept, maxFreeChunks)
	}
	deadline := time.Now().Add(5 * time.Second)
	for _, kept := held(); kept > 0; _, kept = held() {
		if time.Now().After(deadline) {
			t.Fatalf("the link still keeps %d chunks 5 s after its last write; want none after a heartbeat tick (20ms) with nothing written", kept)
		}
		time.Sleep(5 * time.Millisecond) // polling the writer's state
	}
}

// A frameQueue gives back its bytes in order, across chunks, with what is
// pushed to its front first.
func TestFrameQueueKeepsOrder(t *testing.T) {
	var q frameQueue
	var want []byte
	for i := range 100 {
		b := bytes.Repeat([]byte{byte(i)}, i*997)
		q.push(b)
		want = append(want, b...)
	}
	front := bytes.Repeat([]byte{0xfe}, chunkSize+5)
	q.pushFront(front)
	want = append(front, want...)
	if q.Len() != len(want) {
		t.Fatalf("Len = %d, want %d", q.Len(), len(want))
	}
	bufs := q.take(nil)
	var got []byte
	for _, b := range bufs {
		got = append(got, b...)
	}
	if !bytes.Equal(got, want) {
		t.Fatal("the queue's bytes are not what was pushed, in order")
	}
	if q.Len() != 0 || q.Chunks() != 0 {
		t.Fatalf("after take: Len %d, %d chunks; want empty", q.Len(), q.Chunks())
	}
	freeChunks(bufs)
}
