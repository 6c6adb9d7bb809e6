package main

import (
	"bytes"
	"strings"
	"testing"
)

// golden is the story's complete output. It is the same on every run: the
// requests run one after the other but for the one that holds the
// connection while another waits, which it releases only once that one
// queues, and the spans are printed by request, in the order they started,
// with their durations as 0 or non-zero.
const golden = `request 1 (creates)
  pool.lease, child of request, status Unset: pool.lease.create=non-zero pool.lease.prepare=non-zero pool.lease.uses=1 pool.lease.wait=0 pool.name=backend
    dial, child of pool.lease, status Unset
    ping, child of pool.lease, status Unset
  pool.lease.held, child of request, status Unset: pool.lease.end=release pool.lease.held=non-zero pool.name=backend
request 2 (served at once)
  pool.lease, child of request, status Unset: pool.lease.create=0 pool.lease.prepare=0 pool.lease.uses=2 pool.lease.wait=0 pool.name=backend
  pool.lease.held, child of request, status Unset: pool.lease.end=release pool.lease.held=non-zero pool.name=backend
request 3 (holds)
  pool.lease, child of request, status Unset: pool.lease.create=0 pool.lease.prepare=0 pool.lease.uses=3 pool.lease.wait=0 pool.name=backend
  pool.lease.held, child of request, status Unset: pool.lease.end=release pool.lease.held=non-zero pool.name=backend
request 4 (waits)
  pool.lease, child of request, status Unset: pool.lease.create=0 pool.lease.prepare=0 pool.lease.uses=4 pool.lease.wait=non-zero pool.name=backend
  pool.lease.held, child of request, status Unset: pool.lease.end=release pool.lease.held=non-zero pool.name=backend
request 5 (holds)
  pool.lease, child of request, status Unset: pool.lease.create=0 pool.lease.prepare=0 pool.lease.uses=5 pool.lease.wait=0 pool.name=backend
  pool.lease.held, child of request, status Unset: pool.lease.end=release pool.lease.held=non-zero pool.name=backend
request 6 (times out)
  pool.lease, child of request, status Error, event exception: pool.lease.create=0 pool.lease.prepare=0 pool.lease.uses=0 pool.lease.wait=non-zero pool.name=backend
`

func TestRunPrintsTheGoldenSpans(t *testing.T) {
	var out bytes.Buffer
	if err := run(&out); err != nil {
		t.Fatalf("run: %v\n%s", err, out.String())
	}
	if got := out.String(); got != golden {
		t.Errorf("run printed:\n%s\nwant:\n%s", got, golden)
	}
}

// TestRunKeyFacts checks the facts the story is there to show, so that a
// change to the golden text cannot quietly drop one of them.
func TestRunKeyFacts(t *testing.T) {
	var out bytes.Buffer
	if err := run(&out); err != nil {
		t.Fatalf("run: %v", err)
	}
	requests := strings.Split(out.String(), "request ")[1:]
	if len(requests) != 6 {
		t.Fatalf("%d requests printed, want 6:\n%s", len(requests), out.String())
	}
	for _, tc := range []struct {
		request int
		what    string
		facts   []string
	}{
		{1, "a lease that creates dials and pings, in spans under the lease's", []string{
			"pool.lease, child of request, status Unset: pool.lease.create=non-zero pool.lease.prepare=non-zero",
			"    dial, child of pool.lease",
			"    ping, child of pool.lease",
		}},
		{2, "a lease served at once took no step", []string{
			"pool.lease.create=0 pool.lease.prepare=0 pool.lease.uses=2 pool.lease.wait=0",
		}},
		{4, "a lease that waits says so", []string{"pool.lease.wait=non-zero"}},
		{5, "a hold is a span of its own, under the request", []string{
			"pool.lease.held, child of request, status Unset: pool.lease.end=release pool.lease.held=non-zero",
		}},
		{6, "a lease that times out has the error's status, and no hold", []string{
			"pool.lease, child of request, status Error, event exception: ",
			"pool.lease.uses=0 pool.lease.wait=non-zero",
		}},
	} {
		r := requests[tc.request-1]
		for _, f := range tc.facts {
			if !strings.Contains(r, f) {
				t.Errorf("request %d, %s: no %q in\n%s", tc.request, tc.what, f, r)
			}
		}
	}
	if strings.Contains(requests[5], "pool.lease.held") {
		t.Errorf("the lease that timed out has a hold:\n%s", requests[5])
	}
}
