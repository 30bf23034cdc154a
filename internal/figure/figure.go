// Package figure formats the numbers that kiev shows people: on the status
// page and in the kiev command's views.
package figure

import (
	"math"
	"strconv"
	"strings"
)

// Format formats f with fewer decimals the larger it is, and no trailing
// zeros: 1234, 12.5, 1.25, 0.125.
func Format(f float64) string {
	d := 3
	switch a := math.Abs(f); {
	case a >= 100:
		d = 0
	case a >= 10:
		d = 1
	case a >= 1:
		d = 2
	}
	s := strconv.FormatFloat(f, 'f', d, 64)
	if strings.Contains(s, ".") {
		s = strings.TrimRight(strings.TrimRight(s, "0"), ".")
	}
	return s
}
