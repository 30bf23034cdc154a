package figure

import "testing"

func TestFormat(t *testing.T) {
	for f, want := range map[float64]string{
		1234.5: "1234", 99.95: "100", 12.5: "12.5", 10: "10", 1.25: "1.25", 1: "1",
		0.125: "0.125", 0.0004: "0", -2.5: "-2.5", 0: "0",
	} {
		if got := Format(f); got != want {
			t.Errorf("Format(%v) = %q; want %q", f, got, want)
		}
	}
}
