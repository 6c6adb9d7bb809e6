package main

import (
	"bytes"
	"regexp"
	"strconv"
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
		`pool_items_max{pool_name="backend"} 4`,
		`pool_items_min{pool_name="backend"} 2`,
		// Saturation: the leaked lease's item, of the four.
		`saturation, max by (pool_name) (pool_leases_active / pool_items_max):`,
		`  1 / 4 = 0.25`,
		`hold time, histogram_quantile(0.99, sum by (le, pool_name) (rate(pool_lease_use_time_seconds_bucket[5m]))):`,
		// Each worker holds its lease 1 ms or more: no sampled lease is shorter.
		`  pool_lease_use_time_seconds_bucket{pool_name="backend",le="0.001"} 0`,
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
	// The hold time's histogram holds a sample, at least the first lease on
	// a processor, and at most the workers' leases; every one ended, in the
	// finite buckets.
	m := regexp.MustCompile(`(?m)^  pool_lease_use_time_seconds holds a sample of the leases: ([0-9]+) of the 125 granted$`).FindStringSubmatch(got)
	if m == nil {
		t.Errorf("no hold-time sample line")
	} else if n, _ := strconv.Atoi(m[1]); n < 1 || n > 120 {
		t.Errorf("hold-time sample of %d leases", n)
	} else if !contains(lines, `  pool_lease_use_time_seconds_bucket{pool_name="backend",le="30"} `+m[1]) {
		t.Errorf("the sampled leases are not all in the buckets up to 30 s")
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
