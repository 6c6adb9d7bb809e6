package work

import (
	"testing"
	"time"
)

// TestPercentile checks the nearest-rank definition on small cases.
func TestPercentile(t *testing.T) {
	s := make([]time.Duration, 1000)
	for i := range s {
		s[i] = time.Duration(i + 1)
	}
	for _, tc := range []struct {
		perMille int
		want     time.Duration
	}{{500, 500}, {990, 990}, {999, 999}, {1000, 1000}, {0, 1}} {
		if got := Percentile(s, tc.perMille); got != tc.want {
			t.Errorf("Percentile(1..1000, %d‰) = %d, want %d", tc.perMille, got, tc.want)
		}
	}
	if got := Percentile(s[:10], 999); got != 10 {
		t.Errorf("Percentile(1..10, 999‰) = %d, want 10", got)
	}
	if got := Percentile([]time.Duration{7}, 999); got != 7 {
		t.Errorf("Percentile([7], 999‰) = %d, want 7", got)
	}
}
