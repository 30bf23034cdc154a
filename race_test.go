//go:build race

package kiev_test

const raceEnabled = true
