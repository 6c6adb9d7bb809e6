package pool

import (
	"bytes"
	"context"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// kpEveryOption is a configuration with every option that gives the pool
// background work: the upkeep, MinIdle's spares, SeedInBackground's
// seeding, LeakThreshold's scans and FailFastAfter's probe.
func kpEveryOption() Options[*conn] {
	return Options[*conn]{
		MinSize: 2, MaxSize: 6, MinIdle: 1, SeedInBackground: true,
		UpkeepInterval: time.Millisecond, LeakThreshold: time.Millisecond,
		FailFastAfter: 3, CreateTimeout: time.Second,
		IdleTimeout: time.Hour, CheckAfterIdle: time.Millisecond,
		Preparer: CheckFunc[*conn](func(context.Context, *conn) error { return nil }),
	}
}

// kpOwnGoroutines returns, by goroutine id, the stacks of the goroutines
// that the pool's own code (not a test's) started and that run now.
func kpOwnGoroutines() map[string]string {
	buf := make([]byte, 1<<20)
	for {
		n := runtime.Stack(buf, true)
		if n < len(buf) {
			buf = buf[:n]
			break
		}
		buf = make([]byte, 2*len(buf))
	}
	own := map[string]string{}
	for _, g := range bytes.Split(buf, []byte("\n\n")) {
		_, created, ok := strings.Cut(string(g), "\ncreated by ")
		if !ok {
			continue
		}
		fn, file, _ := strings.Cut(created, "\n")
		if strings.HasPrefix(fn, "github.com/msl-armory/pool.") && !strings.Contains(file, "_test.go") {
			id, _, _ := strings.Cut(strings.TrimPrefix(string(g), "goroutine "), " ")
			own[id] = string(g)
		}
	}
	return own
}

// kpStartedSince returns the stacks of kpOwnGoroutines not in before: other
// tests' pools may still be winding down, and their goroutines end when
// they do.
func kpStartedSince(before map[string]string) []string {
	var since []string
	for id, g := range kpOwnGoroutines() {
		if _, old := before[id]; !old {
			since = append(since, g)
		}
	}
	return since
}

// TestOneBackgroundGoroutine: with every background option on, a pool at
// rest runs one goroutine of its own, the keeper, through its upkeep
// rounds and scans; Close ends it (doc.go, "Upkeep").
func TestOneBackgroundGoroutine(t *testing.T) {
	before := kpOwnGoroutines()
	p, _ := newTracked(t, kpEveryOption())
	require.Eventually(t, func() bool {
		s := p.Stats()
		return s.ItemsAvailable >= 2 && s.Creating == 0 && len(kpStartedSince(before)) == 1
	}, testWait, time.Millisecond, "the seeding and the spares to end")
	for range 50 { // rounds and scans come and go: nothing more stays
		time.Sleep(time.Millisecond)
		own := kpStartedSince(before)
		if !assert.LessOrEqual(t, len(own), 1, "goroutines of the pool's own at rest") {
			t.Log(strings.Join(own, "\n\n"))
			break
		}
	}
	assert.True(t, kpKeeperAmong(kpStartedSince(before)), "the one goroutine is the keeper's")
	require.NoError(t, p.Close())
	assert.Eventually(t, func() bool { return len(kpStartedSince(before)) == 0 }, testWait, time.Millisecond,
		"Close ended the keeper") // it has closed its stopped channel, and returns
}

// kpKeeperAmong reports whether one of the stacks is the keeper's.
func kpKeeperAmong(stacks []string) bool {
	for _, s := range stacks {
		if strings.Contains(s, "(*keeper[...]).run") {
			return true
		}
	}
	return false
}
