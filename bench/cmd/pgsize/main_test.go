package main

import (
	"slices"
	"testing"
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
