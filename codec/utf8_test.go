package codec

import (
	"testing"
	"unicode/utf8"
)

// FuzzValidUTF8 checks validUTF8 against the standard library.
func FuzzValidUTF8(f *testing.F) {
	for _, s := range []string{
		"", "ascii only, longer than eight bytes", "消息消息消息", "消息\xe6\xb6", // cut short
		"\xe0\x80\x80", "\xe0\xa0\x80消", "\xed\xa0\x80消", "\xed\x9f\xbf消", // overlong, surrogate, last before
		"\xf0\x90\x80\x80", "\xf4\x90\x80\x80", "\xf4\x8f\xbf\xbf", "\xc0\x80", "\xc2\x80", "\xff",
		"消\x80息", "ab消息cdefghijklmnop消",
	} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		if got, want := validUTF8(s), utf8.ValidString(s); got != want {
			t.Fatalf("validUTF8(%q) = %v, utf8.ValidString %v", s, got, want)
		}
	})
}
