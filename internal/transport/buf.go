package transport

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

// GetBuf returns an empty buffer with room for at least n bytes, to give
// back with PutBuf once its bytes are copied or sent.
func GetBuf(n int) *[]byte {
	b := bufPool.Get().(*[]byte)
	if cap(*b) < n {
		*b = make([]byte, 0, n)
	}
	*b = (*b)[:0]
	return b
}

// PutBuf gives b back to the pool; nil is ignored.
func PutBuf(b *[]byte) {
	if b == nil || cap(*b) > maxPooledBuf {
		return
	}
	bufPool.Put(b)
}
