package kiev

import (
	"runtime"
	"testing"

	"github.com/kievrpc/kiev/internal/wire"
)

type PresizeSvc struct{}

func (PresizeSvc) Echo(n int, reply *int) error { *reply = n; return nil }

// TestMetadataCountIsNoAllocation makes calls whose header repeats one
// empty metadata pair 20,000 times. The server sized the call's metadata
// map by the count of pairs: 1.28 MiB per call for a map of one key.
func TestMetadataCountIsNoAllocation(t *testing.T) {
	s := NewServer()
	defer s.Close()
	if err := s.Register(PresizeSvc{}); err != nil {
		t.Fatal(err)
	}
	b := wire.BeginFrame(nil, wire.TypeRequest, 1)
	b = wire.AppendString(b, wire.KeyMethod, "PresizeSvc.Echo")
	b = wire.AppendString(b, wire.KeyCodec, "msgpack")
	for range 20000 {
		b = wire.AppendMeta(b, "", "")
	}
	if err := wire.EndHeader(b, 0); err != nil {
		t.Fatal(err)
	}
	b = append(b, 0x01)
	if err := wire.EndFrame(b, 0, 1<<20); err != nil {
		t.Fatal(err)
	}
	f, err := wire.Parse(b[4:])
	if err != nil {
		t.Fatal(err)
	}
	var h wire.Header
	if err := wire.ParseHeader(f.Header, &h); err != nil {
		t.Fatal(err)
	}
	const calls = 20
	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	for range calls {
		sc, _, msg := s.newCall(&f, &h, nil, t.Context(), nil)
		if sc == nil {
			t.Fatal(msg)
		}
		if len(sc.req.Metadata) != 1 {
			t.Fatalf("metadata %v; want the one empty key", sc.req.Metadata)
		}
		sc.release()
	}
	runtime.ReadMemStats(&after)
	perCall := (after.TotalAlloc - before.TotalAlloc) / calls
	t.Logf("%d bytes allocated per call of %d metadata pairs", perCall, h.MetaCount)
	if perCall > 16<<10 {
		t.Errorf("%d bytes allocated per call; want a few KiB at most, whatever the count of pairs", perCall)
	}
}
