package main

import (
	"bytes"
	"regexp"
	"strings"
	"testing"
)

func TestRun(t *testing.T) {
	var out bytes.Buffer
	if err := run(&out); err != nil {
		t.Fatalf("run: %v\n%s", err, out.String())
	}
	got := out.String()
	lines := strings.Split(got, "\n")

	// Exact lines: what the load makes certain.
	for _, want := range []string{
		`pool_lease_errors_total{error_type="timeout",pool_name="backend"} 1`,
		`pool_items_destroyed_total{pool_name="backend",reason="discard"} 1`,
		`pool_leases_leaked_total{pool_name="backend"} 1`,
		// 120 by the workers, 4 to hold every item, 1 leaked.
		`pool_leases_granted_total{pool_name="backend"} 125`,
		`pool_preparation_time_seconds_count{pool_name="backend"} 125`,
		// The leaked lease holds its item and its permit.
		`pool_leases_active{pool_name="backend"} 1`,
		`pool_leases_queued{pool_name="backend"} 0`,
	} {
		if !contains(lines, want) {
			t.Errorf("missing line %s", want)
		}
	}
	// Every instrument is exported, with the pool's name.
	for _, series := range []string{
		"pool_items_allocated", "pool_items_available", "pool_utilization_ratio",
		"pool_lease_wait_time_seconds_count", "pool_lease_wait_time_seconds_sum",
		"pool_items_create_time_seconds_count", "pool_items_created_total",
	} {
		if !regexp.MustCompile(`(?m)^` + series + `\{pool_name="backend"\} [0-9.e+-]+$`).MatchString(got) {
			t.Errorf("no %s series", series)
		}
	}
	// The leak report names the pool and the function that took the lease
	// (package main is named by its import path under go test).
	pkg := `(main|github\.com/msl-armory/pool/examples/metrics)`
	if !regexp.MustCompile(`leak report: pool "backend", out for [0-9.]+[µnm]?s, taken at:\n  ` + pkg + `\.leakOne\n  \t.*main\.go:\d+\n  ` + pkg + `\.run\n`).MatchString(got) {
		t.Errorf("no leak report naming main.leakOne")
	}
	if t.Failed() {
		t.Logf("output:\n%s", got)
	}
}

func contains(lines []string, want string) bool {
	for _, l := range lines {
		if l == want {
			return true
		}
	}
	return false
}
