package kiev

import "sync"

// Frame buffers are pooled; buffers that grew past maxPooledBuf are
// dropped so one huge message does not pin memory for ever.
const (
	minPooledBuf = 512
	maxPooledBuf = 64 << 10
)

var bufPool = sync.Pool{New: func() any {
	b := make([]byte, 0, minPooledBuf)
	return &b
}}

// getBuf returns an empty buffer with room for at least n bytes.
func getBuf(n int) *[]byte {
	b := bufPool.Get().(*[]byte)
	if cap(*b) < n {
		*b = make([]byte, 0, n)
	}
	*b = (*b)[:0]
	return b
}

func putBuf(b *[]byte) {
	if cap(*b) > maxPooledBuf {
		return
	}
	bufPool.Put(b)
}
