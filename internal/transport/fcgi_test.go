package transport

import (
	"fmt"
	"slices"
	"testing"
	"time"
)

// TestRecordScanFollowsRecordsHoweverSplit scans the records of a request
// (with padding, and an empty record) cut into chunks of every size from
// 1 byte to the whole: each ends once, in order, and the scan is between
// records at the end.
func TestRecordScanFollowsRecordsHoweverSplit(t *testing.T) {
	rec := func(typ byte, content, padding int) []byte {
		b := []byte{1, typ, 0, 1, byte(content >> 8), byte(content), byte(padding), 0}
		return append(b, make([]byte, content+padding)...)
	}
	var stream []byte
	for _, r := range [][]byte{rec(1, 8, 0), rec(4, 300, 4), rec(4, 0, 0), rec(5, 5, 3), rec(5, 0, 0)} {
		stream = append(stream, r...)
	}
	want := []string{"1 false", "4 false", "4 true", "5 false", "5 true"}
	for size := 1; size <= len(stream); size++ {
		var r recordScan
		var got []string
		for b := range slices.Chunk(stream, size) {
			r.scan(b, time.Now(), func(typ byte, empty bool) { got = append(got, fmt.Sprint(typ, empty)) })
		}
		if !slices.Equal(got, want) || r.within() {
			t.Fatalf("chunks of %d bytes: records ended %v, within a record at the end: %v; want %v, false", size, got, r.within(), want)
		}
	}
}
