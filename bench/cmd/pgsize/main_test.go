package main

import (
	"slices"
	"testing"
	"time"
)

// The parts that need no server: go test runs without one.

func TestParseFlags(t *testing.T) {
	o, err := parseFlags([]string{"-dsn", "x"})
	if err != nil {
		t.Fatal(err)
	}
	var want []runSpec
	for _, n := range []int{2, 4, 8, 12, 16, 24, 32, 48, 64} {
		want = append(want, runSpec{size: n})
	}
	if !slices.Equal(o.runs, want) || o.clients != 64 || o.rows != 4 || o.stmt != "update" {
		t.Errorf("defaults: runs %v, clients %d, rows %d, stmt %q", o.runs, o.clients, o.rows, o.stmt)
	}
	o, err = parseFlags([]string{"-dsn", "x", "-size", "12", "-sizes", "1,2"})
	if err != nil || !slices.Equal(o.runs, []runSpec{{size: 12}}) {
		t.Errorf("-size 12 beside -sizes: runs %v, err %v", o.runs, err)
	}
	o, err = parseFlags([]string{"-dsn", "x", "-sizes", "a64,8"})
	if err != nil || !slices.Equal(o.runs, []runSpec{{64, true}, {8, false}}) {
		t.Errorf("-sizes a64,8: runs %v, err %v", o.runs, err)
	}
	o, err = parseFlags([]string{"-dsn", "x", "-adaptive", "-size", "64"})
	if err != nil || !slices.Equal(o.runs, []runSpec{{64, true}}) {
		t.Errorf("-adaptive -size 64: runs %v, err %v", o.runs, err)
	}
	for _, bad := range [][]string{
		{"-dsn", ""},
		{"-dsn", "x", "-sizes", "4,0"},
		{"-dsn", "x", "-sizes", "4,a"},
		{"-dsn", "x", "-sizes", "a0"},
		{"-dsn", "x", "-rows", "65"},
		{"-dsn", "x", "-stmt", "select"},
		{"-dsn", "x", "-duration", "0s"},
		{"-dsn", "x", "extra"},
	} {
		if _, err := parseFlags(bad); err == nil {
			t.Errorf("parseFlags(%q) accepted it", bad)
		}
	}
}

func TestPercentile(t *testing.T) {
	xs := make([]time.Duration, 200)
	for i := range xs {
		xs[i] = time.Duration(i + 1)
	}
	// Nearest rank: the ceil(q·n)-th smallest.
	for _, tc := range []struct {
		q    float64
		want time.Duration
	}{{0.50, 100}, {0.99, 198}, {1, 200}, {0, 1}} {
		if got := percentile(xs, tc.q); got != tc.want {
			t.Errorf("percentile(1..200, %v) = %v, want %v", tc.q, got, tc.want)
		}
	}
	if got := percentile([]time.Duration{7}, 0.99); got != 7 {
		t.Errorf("percentile of one = %v", got)
	}
}
